"""Writes of eval sets: import a set (or a new version of one) from JSON lines, save a recorded turn as a case, pin
a version for the approval gate, seed the sets the project ships; and the export, which gives back the bytes.

Versions work like harness versions: immutable, content-hashed (:func:`training_jobs.evals.cases.content_hash`,
the sha256 of the canonical JSON lines), numbered per set, each with its parent, author and change note. The same
cases twice never make a second version: the existing one is returned. Every write is one transaction with its
audit event (scope ``eval_set:<name>``). Bad input raises :class:`console.errors.ValidationFailed` with located
errors — ``line 12.comments[0].text`` for a case, ``name``, ``kind``, ``gold_reply`` … for the request — and saves
nothing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import Max

from console import roles
from console.errors import DomainError, NotAllowed, ValidationFailed
from console.services import audit_record
from harness_editor.models import HarnessVersion
from harness_editor.schemas import ManifestError
from training_jobs import eval_selectors as selectors
from training_jobs.eval_models import EVAL_SET_NAME_RE, EvalCase, EvalSet, EvalSetVersion
from training_jobs.evals.cases import (
    CASE_KINDS,
    EVAL_SETS,
    EvalCase as Case,
    EvalSetError,
    case_to_json,
    parse_case,
    read_cases,
)

MAX_IMPORT_BYTES = 20 * 1024 * 1024  # one set's JSON lines (T1–T3 as built are well under 2 MB)
MAX_NOTE_CHARS = 2000
MAX_SEARCH_CHARS = 20_000
IFEVAL_PATH = Path(__file__).resolve().parents[1] / "data" / "ifeval" / "input_data.jsonl"
T4_SET_NAME = "t4-ifeval"
TURN_SET_DEFAULT = "preview-regressions"  # where saved turns go unless the user picks another set
RESERVED_NAMES = frozenset({"import", "save-turn"})  # addresses of the eval-set pages


class TurnNotFound(DomainError):
    """The turn does not exist in a room the user may see (a hidden room looks the same as a missing one)."""

    status_code = 404
    code = "not_found"


def _scope(name: str) -> str:
    return f"eval_set:{name}"


def _failed(message: str, path: str, detail: str) -> ValidationFailed:
    return ValidationFailed(message, errors=[{"path": path, "message": detail}])


# --- what a case row holds besides its line ------------------------------------------------------------------


def case_facets(case: Case) -> list[tuple[str, str]]:
    """The kind-specific values a case is filtered by (training_jobs.eval_selectors.FACETS)."""
    out: list[tuple[str, str]] = []
    out += [("intent", i) for i in case.intents]
    out += [("tool", t.binding or t.tool) for t in case.expected_tools]
    out += [("skill", s) for s in case.expected_skills]
    out += [("claim", c.kind) for c in case.forbidden_claims]
    out += [("fault", f.kind) for f in case.tool_faults.values()]
    if case.harness:
        out.append(("harness", case.harness))
    variant = case.harness_variant
    if variant is not None:
        if variant.level:
            out.append(("level", variant.level))
        out += [("operator", op.name) for op in variant.operators]
    for instruction in case.instruction_id_list:
        out += [("instruction", instruction), ("instruction_group", instruction.split(":", 1)[0])]
    return list(dict.fromkeys((k, v.replace("|", "")) for k, v in out))


def _search_text(case: Case) -> str:
    parts = [case.id, case.gold_reply, case.prompt, case.source, " ".join(case.tags)]
    parts += [c.text for c in case.comments]
    parts += [f"{c.text} {c.pattern}" for c in case.forbidden_claims]
    parts += [f.say for f in case.gold_facts]
    return " ".join(p for p in parts if p).casefold()[:MAX_SEARCH_CHARS]


def case_row(case: Case) -> dict[str, Any]:
    """A case as the row fields of :class:`EvalCase` (its canonical line and what the browser filters on)."""
    tags = list(case.tags)
    return {"case_id": case.id, "tags": tags, "tags_text": "".join(f"|{t}" for t in tags) + "|" if tags else "",
            "facets_text": "".join(f"|{k}={v}" for k, v in case_facets(case)) + "|",
            "search_text": _search_text(case), "case_json": case_to_json(case)}


def _facet_counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        for tag in row["tags"]:
            counts.setdefault("tag", {})
            counts["tag"][tag] = counts["tag"].get(tag, 0) + 1
        for item in row["facets_text"].strip("|").split("|"):
            if "=" in item:
                key, value = item.split("=", 1)
                bucket = counts.setdefault(key, {})
                bucket[value] = bucket.get(value, 0) + 1
    return counts


def rows_jsonl(rows: Iterable[Mapping[str, Any]]) -> str:
    """The JSON lines of case rows (what :func:`training_jobs.evals.cases.cases_to_jsonl` writes)."""
    return "".join(r["case_json"] + "\n" for r in rows)


# --- versions -------------------------------------------------------------------------------------------------


def _check_name(name: Any, path: str = "name") -> str:
    if not isinstance(name, str) or not name.strip():
        raise _failed("the eval set needs a name", path, "required")
    name = name.strip()
    if len(name) > 64 or not re.match(EVAL_SET_NAME_RE, name):
        raise _failed("the eval set name is not valid", path,
                      "at most 64 characters: lowercase letters, digits, '-' and '_', starting with a letter or digit")
    if name in RESERVED_NAMES:
        raise _failed("the eval set name is taken by a page", path, f"{name!r} is reserved: pick another name")
    return name


def _check_text(value: Any, path: str, limit: int = MAX_NOTE_CHARS) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _failed(f"{path} must be text", path, "must be a string")
    if len(value) > limit:
        raise _failed(f"{path} is too long", path, f"at most {limit} characters")
    return value.strip()


def _version_create(*, eval_set: EvalSet, rows: list[dict[str, Any]], user, note: str,
                    parent: EvalSetVersion | None) -> tuple[EvalSetVersion, bool]:
    """Inside the caller's transaction, with ``eval_set`` locked: the version holding exactly ``rows`` — the
    existing one when a version of this set has the same content hash, else a new one (number + 1)."""
    text = rows_jsonl(rows)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    existing = EvalSetVersion.objects.filter(eval_set=eval_set, content_hash=digest).first()
    if existing is not None:
        return existing, False
    number = (EvalSetVersion.objects.filter(eval_set=eval_set).aggregate(n=Max("number"))["n"] or 0) + 1
    version = EvalSetVersion.objects.create(
        eval_set=eval_set, number=number, parent=parent, author=user if getattr(user, "pk", None) else None,
        change_note=note, content_hash=digest, case_count=len(rows), size_bytes=len(text.encode("utf-8")),
        facet_counts=_facet_counts(rows))
    EvalCase.objects.bulk_create(
        (EvalCase(version=version, position=i, case_id=r["case_id"], tags=r["tags"], tags_text=r["tags_text"],
                  facets_text=r["facets_text"], search_text=r["search_text"], case_json=r["case_json"])
         for i, r in enumerate(rows)), batch_size=500)
    audit_record(actor=user, action="eval_set.version_created", scope=_scope(eval_set.name),
                 target=f"eval_set:{eval_set.name}@{number}", to_state=f"v{number}", comment=note,
                 data={"content_hash": digest, "cases": len(rows), "parent": parent.number if parent else None})
    return version, True


def _set_for_write(*, user, name: str, kind: str, description: str) -> tuple[EvalSet, bool]:
    """The set, locked (created when missing). A set keeps its kind."""
    eval_set = EvalSet.objects.select_for_update().filter(name=name).first()
    if eval_set is not None:
        if eval_set.kind != kind:
            raise _failed("the eval set has another kind", "kind",
                          f"set {name!r} is a {eval_set.kind} set; its versions stay {eval_set.kind}")
        return eval_set, False
    eval_set = EvalSet.objects.create(name=name, kind=kind, description=description,
                                      created_by=user if getattr(user, "pk", None) else None)
    audit_record(actor=user, action="eval_set.created", scope=_scope(name), target=f"eval_set:{name}",
                 to_state=kind, data={"kind": kind})
    return eval_set, True


def _line_numbers(text: str) -> list[int]:
    """The 1-based line of each case read_cases returns (it skips blank lines)."""
    return [i for i, line in enumerate(text.split("\n"), 1) if line.rstrip("\r\n").strip()]


def parse_jsonl(jsonl_text: Any, *, kind: str | None = None, path: str = "jsonl") -> list[Case]:
    """JSON lines → cases, all of ``kind``; ValidationFailed with one error per problem at ``line N.<path>``."""
    if isinstance(jsonl_text, bytes):
        if len(jsonl_text) > MAX_IMPORT_BYTES:
            raise _failed("the set is too large", path, f"at most {MAX_IMPORT_BYTES // (1024 * 1024)} MB")
        try:
            jsonl_text = jsonl_text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _failed("the set is not UTF-8 text", path, f"not UTF-8 at byte {exc.start}") from None
    if not isinstance(jsonl_text, str):
        raise _failed("the set must be JSON lines text", path, "must be a string")
    if len(jsonl_text) > MAX_IMPORT_BYTES or len(jsonl_text.encode("utf-8")) > MAX_IMPORT_BYTES:
        raise _failed("the set is too large", path, f"at most {MAX_IMPORT_BYTES // (1024 * 1024)} MB")
    jsonl_text = jsonl_text.removeprefix("\ufeff")
    try:
        cases = read_cases(jsonl_text.split("\n"))
    except EvalSetError as exc:
        errors = [{"path": (f"line {e.line}.{e.path}" if e.path else f"line {e.line}") if e.line else path,
                   "message": e.message} for e in exc.errors]
        raise ValidationFailed(f"the set has {len(errors)} problem{'s' if len(errors) != 1 else ''}",
                               errors=errors) from None
    if not cases:
        raise _failed("the set has no cases", path, "no cases: one JSON object per line")
    if kind is not None:
        lines = _line_numbers(jsonl_text)
        wrong = [{"path": f"line {n}.kind", "message": f"a {kind} set holds {kind} cases, not {c.kind}"}
                 for c, n in zip(cases, lines) if c.kind != kind]
        if wrong:
            raise ValidationFailed(f"{len(wrong)} case(s) of another kind", errors=wrong[:100])
    versioned = _tool_calls_on_versions(cases, _line_numbers(jsonl_text))
    if versioned:
        raise ValidationFailed(f"the set has {len(versioned)} problem{'s' if len(versioned) != 1 else ''}",
                               errors=versioned[:100])
    return cases


def _tool_calls_on_versions(cases: list[Case], lines: list[int]) -> list[dict[str, str]]:
    """Calls named by ``tool`` in cases written for a stored version ('slug@N' or 'slug@label': the demo harnesses
    were checked while parsing), checked against that version's tools through the real dispatcher. A reference
    that names no version on record is an error at the case's ``harness``: its calls could not be checked, and a
    case stored unchecked would be judged against tools nobody verified it names."""
    from harness_editor.models import Harness
    from harness_editor.selectors import harness_version_by_ref
    from training_jobs.evals.cases import names_tools
    from training_jobs.evals.open_calls import tool_call_errors

    errors: list[dict[str, str]] = []
    versions: dict[str, Any] = {}
    for case, line in zip(cases, lines):
        if not names_tools(case) or "@" not in case.harness:
            continue
        if case.harness not in versions:
            versions[case.harness] = harness_version_by_ref(case.harness)
        version = versions[case.harness]
        if version is None:
            slug, _, tail = case.harness.rpartition("@")
            if not Harness.objects.filter(slug=slug).exists():
                why = f"there is no harness {slug!r} in this console"
            else:
                why = f"{slug} has no version {tail}" if tail.isdigit() else \
                    f"{slug} has no version or label {tail!r}"
            errors.append({"path": f"line {line}.harness", "message": f"{why}: its tool calls cannot be checked"})
            continue
        errors += [{"path": f"line {line}.{e.path}", "message": e.message}
                   for e in tool_call_errors(case, version.manifest)]
    return errors


def eval_set_import(*, user, name: str, kind: str, jsonl_text: str | bytes, note: str = "",
                    description: str = "") -> tuple[EvalSetVersion, bool]:
    """Import JSON lines as a version of the set ``name`` (created, of ``kind``, when missing). Returns
    ``(version, created)``: the same cases as an existing version of the set give that version back (created
    False) and store nothing. ValidationFailed: ``name``, ``kind``, ``note``, ``description``, ``jsonl`` (too
    large, not UTF-8, no cases) and ``line N.<path>`` for each bad case."""
    name = _check_name(name)
    if kind not in CASE_KINDS:
        raise _failed("unknown eval set kind", "kind", f"one of {', '.join(CASE_KINDS)}")
    note = _check_text(note, "note")
    description = _check_text(description, "description")
    cases = parse_jsonl(jsonl_text, kind=kind)
    rows = [case_row(c) for c in cases]
    with transaction.atomic():
        eval_set, _new = _set_for_write(user=user, name=name, kind=kind, description=description)
        if description and eval_set.description != description:
            eval_set.description = description
            eval_set.save(update_fields=["description"])
        parent = selectors.eval_set_latest(eval_set=eval_set)
        return _version_create(eval_set=eval_set, rows=rows, user=user, note=note or "imported", parent=parent)


def eval_set_export(*, version: EvalSetVersion) -> str:
    """The version's cases as JSON lines: byte for byte the canonical file of the same cases (its sha256 is the
    version's content hash)."""
    return rows_jsonl(EvalCase.objects.filter(version=version).order_by("position").values("case_json"))


