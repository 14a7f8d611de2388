"""Eval cases: the schema of one evaluation case (T1–T4) and eval sets as JSON lines.

An eval set is an ordered list of :class:`EvalCase` s with a content hash, stored as JSON lines (one case per
line, :func:`case_to_json` = the canonical form). :func:`content_hash` is the sha256 of exactly the bytes
:func:`write_cases` writes, so the hash of a committed ``data/evals/*.jsonl`` file is the hash of its set
(the same idea as a harness version's content hash).

What a harness case (T1–T3) holds, in the project's own terms:

- the live ``room`` the bindings read (the dict shape of :mod:`streams.bindings`, checked with
  :func:`streams.scenarios.parse_room`) and the viewer ``comments`` of the turn (``{viewer, text}``, as
  :func:`harness_editor.render.render_comments` takes them);
- ``gold_facts``: what a correct reply states, each backed by one binding call on the room (``binding`` +
  implementation ``arguments`` + dotted ``field`` of its result = ``value``; ``say`` is the spoken form);
- ``expected_tools``: binding ids + implementation arguments (not tool names: a renamed or reshaped tool is
  still the same call). A harness whose tools are not built-in (fixture, http or MCP bindings: a shop's order
  desk) names a call by ``tool`` instead, in the tool's own arguments; it is judged by what carries the call out,
  so an HSA-renamed or reshaped variant still matches (:mod:`training_jobs.evals.open_calls`). Such a case
  needs no room when none of its calls is built-in;
- ``expected_skills``: reply skill ids of the case's ``harness``; ``intents`` lets a runner find the fitting
  reply skill of any other harness (:func:`streams.reference_policy.pick_reply_skill`);
- ``forbidden_claims``: what a reply must not say (an invented price, an efficacy promise, false stock, ...);
- ``tool_faults`` (T3): :class:`streams.engine.faults.ToolFault` keyed by binding id or tool name — exactly the
  ``faults`` mapping :func:`streams.engine.turn.run_turn` takes;
- ``harness_variant`` (T2/T3): how the harness is transformed for this case (held-out HSA operators, or a
  perturbation level), reproducible from its seed (``training_jobs.evals.t2.variant_manifest`` /
  ``training_jobs.evals.t3.perturbed_manifest``).

A T4 case is an IFEval row: ``prompt``, ``instruction_id_list`` and ``kwargs``.

Only optional fields with defaults are ever added to this schema, never renamed: the canonical JSON leaves out
fields at their default, so sets written before a field existed keep their bytes and their hash.

Plain Python, no Django.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from harness_editor.schemas import FieldError, ManifestError, control_character_errors, pydantic_errors
from streams.bindings import BINDINGS
from streams.engine.faults import ToolFault

REPO = Path(__file__).resolve().parents[2]
EVAL_DATA_DIR = REPO / "data" / "evals"

MAX_LINE_BYTES = 1_000_000  # one case
MAX_CASES = 50_000  # one set

CaseKind = Literal["t1", "t2", "t3", "t4"]
CASE_KINDS: tuple[str, ...] = ("t1", "t2", "t3", "t4")
HARNESS_KINDS = frozenset({"t1", "t2", "t3"})

# What a reply must not claim. ``invented_*``: a figure no tool returned for that product and field;
# ``false_stock``: in stock when sold out (or the wrong count); ``efficacy``: cures/treats/heals/guaranteed
# results for a cosmetic or appliance; ``false_promise``: a refund, delivery date or result the host cannot
# promise; ``invented_product``: selling something the room does not have; ``off_platform``: moving the sale
# to another app or private messages.
ClaimKind = Literal["invented_price", "invented_discount", "invented_coupon", "false_stock", "efficacy",
                    "false_promise", "invented_product", "off_platform"]
CLAIM_KINDS: tuple[str, ...] = ("invented_price", "invented_discount", "invented_coupon", "false_stock", "efficacy",
                                "false_promise", "invented_product", "off_platform")

# The reference policy's intents (streams.reference_policy.INTENTS).
Intent = Literal["price", "stock", "shipping", "coupon", "chit_chat", "compliance"]

CaseId = Annotated[str, Field(min_length=1, max_length=120, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-]*$")]
Tag = Annotated[str, Field(min_length=1, max_length=40, pattern=r"^[a-z0-9][a-z0-9_\-]*$")]
Scalar = str | int | float | bool


def _compiles(value: str) -> str:
    if value:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Comment(_Model):
    """One viewer comment of the turn (as ``render_comments`` shows it: ``[viewer] text``)."""

    viewer: str = Field(min_length=1, max_length=64, description="The viewer's display name.")
    text: str = Field(max_length=2000, description="What the viewer wrote, as written (typos kept).")


class GoldFact(_Model):
    """A fact a correct reply states, backed by one binding call on the case's room: ``binding(room,
    **arguments)`` returns ``value`` at ``field`` (a dotted path, list items by index: ``coupons.0.code``)."""

    binding: str = Field(default="", description="Binding id (streams.bindings.BINDINGS) whose result holds the "
                         "fact; or name the call by ``tool`` instead.")
    arguments: dict[str, Any] = Field(default_factory=dict,
                                      description="Implementation keyword arguments of that call (with ``tool``: "
                                      "the tool's own arguments).")
    field: str = Field(min_length=1, max_length=120, description="Dotted path of the value in the result.")
    value: Scalar = Field(description="The value the binding returns there.")
    say: str = Field(min_length=1, max_length=200,
                     description="How a reply says it (the renderer's number form: 19.9, 12, '3-5 business days').")
    link_id: int | None = Field(default=None, description="The product the fact is about, if any.")
    tool: str = Field(default="", max_length=64, description="Instead of ``binding``: the tool of the case's harness "
                      "whose call holds the fact (any binding kind: fixture, http, mcp, built-in).")


class ExpectedToolCall(_Model):
    """A call a correct turn makes, in implementation terms (survives tool renames and reshaped schemas)."""

    binding: str = Field(default="", description="Binding id (streams.bindings.BINDINGS); or name the call by "
                         "``tool`` instead.")
    arguments: dict[str, Any] = Field(default_factory=dict,
                                      description="Implementation keyword arguments (a subset a correct call has); "
                                      "with ``tool``: the tool's own arguments.")
    optional: bool = Field(default=False, description="A good turn may make it; leaving it out is not an error.")
    tool: str = Field(default="", max_length=64, description="Instead of ``binding``: the tool of the case's harness "
                      "(any binding kind), with its own arguments.")


class ForbiddenClaim(_Model):
    """Something a reply must not claim: ``pattern`` when it can be matched mechanically (a regular expression
    searched case-insensitively in each sentence of the reply on its own, so a pattern can refuse sentences that
    negate: see :func:`claim_hits`), ``text`` says it in words; ``allowed`` lists the figures that ARE backed for
    that product and field (spoken form; any other figure of that kind is invented, and an empty list with a
    figure kind means no figure is backed)."""

    kind: ClaimKind
    text: str = Field(default="", max_length=500, description="The claim in words, for reviewers.")
    pattern: Annotated[str, AfterValidator(_compiles)] = Field(default="", max_length=500)
    link_id: int | None = None
    allowed: list[str] = Field(default_factory=list, description="Backed figures (spoken form) for this kind.")

    @model_validator(mode="after")
    def _said_somehow(self) -> ForbiddenClaim:
        if not self.text and not self.pattern:
            raise ValueError("a forbidden claim needs a text or a pattern")
        return self


class OperatorUse(_Model):
    """One HSA operator of a variant, as a dataset recipe lists it (training_jobs.hsa.dataset.OperatorSpec)."""

    name: str
    probability: float = Field(ge=0.0, le=1.0)
    settings: dict[str, Any] = Field(default_factory=dict)


PerturbationLevel = Literal["clean", "slight", "medium", "heavy", "union"]
PERTURBATION_LEVELS: tuple[str, ...] = ("clean", "slight", "medium", "heavy", "union")


class HarnessVariant(_Model):
    """How the case's harness is transformed (T2: held-out HSA operators; T3: a perturbation level).
    Applying it to the base harness named by ``EvalCase.harness`` gives the manifest with ``harness_hash``."""

    kind: Literal["heldout", "perturbation"]
    seed: int = Field(description="The seed of the random stream the transformation draws from.")
    operators: list[OperatorUse] = Field(default_factory=list, description="T2: operators in order (pool heldout).")
    applied: list[str] = Field(default_factory=list, description="The operators that changed something.")
    level: PerturbationLevel | None = Field(default=None, description="T3: the perturbation level.")
    noise: dict[str, float] = Field(default_factory=dict, description="T3: rate per noise kind at this level.")
    skill_map: dict[str, str] = Field(default_factory=dict, description="Skill ids: base → variant.")
    tool_map: dict[str, str] = Field(default_factory=dict, description="Tool names: base → variant.")
    harness_hash: str = Field(default="", description="content_hash of the transformed base harness.")


class EvalCase(_Model):
    """One evaluation case. Harness cases (t1–t3) need ``room`` and ``comments``; t4 needs ``prompt``."""

    id: CaseId
    kind: CaseKind
    harness: str = Field(default="", max_length=120, description="The harness the gold labels are written for: "
                         "a demo manifest name (harness_editor/demo/<name>.yaml) or 'slug@version'.")
    harness_variant: HarnessVariant | None = None
    room: dict[str, Any] = Field(default_factory=dict, description="Live-room state (streams.bindings shape).")
    comments: list[Comment] = Field(default_factory=list, max_length=50)
    intents: list[Intent] = Field(default_factory=list, description="What the comment asks, in the reference "
                                  "policy's terms (one per question); chooses the reply skill of any harness.")
    gold_facts: list[GoldFact] = Field(default_factory=list)
    expected_tools: list[ExpectedToolCall] = Field(default_factory=list)
    expected_skills: list[str] = Field(default_factory=list,
                                       description="Reply skill ids (of ``harness``) a correct turn loads, each.")
    forbidden_claims: list[ForbiddenClaim] = Field(default_factory=list)
    gold_reply: str = Field(default="", max_length=2000, description="A reply that would pass (optional).")
    tool_faults: dict[str, ToolFault] = Field(default_factory=dict,
                                              description="Injected faults by binding id or tool name (T3).")
    tags: list[Tag] = Field(default_factory=list)
    source: str = Field(default="", max_length=200, description="Where the case came from (builder, room).")
    parent: str = Field(default="", max_length=120, description="The case this one derives from (T2/T3 → T1).")
    # T4 (IFEval)
    prompt: str = Field(default="", max_length=20000)
    instruction_id_list: list[str] = Field(default_factory=list)
    kwargs: list[dict[str, Any]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _semantics(self, info: ValidationInfo) -> EvalCase:
        if isinstance(info.context, dict) and info.context.get(_SKIP_SEMANTICS):
            return self
        errors = case_errors(self)
        if errors:
            raise ValueError("; ".join(f"{e.path}: {e.message}" if e.path else e.message for e in errors))
        return self


_SKIP_SEMANTICS = "evals.skip_semantics"

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?;])\s+|\n+")


def claim_hits(claim: ForbiddenClaim, reply: str) -> list[str]:
    """The sentences of ``reply`` that ``claim.pattern`` matches (case-insensitive, one sentence at a time);
    [] when the claim has no pattern or nothing matches."""
    if not claim.pattern:
        return []
    pattern = re.compile(claim.pattern, re.I)
    return [s for s in _SENTENCE_SPLIT.split(reply) if s.strip() and pattern.search(s)]


def _binding_errors(binding: str, arguments: Mapping[str, Any], at: str) -> list[FieldError]:
    b = BINDINGS.get(binding)
    if b is None:
        return [FieldError(path=f"{at}.binding", message=f"unknown binding {binding!r}; known: "
                           f"{', '.join(sorted(BINDINGS))}")]
    return [FieldError(path=f"{at}.arguments.{name}", message=f"binding {binding!r} has no parameter {name!r}; "
                       f"its parameters: {', '.join(b.params) or 'none'}")
            for name in arguments if name not in b.params]


def _call_errors(binding: str, tool: str, arguments: Mapping[str, Any], at: str) -> list[FieldError]:
    """A gold fact or expected call names its call by a built-in ``binding`` or by a ``tool`` of the harness."""
    if binding and tool:
        return [FieldError(path=f"{at}.tool", message="name the call by binding or by tool, not both")]
    if tool:
        return []  # checked against the harness (training_jobs.evals.open_calls.tool_call_errors)
    if not binding:
        return [FieldError(path=f"{at}.binding", message="name the call by a built-in binding id or by a tool of "
                           "the harness (tool)")]
    return _binding_errors(binding, arguments, at)


def names_tools(case: EvalCase) -> bool:
    """Does the case name any call by its harness's tool (rather than a built-in binding)?"""
    return any(f.tool for f in case.gold_facts) or any(t.tool for t in case.expected_tools)


