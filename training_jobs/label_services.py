"""Human labels (writes): a reviewer labels one judged sample of an evaluation run.

A label is the reviewer's own verdict — accuracy 0 / 1, effectiveness 0 / 0.5 / 1, an optional note — given before
they see the rules' or the judges' verdict. One label per reviewer and sample, never edited afterwards (it would no
longer be blind): a second one is refused (409 ``already_labelled``). Compliance reviewers and ML staff label
(``training_jobs.label_evalresult``).
"""

from __future__ import annotations

import math
from typing import Any

from django.db import IntegrityError, transaction

from console import roles
from console.errors import DomainError, NotAllowed, ValidationFailed
from training_jobs.eval_run_models import EvalResult
from training_jobs.label_models import NOTE_MAX, HumanLabel


class AlreadyLabelled(DomainError):
    status_code = 409
    code = "already_labelled"


def _accuracy(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
        if value not in ("0", "1"):
            return None
        return int(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return int(value)
    return None


def _effectiveness(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, (int, float)) and math.isfinite(value) and float(value) in (0.0, 0.5, 1.0):
        return float(value)
    return None


def human_label_create(*, user, result: EvalResult, accuracy: Any, effectiveness: Any, note: Any = "") -> HumanLabel:
    """Store ``user``'s label of ``result``. NotAllowed without the labelling permission; ValidationFailed (paths
    ``accuracy``, ``effectiveness``, ``note``, ``result``) for a bad label or a sample that cannot be labelled (T4,
    or a case that could not be run); AlreadyLabelled for a second label of the same sample by the same person."""
    if not user.has_perm(roles.LABEL_EVAL):
        raise NotAllowed("your role does not allow you to label evaluation results")
    errors: list[dict[str, str]] = []
    acc = _accuracy(accuracy)
    if acc is None:
        errors.append({"path": "accuracy", "message": "0 (a factual error, unsupported claim or false promise) or 1"})
    eff = _effectiveness(effectiveness)
    if eff is None:
        errors.append({"path": "effectiveness", "message": "0, 0.5 or 1"})
    if note is None:
        note = ""
    if not isinstance(note, str) or len(note) > NOTE_MAX or "\x00" in note:
        errors.append({"path": "note", "message": f"text of at most {NOTE_MAX} characters"})
        note = ""
    if result.run.kind == "t4":
        errors.append({"path": "result", "message": "IFEval (T4) samples are scored by IFEval's checkers, not labelled"})
    elif result.error:
        errors.append({"path": "result", "message": "this sample could not be run: there is no reply to label"})
    if errors:
        raise ValidationFailed("the label is not valid", errors=errors)
    if HumanLabel.objects.filter(reviewer=user, result=result).exists():
        raise AlreadyLabelled("you have labelled this sample already (labels are blind: they are not changed after "
                              "the verdicts were shown)")
    try:
        with transaction.atomic():
            return HumanLabel.objects.create(reviewer=user, result=result, accuracy=acc, effectiveness=eff,
                                             note=note.strip())
    except IntegrityError:  # the same person, twice at once
        raise AlreadyLabelled("you have labelled this sample already") from None