def eval_set_pin(*, user, eval_set: EvalSet, version: EvalSetVersion | None) -> EvalSet:
    """Pin ``version`` (one of the set's) as what the approval gate evaluates on; None unpins. Recorded."""
    if not user.has_perm(roles.PIN_EVAL_SET):
        raise NotAllowed("only an ML lead pins eval set versions")
    if version is not None and version.eval_set_id != eval_set.pk:
        raise _failed("that version belongs to another set", "number", "not a version of this set")
    with transaction.atomic():
        locked = EvalSet.objects.select_for_update().get(pk=eval_set.pk)
        before = locked.pinned
        if (before.pk if before else None) == (version.pk if version else None):
            return locked
        locked.pinned = version
        locked.save(update_fields=["pinned"])
        audit_record(actor=user, action="eval_set.pinned" if version else "eval_set.unpinned",
                     scope=_scope(locked.name), target=f"eval_set:{locked.name}",
                     from_state=f"v{before.number}" if before else "", to_state=f"v{version.number}" if version else "")
    return locked


# --- seeding ----------------------------------------------------------------------------------------------------


def ifeval_cases(path: Path = IFEVAL_PATH) -> list[Case]:
    """The 541 IFEval prompts (read by :func:`training_jobs.evals.ifeval.load_prompts`) as T4 cases
    (``ifeval-<key>``, tagged with their instruction groups)."""
    from training_jobs.evals.ifeval import load_prompts

    cases = []
    for p in load_prompts(path):
        groups = list(dict.fromkeys(i.split(":", 1)[0] for i in p.instruction_ids))
        cases.append(parse_case({"id": f"ifeval-{p.key}", "kind": "t4", "prompt": p.prompt,
                                 "instruction_id_list": list(p.instruction_ids), "kwargs": [dict(k) for k in p.kwargs],
                                 "tags": groups, "source": "data/ifeval/input_data.jsonl"}))
    return cases