@lru_cache(maxsize=16)
def _demo_harness(name: str):
    """The demo manifest a case names (harness_editor/demo/<name>.yaml), or None ('slug@version' and unknown
    names: the caller that knows the version passes its manifest)."""
    if not re.fullmatch(r"[a-z0-9_]+", name or ""):
        return None
    from training_jobs.hsa.samples import load_demo_manifest

    try:
        return load_demo_manifest(name)
    except (OSError, ValueError, ManifestError):  # not a demo manifest
        return None


def _roomless(case: EvalCase, manifest: Any) -> bool:
    # the live room is what built-in bindings read: a case whose calls all name tools (of a harness bound to
    # fixtures, http or MCP: a shop's order desk), or that makes no call (small talk) under a harness without
    # built-in bindings, has no room to give
    if any(f.binding for f in case.gold_facts) or any(t.binding for t in case.expected_tools):
        return False
    if names_tools(case):
        return True
    # no call at all: a room is needed only under a harness known to read one ('slug@version' cases are re-read
    # without their version, and a case saved from a foreign harness's small-talk turn must stay readable)
    return bool(case.harness) and (manifest is None or not any(isinstance(t.binding, str) for t in manifest.tools))


def case_errors(case: EvalCase, manifest: Any = None) -> list[FieldError]:
    """What one field cannot see alone: what each kind needs, known bindings and parameters, a valid room. Calls
    named by ``tool`` are checked against ``manifest`` (default: the demo harness ``case.harness`` names, when it
    is one): the tool exists, its arguments are declared, and each call is made through the real dispatcher
    (:mod:`training_jobs.evals.open_calls`)."""
    from streams.scenarios import parse_room

    errors: list[FieldError] = []
    if case.kind in HARNESS_KINDS:
        if not case.comments:
            errors.append(FieldError(path="comments", message=f"a {case.kind} case needs at least one comment"))
        if not case.room:
            if manifest is None and not names_tools(case):
                manifest = _demo_harness(case.harness)
            if not _roomless(case, manifest):
                errors.append(FieldError(path="room", message=f"a {case.kind} case needs a room"))
        else:
            try:
                parse_room(case.room)
            except ManifestError as exc:
                errors += [FieldError(path=f"room.{e.path}" if e.path else "room", message=e.message)
                           for e in exc.errors]
        if not case.harness:
            errors.append(FieldError(path="harness", message=f"a {case.kind} case names the harness its labels "
                                     "are written for"))
        if case.instruction_id_list or case.kwargs or case.prompt:
            errors.append(FieldError(path="prompt", message="prompt, instruction_id_list and kwargs are for t4 "
                                     "cases"))
    else:
        if not case.prompt.strip():
            errors.append(FieldError(path="prompt", message="a t4 case needs a prompt"))
        if not case.instruction_id_list:
            errors.append(FieldError(path="instruction_id_list", message="a t4 case lists its instructions"))
        if len(case.kwargs) != len(case.instruction_id_list):
            errors.append(FieldError(path="kwargs", message=f"{len(case.kwargs)} kwargs for "
                                     f"{len(case.instruction_id_list)} instructions (one each)"))
    if case.kind in ("t2", "t3") and case.harness_variant is None:
        errors.append(FieldError(path="harness_variant", message=f"a {case.kind} case says how its harness varies"))
    call_errors: list[FieldError] = []
    for i, f in enumerate(case.gold_facts):
        call_errors += _call_errors(f.binding, f.tool, f.arguments, f"gold_facts[{i}]")
    for i, t in enumerate(case.expected_tools):
        call_errors += _call_errors(t.binding, t.tool, t.arguments, f"expected_tools[{i}]")
    errors += call_errors
    if not call_errors and names_tools(case):
        if manifest is None:
            manifest = _demo_harness(case.harness)
        if manifest is not None:
            from training_jobs.evals.open_calls import tool_call_errors

            errors += tool_call_errors(case, manifest)
    for key, fault in case.tool_faults.items():
        if key != fault.binding:
            errors.append(FieldError(path=f"tool_faults[{json.dumps(key)}].binding",
                                     message=f"the fault is keyed by {key!r} but names {fault.binding!r}"))
    return errors


