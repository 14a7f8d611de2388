"""A recorded live session saved as an evaluation set: its answered turns become T1 cases, imported as a new set or
a new version of one through the eval-set import service (:func:`training_jobs.eval_services.eval_set_import`).

This joins the runtime's recorded sessions with training's eval sets, so it lives here, in the upper layer; the
session pages and API (streams) reach it through ``settings.HAT_SAVE_SESSION_AS_EVAL_SET``
(:mod:`streams.services.session_eval_sets`).

Each answered turn (a reply that is no fallback and that no operator rejected) becomes one case exactly as a preview
turn does with "save as eval case" (:func:`training_jobs.evals.turn_case.case_from_turn`): the room state and the
comments the turn started from, the binding calls that returned results as ``expected_tools``, the reply skills
loaded, and as ``gold_facts`` the figures and names of the recorded tool results that the gold reply states. The gold
reply is what was said: the text an operator approved or edited when there is one, else the turn's reply.

Who may (the eval-set code's permissions): VIEW_LIVE to read the session and SAVE_EVAL_CASE to turn recorded turns
into cases (a new set, or a new version of a set with the session's cases appended — as saving a preview turn
does); replacing a set's cases with only this session's (``append=False`` on an existing set) is an import, and
also needs IMPORT_EVAL_SET.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from console import roles
from console.errors import NotAllowed, ValidationFailed
from console.services import audit_record
from harness_editor.models import HarnessVersion
from harness_editor.schemas import ManifestError
from streams import replay_selectors as selectors
from streams.services.session_eval_sets import default_set_name
from training_jobs import eval_selectors
from training_jobs.eval_models import EvalSet
from training_jobs.eval_services import _check_name, eval_set_import, rows_jsonl
from training_jobs.evals.cases import case_to_json
from training_jobs.evals.turn_case import TurnCaseError, case_from_turn

MAX_TAGS = 20


def _failed(message: str, path: str, detail: str) -> ValidationFailed:
    return ValidationFailed(message, errors=[{"path": path, "message": detail}])


def _gold(turn: dict[str, Any]) -> tuple[str, str]:
    """(gold reply, why the turn is left out or "")."""
    reply = turn.get("reply") or {}
    if reply.get("fallback"):
        return "", f"the turn ended with the fallback line ({reply.get('reason') or 'fallback'})"
    if turn.get("rejected"):
        return "", "an operator rejected the reply"
    text = turn.get("spoken") if turn.get("spoken") is not None else reply.get("text")
    if not (text or "").strip():
        return "", "nothing was said"
    return text.strip(), ""


def session_cases(*, session, turn_ids: Sequence[str] | None = None, tags: Sequence[str] = ()
                  ) -> tuple[list[Any], list[dict[str, str]]]:
    """The T1 cases the session's answered turns give (all, or those of ``turn_ids`` in session order), and the
    turns left out with why: ``[{turn_id, reason}]``. ValidationFailed at ``turn_ids[i]`` for a turn the session
    does not have."""
    turns = selectors.session_turns(session=session)
    if turn_ids is not None:
        known = {t["turn_id"] for t in turns}
        for i, turn_id in enumerate(turn_ids):
            if not isinstance(turn_id, str) or turn_id not in known:
                raise _failed("that turn is not an answered turn of this session", f"turn_ids[{i}]",
                              f"no answered turn {str(turn_id)[:64]!r} in this session")
        wanted = set(turn_ids)
        turns = [t for t in turns if t["turn_id"] in wanted]
    versions: dict[Any, Any] = {}
    cases, left_out = [], []
    short = str(session.pk)[:8]
    for turn in turns:
        gold, why = _gold(turn)
        info = (turn.get("started") or {}).get("version") or {}
        if not why and turn["replay_room"] is None:
            why = "the turn did not record the room state it started from"
        if not why:
            key = info.get("id")
            if key not in versions:
                versions[key] = HarnessVersion.objects.select_related("harness").filter(
                    pk=key if isinstance(key, int) and not isinstance(key, bool) else None).first()
            if versions[key] is None:
                why = "the harness version the turn ran under is no longer on record"
        if why:
            left_out.append({"turn_id": turn["turn_id"], "reason": why})
            continue
        version = versions[info.get("id")]
        folded = dict(turn, comments=turn["replay_comments"])
        try:
            cases.append(case_from_turn(
                turn=folded, manifest=version.manifest, harness=f"{version.harness.slug}@{version.number}",
                gold_reply=gold, tags=[*tags, "live-session", f"session-{short}"],
                source=f"live:{session.pk}#{turn['turn_id']}"))
        except (TurnCaseError, ManifestError) as exc:
            left_out.append({"turn_id": turn["turn_id"], "reason": str(getattr(exc, "message", exc))[:300]})
    return cases, left_out


def live_session_save_as_eval_set(*, user, session, set_name: str = "", append: bool = True,
                                  turn_ids: Sequence[str] | None = None, tags: Sequence[str] = (), note: str = "",
                                  description: str = "") -> dict[str, Any]:
    """Save the session's answered turns (or those of ``turn_ids``) as T1 cases of the set ``set_name`` (default
    :func:`default_set_name`; created when missing). ``append``: the new version holds the set's latest cases plus
    this session's (a turn saved before is not added twice); otherwise exactly this session's cases. Returns
    ``{"version", "created", "cases": [case ids added], "left_out": [{turn_id, reason}]}``; ``created`` is False
    when the set already holds exactly these cases (nothing stored). NotAllowed (403) without the permissions (module
    docstring); ValidationFailed at ``set_name``, ``turn_ids[i]``, ``tags[i]``, ``note``, ``description`` or
    ``session`` (no turn can become a case), nothing saved."""
    if not user.has_perm(roles.VIEW_LIVE):
        raise NotAllowed("your role does not allow you to see live sessions")
    if not user.has_perm(roles.SAVE_EVAL_CASE):
        raise NotAllowed("your role does not save eval cases")
    set_name = _check_name(set_name or default_set_name(session), "set_name")
    if isinstance(tags, str) or not isinstance(tags, Sequence) or len(tags) > MAX_TAGS:
        raise _failed("tags must be a list", "tags", f"a list of at most {MAX_TAGS} tags")
    for i, tag in enumerate(tags):
        if not isinstance(tag, str) or not tag.strip() or len(tag) > 64:
            raise _failed("a tag must be short text", f"tags[{i}]", "text, 1 to 64 characters")
    if turn_ids is not None and (isinstance(turn_ids, str) or not isinstance(turn_ids, Sequence)):
        raise _failed("turn_ids must be a list", "turn_ids", "a list of turn ids (empty: every answered turn)")
    existing = EvalSet.objects.filter(name=set_name).first()
    if existing is not None and existing.kind != EvalSet.Kind.T1:
        raise _failed("the eval set has another kind", "set_name",
                      f"set {set_name!r} is a {existing.kind} set: a session's turns are T1 cases")
    if existing is not None and not append and not user.has_perm(roles.IMPORT_EVAL_SET):
        raise NotAllowed("replacing an eval set's cases is an import: your role may only append to it")
    cases, left_out = session_cases(session=session, turn_ids=list(turn_ids) if turn_ids else None,
                                    tags=[t.strip() for t in tags])
    if not cases:
        raise ValidationFailed("no turn of this session can become a case", errors=[
            {"path": "session", "message": "; ".join(f"{o['turn_id'][:8]}: {o['reason']}" for o in left_out[:5])
             or "the session has no answered turn"}])
    new_rows = [{"case_id": c.id, "case_json": case_to_json(c)} for c in cases]
    with transaction.atomic():
        if existing is not None and append:
            locked = EvalSet.objects.select_for_update().get(pk=existing.pk)
            latest = eval_selectors.eval_set_latest(eval_set=locked)
            rows = eval_selectors.eval_case_rows(version=latest) if latest is not None else []
            have = {r["case_id"] for r in rows}
            added = [r for r in new_rows if r["case_id"] not in have]
            left_out += [{"turn_id": r["case_id"].removeprefix("turn-"), "reason": f"already case {r['case_id']!r} of "
                          f"{set_name}"} for r in new_rows if r["case_id"] in have]
            rows = rows + added
        else:
            added = rows = new_rows
        version, created = eval_set_import(
            user=user, name=set_name, kind=EvalSet.Kind.T1, jsonl_text=rows_jsonl(rows),
            note=note or f"{len(added)} turn(s) of live session {session.title!r} ({str(session.pk)[:8]})",
            description=description or ("" if existing is not None else
                                        f"Answered turns of live sessions (first: {session.title})"))
        if created:
            audit_record(actor=user, action="live_session.saved_as_eval_set", scope=f"live_session:{session.pk}",
                         target=f"eval_set:{set_name}@{version.number}", to_state=f"v{version.number}",
                         comment=note, data={"session": str(session.pk), "cases": [r["case_id"] for r in added],
                                             "left_out": len(left_out), "append": bool(append)})
    return {"version": version, "created": created, "cases": [r["case_id"] for r in added], "left_out": left_out}