def _seed(name: str, kind: str, description: str, cases: list[Case], source: str) -> EvalSetVersion:
    rows = [case_row(c) for c in cases]
    with transaction.atomic():
        eval_set, _new = _set_for_write(user=None, name=name, kind=kind, description=description)
        parent = selectors.eval_set_latest(eval_set=eval_set)
        version, _created = _version_create(eval_set=eval_set, rows=rows, user=None,
                                            note=f"seeded from {source}", parent=parent)
        if eval_set.pinned_id is None:  # the first seeded version is what the gate uses until someone re-pins
            eval_set.pinned = version
            eval_set.save(update_fields=["pinned"])
            audit_record(actor=None, action="eval_set.pinned", scope=_scope(name), target=f"eval_set:{name}",
                         to_state=f"v{version.number}", comment="pinned when seeded")
    return version


def eval_sets_seed_demo() -> list[EvalSetVersion]:
    """The sets the project ships — T1–T3 from ``data/evals/`` (training_jobs.evals.cases.EVAL_SETS), T4 from
    ``data/ifeval/`` — each file that is present. Idempotent: unchanged files add nothing; a changed file adds a
    version (the pin stays where it was)."""
    out = []
    for spec in EVAL_SETS.values():
        if spec.path.is_file():
            out.append(_seed(spec.name, spec.kind, spec.description, spec.load(), f"data/evals/{spec.file}"))
    if IFEVAL_PATH.is_file():
        out.append(_seed(T4_SET_NAME, "t4", "The 541 IFEval prompts with verifiable instructions (prompt and "
                         "instruction level, strict and loose).", ifeval_cases(), "data/ifeval/input_data.jsonl"))
    return out