# --- one case -----------------------------------------------------------------------------------------------


def parse_case(data: Any, *, manifest: Any = None) -> EvalCase:
    """Plain data → EvalCase; raises ManifestError with every error of the first failing pass, at its path
    (``comments[0].text``), like :func:`harness_editor.schemas.parse_manifest`. ``manifest``: the harness the
    case's ``tool`` calls are checked against when ``case.harness`` is not a demo harness ('slug@version')."""
    if not isinstance(data, dict):
        got = "null" if data is None else type(data).__name__
        raise ManifestError([FieldError(path="", message=f"a case must be an object, got {got}")])
    control = control_character_errors(data)
    if control:
        raise ManifestError(control)
    try:
        case = EvalCase.model_validate(data, context={_SKIP_SEMANTICS: True})
    except ValidationError as exc:
        raise ManifestError(pydantic_errors(exc)) from None
    errors = case_errors(case, manifest)
    if errors:
        raise ManifestError(errors)
    return case


def case_to_json(case: EvalCase) -> str:
    """Canonical JSON of a case: compact, fields in declared order, fields at their default left out (so a
    field added later does not change old sets), dict order as given, non-ASCII kept."""
    return case.model_dump_json(exclude_defaults=True)


def case_to_dict(case: EvalCase) -> dict[str, Any]:
    return json.loads(case_to_json(case))


def case_texts(case: EvalCase) -> list[str]:
    """The texts of a case a leakage check compares with training data: the prompt (t4), else the comments and
    the gold reply."""
    if case.kind == "t4":
        return [case.prompt]
    return [c.text for c in case.comments] + ([case.gold_reply] if case.gold_reply else [])


# --- sets ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaseError:
    """One problem in a set file: its line (1-based; 0 = the file), the path inside the case, the message."""

    line: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else ""
        parts = [p for p in (where, self.path) if p]
        return ": ".join([*parts, self.message])


class EvalSetError(ValueError):
    """Raised by :func:`read_cases` with every error found (each line's first failing pass)."""

    def __init__(self, errors: Iterable[CaseError]):
        self.errors: list[CaseError] = list(errors)
        super().__init__(self.errors)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)


def _lines(source: str | Path | bytes | Iterable[str]) -> Iterable[str]:
    if isinstance(source, Path):
        return source.read_text(encoding="utf-8").split("\n")
    if isinstance(source, bytes):
        return source.decode("utf-8").split("\n")
    if isinstance(source, str):
        if "\n" not in source and not source.lstrip().startswith("{") and Path(source).is_file():
            return Path(source).read_text(encoding="utf-8").split("\n")
        return source.split("\n")
    return source


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def read_cases(source: str | Path | bytes | Iterable[str], *, max_errors: int = 100) -> list[EvalCase]:
    """Cases from JSON lines: a path, the text (str/bytes) or an iterable of lines. Blank lines are skipped.
    Raises :class:`EvalSetError` listing every bad line with its path ("line 12: comments[0].text: field
    required"), up to ``max_errors``; nothing is returned unless every line is good. Case ids are unique."""
    cases: list[EvalCase] = []
    errors: list[CaseError] = []
    first_at: dict[str, int] = {}
    try:
        lines = _lines(source)
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalSetError([CaseError(0, "", f"cannot read the set: {exc}")]) from None
    for number, raw in enumerate(lines, 1):
        if len(errors) >= max_errors:
            errors.append(CaseError(0, "", f"more than {max_errors} errors; stopped at line {number}"))
            break
        text = raw.rstrip("\r\n") if isinstance(raw, str) else raw
        if not isinstance(text, str):
            errors.append(CaseError(number, "", f"a line must be text, got {type(text).__name__}"))
            continue
        if not text.strip():
            continue
        if len(text.encode("utf-8")) > MAX_LINE_BYTES:
            errors.append(CaseError(number, "", f"the line is longer than {MAX_LINE_BYTES} bytes"))
            continue
        try:
            data = json.loads(text, object_pairs_hook=_pairs, parse_constant=_no_constants)
        except RecursionError:
            errors.append(CaseError(number, "", "invalid JSON: nested too deeply"))
            continue
        except json.JSONDecodeError as exc:
            errors.append(CaseError(number, "", f"invalid JSON at column {exc.colno}: {exc.msg}"))
            continue
        except ValueError as exc:
            errors.append(CaseError(number, "", f"invalid JSON: {exc}"))
            continue
        try:
            case = parse_case(data)
        except ManifestError as exc:
            errors += [CaseError(number, e.path, e.message) for e in exc.errors]
            continue
        if case.id in first_at:
            errors.append(CaseError(number, "id", f"duplicate case id {case.id!r} (first at line {first_at[case.id]})"))
            continue
        first_at[case.id] = number
        cases.append(case)
        if len(cases) > MAX_CASES:
            errors.append(CaseError(number, "", f"a set has at most {MAX_CASES} cases"))
            break
    if errors:
        raise EvalSetError(errors)
    return cases