# --- a recorded turn as a case -----------------------------------------------------------------------------------


def _harness_ref(turn: Mapping[str, Any]) -> tuple[HarnessVersion, str]:
    info = turn.get("version") or {}
    version = HarnessVersion.objects.select_related("harness").filter(pk=info.get("id")).first()
    if version is None:
        raise _failed("the turn's harness version is not on record", "turn_id",
                      "the harness version this turn ran under no longer exists")
    return version, f"{version.harness.slug}@{version.number}"


def eval_case_save_from_turn(*, user, room, turn_id: str, set_name: str, gold_reply: str,
                             tags: Sequence[str] = (), note: str = "",
                             forbidden_claims: Sequence[Mapping[str, Any]] = ()) -> tuple[EvalSetVersion, str]:
    """A finished turn of a preview room or scenario run (``room``: a streams PreviewRoom) becomes a new case,
    appended to a new version of the T1 set ``set_name`` (created when missing). The case keeps the comments and
    the room state the turn started from; gold facts and expected tools come from the turn's successful tool
    calls (training_jobs.evals.turn_case); ``gold_reply`` (as the user edited it), ``tags`` and
    ``forbidden_claims`` (``[{kind, text, pattern?, link_id?, allowed?}]``) from the user. Returns
    ``(version, case_id)``. TurnNotFound (404) when the user may not see the room or the turn is not in it;
    ValidationFailed at ``turn_id``, ``set_name``, ``gold_reply``, ``tags[i]``, ``forbidden_claims[i].<field>``."""
    from streams import selectors as stream_selectors
    from training_jobs.evals.turn_case import TurnCaseError, case_from_turn

    if not user.has_perm(roles.SAVE_EVAL_CASE):
        raise NotAllowed("your role does not save eval cases")
    if stream_selectors.preview_room_access(user=user, room=room) is None:
        raise TurnNotFound("no such preview room")
    if not isinstance(turn_id, str) or not turn_id or len(turn_id) > 64:
        raise TurnNotFound("no such turn in this room")
    set_name = _check_name(set_name or TURN_SET_DEFAULT, "set_name")
    note = _check_text(note, "note")
    if not isinstance(gold_reply, str) or not gold_reply.strip():
        raise _failed("write the gold reply", "gold_reply", "required: the reply the avatar should have given")
    gold_reply = _check_text(gold_reply, "gold_reply")
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise _failed("tags must be a list", "tags", "a list of tags")
    for i, tag in enumerate(tags):
        if not isinstance(tag, str):
            raise _failed("a tag must be text", f"tags[{i}]", "must be a string")
    if isinstance(forbidden_claims, (str, Mapping)) or not isinstance(forbidden_claims, Sequence):
        raise _failed("forbidden claims must be a list", "forbidden_claims", "a list of claims")
    for i, claim in enumerate(forbidden_claims):
        if not isinstance(claim, Mapping):
            raise _failed("a forbidden claim must be an object", f"forbidden_claims[{i}]",
                          "an object: {kind, text, pattern, link_id, allowed}")
    turn = selectors.preview_turn(room_id=room.pk, turn_id=turn_id)
    if turn is None:
        raise TurnNotFound("no such turn in this room")
    harness_version, harness = _harness_ref(turn)
    source_tag = "scenario-run" if room.is_run else "preview"
    try:
        case = case_from_turn(turn=turn, manifest=harness_version.manifest, harness=harness, gold_reply=gold_reply,
                              tags=[*tags, source_tag], forbidden_claims=forbidden_claims,
                              source=f"{'run' if room.is_run else 'preview'}:{room.pk}#{turn_id}")
    except TurnCaseError as exc:
        raise _failed(exc.message, exc.path, exc.message) from None
    except ManifestError as exc:
        raise ValidationFailed("the case is invalid", errors=[{"path": e.path, "message": e.message}
                                                               for e in exc.errors]) from None
    with transaction.atomic():
        eval_set, _new = _set_for_write(user=user, name=set_name, kind=EvalSet.Kind.T1,
                                        description="Cases saved from preview and scenario-run turns")
        parent = selectors.eval_set_latest(eval_set=eval_set)
        rows = selectors.eval_case_rows(version=parent) if parent else []
        clash = next((r for r in rows if r["case_id"] == case.id), None)
        if clash is not None:
            raise _failed("this turn is already a case of the set", "turn_id",
                          f"already saved as case {case.id!r} (v{parent.number} of {set_name})")
        rows.append(case_row(case))
        version, _created = _version_create(
            eval_set=eval_set, rows=rows, user=user, parent=parent,
            note=note or f"saved turn {turn_id[:8]} of {source_tag} {str(room.pk)[:8]} as {case.id}")
        audit_record(actor=user, action="eval_case.saved_from_turn", scope=_scope(set_name),
                     target=f"eval_set:{set_name}@{version.number}", to_state=case.id, comment=note,
                     data={"room": str(room.pk), "turn_id": turn_id, "case_id": case.id, "kind": room.kind})
    return version, case.id