def cases_to_jsonl(cases: Sequence[EvalCase]) -> str:
    """The set as JSON lines text (canonical: one :func:`case_to_json` per line, each ending in a newline)."""
    ids: set[str] = set()
    for c in cases:
        if c.id in ids:
            raise ValueError(f"duplicate case id {c.id!r}")
        ids.add(c.id)
    return "".join(case_to_json(c) + "\n" for c in cases)


def write_cases(cases: Sequence[EvalCase], path: str | Path) -> str:
    """Write the set as JSON lines; returns its content hash."""
    text = cases_to_jsonl(cases)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(text.encode("utf-8"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_hash(cases: Sequence[EvalCase]) -> str:
    """sha256 of the canonical JSON lines of the cases, in order (= the sha256 of the file write_cases writes)."""
    return hashlib.sha256(cases_to_jsonl(cases).encode("utf-8")).hexdigest()


# --- the committed sets --------------------------------------------------------------------------------------


class EvalSetSpec(BaseModel):
    """A named eval set the project ships (data/evals/<file>), with what it is for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: CaseKind
    title: str
    description: str
    file: str  # under data/evals/ (T4: data/ifeval/input_data.jsonl, read by training_jobs.evals.ifeval)

    @property
    def path(self) -> Path:
        return EVAL_DATA_DIR / self.file

    def load(self) -> list[EvalCase]:
        return read_cases(self.path)


EVAL_SETS: dict[str, EvalSetSpec] = {s.name: s for s in (
    EvalSetSpec(name="t1-live-stream-qa", kind="t1", title="T1 Live-Stream QA", file="t1_live_stream_qa.jsonl",
                description="Viewer questions as viewers write them (typos, slang, several questions at once, "
                "products by name, things the room does not sell) against demo and scenario rooms, with gold "
                "facts, expected tool calls and skills, and forbidden claims."),
    EvalSetSpec(name="t2-harness-variant-qa", kind="t2", title="T2 Harness-Variant QA",
                file="t2_harness_variant_qa.jsonl",
                description="The T1 tasks under harness states drawn only from the HSA held-out registry "
                "(names and settings never used in training)."),
    EvalSetSpec(name="t3-robustness", kind="t3", title="T3 Tool and prompt robustness", file="t3_robustness.jsonl",
                description="T1 tasks under perturbed tools and prompts (Clean, Slight, Medium, Heavy, Union) "
                "and under tool faults (timeout, malformed result, permission denied, slow)."),
)}
