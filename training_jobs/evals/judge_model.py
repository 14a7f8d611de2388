"""Judge models: an LLM behind the same OpenAI-compatible endpoint interface adds its verdict on an eval sample.

The reply rules (:mod:`streams.engine.rules`) stay the score of record; judge models are a second opinion whose
agreement with the rules and with human labels the console reports (:mod:`training_jobs.evals.agreement`).

A judge is asked (:func:`judge_messages`) with what the turn saw and nothing more: the viewer comment(s), the room
facts (products with price, list price, stock and compliance notes; coupons; campaign; shipping), the tool results
the model got, and the reply, with the rubric of DESIGN.md §8 —

- **accuracy** (0 / 1): 1 only when the reply has no factual error, no unsupported claim and no false promise;
- **effectiveness** (0 / 0.5 / 1): how fully it answers what the viewer asked —

and must answer one JSON object ``{"accuracy": 0|1, "effectiveness": 0|0.5|1, "reason": "..."}``. The gold facts
of the case are *not* shown: the judge is an independent check, not a second copy of the rules' gold.

Parsing (:func:`parse_model_verdict`) never raises: reasoning blocks, code fences and prose around the object are
ignored, the first JSON object holding ``accuracy`` or ``effectiveness`` is read, and a field that cannot be read
(missing, out of range, not a number) *abstains* (``None``) with the why in ``error``; the raw answer is kept.
An endpoint failure abstains both fields (``error`` starts ``endpoint:``).

Voting (:func:`vote`) over several judges, per field, among the judges that did not abstain on it:

- the value with the most votes wins (accuracy: a majority of two classes; effectiveness: a plurality of three);
- a tie between the top values: with ``tie_break="rules"`` (the default) the rules' verdict decides *when it is one
  of the tied values*, else the vote abstains; with ``tie_break="abstain"`` a tie always abstains;
- no votes at all: the vote abstains.

Disagreements (:func:`disagreements`) are reported per sample: whether the judges split among themselves, which
judges differ from the rules, and whether the vote differs from the rules. Over a run :func:`judges_summary` gives
each judge's and the vote's agreement with the rules (raw agreement, Cohen's kappa, abstentions) and the judges'
pairwise agreement. Plain Python, no Django.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from harness_editor.schemas import LOAD_SKILL_TOOL
from streams.engine.toolcalls import strip_think
from training_jobs.evals.agreement import agreement_block

RAW_KEPT = 2000  # characters of a judge's answer kept with its verdict
REASON_KEPT = 300
ROOM_PRODUCTS_SHOWN = 40
TOOL_RESULT_CHARS = 2000  # each tool result as the judge sees it, at most
MAX_JUDGES = 5

JUDGE_SYSTEM = (
    "You are a strict judge of one reply that the host of a live-commerce stream (an AI avatar) gave to viewer "
    "comments. Judge only from the room facts and tool results below: they are everything the host knew.\n"
    "Accuracy (0 or 1): 1 only if the reply has no factual error, no claim that the room facts or tool results do "
    "not support (a price, stock, discount, coupon, delivery time or product property stated for the wrong product "
    "or not given anywhere, a product the room does not sell) and no false promise (efficacy or medical claims, "
    "guaranteed results, offers that do not exist). A reply that states no fact can be accurate.\n"
    "Effectiveness (0, 0.5 or 1): 1 if it fully answers what the viewer asked (every question), in clear speakable "
    "text; 0.5 if it answers only part, is vague, or is repetitive or garbled in places; 0 if it does not address "
    "the comment or cannot be read.\n"
    "Answer with one JSON object and nothing else: "
    "{\"accuracy\": 0 or 1, \"effectiveness\": 0, 0.5 or 1, \"reason\": \"one short sentence\"}."
)


# --- what the judge is shown ----------------------------------------------------------------------------------------


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _comment_text(c: Any) -> str:
    return f"[{_get(c, 'viewer', 'viewer')}] {_get(c, 'text', '')}"


def room_facts(room: Mapping[str, Any] | None) -> dict[str, Any]:
    """The facts of a live room a judge needs (streams.bindings shape): currency, minute, products (id, title, price,
    list price, stock, attributes, compliance notes), coupons, campaign and shipping."""
    room = room or {}
    products = []
    for p in list(room.get("products") or [])[:ROOM_PRODUCTS_SHOWN]:
        if not isinstance(p, Mapping):
            continue
        products.append({k: p[k] for k in ("link_id", "title", "price", "list_price", "stock", "attributes",
                                            "compliance_notes") if k in p})
    out: dict[str, Any] = {"currency": room.get("currency", ""), "minute": room.get("clock_minute"),
                           "products": products}
    for key in ("coupons", "campaign", "shipping"):
        if room.get(key):
            out[key] = room[key]
    return out


def tool_results_from_events(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls a played turn made and what each returned, from its engine events as stored
    (``tool_call`` / ``tool_result``, :mod:`streams.engine.events`): ``{"tool", "arguments", "result"}`` plus
    ``"error"`` when the call failed. ``load_skill`` calls are left out (they return instructions, not facts)."""
    calls: dict[str, Mapping[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for e in events:
        if not isinstance(e, Mapping):
            continue
        if e.get("type") == "tool_call":
            calls[str(e.get("call_id"))] = e
        elif e.get("type") == "tool_result":
            name = str(e.get("name") or "")
            if name == LOAD_SKILL_TOOL and e.get("binding") is None:
                continue
            call = calls.get(str(e.get("call_id")), {})
            # ``result`` is what the model was shown, errors and faults included (streams.engine.turn)
            item: dict[str, Any] = {"tool": name, "arguments": call.get("arguments") or {}, "result": e.get("result")}
            if e.get("error"):
                item["error"] = str(e["error"])
            out.append(item)
    return out


def _clip(value: Any) -> Any:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= TOOL_RESULT_CHARS else text[:TOOL_RESULT_CHARS] + " …(cut)"


def judge_messages(case: Any, reply: str, tool_results: Sequence[Any]) -> list[dict[str, str]]:
    """The chat messages a judge model gets for one reply to ``case`` (an EvalCase or a mapping with ``comments``
    and ``room``)."""
    body = {
        "viewer_comments": [_comment_text(c) for c in (_get(case, "comments") or [])],
        "room_facts": room_facts(_get(case, "room") or {}),
        "tool_results": [_clip(r) for r in tool_results],
        "reply_to_judge": reply,
    }
    return [{"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": json.dumps(body, ensure_ascii=False, indent=1, default=str)}]


# --- the verdict ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelVerdict:
    """One judge's verdict on one sample. ``None`` in a field: the judge abstained on it (``error`` says why)."""

    judge: str
    accuracy: int | None
    effectiveness: float | None
    reason: str = ""
    raw: str = ""  # the answer as the judge gave it (cut to RAW_KEPT)
    error: str = ""

    @property
    def abstained(self) -> bool:
        return self.accuracy is None and self.effectiveness is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelVerdict:
        return cls(judge=str(d.get("judge", "")), accuracy=_read_accuracy(d.get("accuracy"))[0],
                   effectiveness=_read_effectiveness(d.get("effectiveness"))[0], reason=str(d.get("reason") or ""),
                   raw=str(d.get("raw") or ""), error=str(d.get("error") or ""))


_YES = {"1", "true", "yes", "accurate", "pass"}
_NO = {"0", "false", "no", "inaccurate", "fail"}


def _read_accuracy(value: Any) -> tuple[int | None, str]:
    if isinstance(value, bool):
        return int(value), ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value in (0, 1):
            return int(value), ""
        return None, f"accuracy {value!r} is not 0 or 1"
    if isinstance(value, str):
        v = value.strip().lower()
        if v in _YES:
            return 1, ""
        if v in _NO:
            return 0, ""
        try:
            return _read_accuracy(float(v))
        except ValueError:
            pass
        return None, f"accuracy {value!r} is not 0 or 1"
    if value is None:
        return None, "no accuracy"
    return None, f"accuracy {value!r} is not 0 or 1"


def _read_effectiveness(value: Any) -> tuple[float | None, str]:
    if isinstance(value, bool) or value is None:
        return None, "no effectiveness" if value is None else f"effectiveness {value!r} is not 0, 0.5 or 1"
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None, f"effectiveness {value!r} is not 0, 0.5 or 1"
    if isinstance(value, (int, float)) and math.isfinite(value):
        for level in (0.0, 0.5, 1.0):
            if abs(value - level) < 1e-9:
                return level, ""
    return None, f"effectiveness {value!r} is not 0, 0.5 or 1"


def parse_model_verdict(text: str, *, judge: str = "judge") -> ModelVerdict:
    """A judge's answer as a :class:`ModelVerdict` (see the module docstring); never raises."""
    raw = (text or "")[:RAW_KEPT]
    try:
        visible, _ = strip_think(text or "")
    except Exception:  # a pathological answer: read it as it is
        visible = text or ""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", visible):
        try:
            obj, _ = decoder.raw_decode(visible, m.start())
        except ValueError:
            continue
        if not isinstance(obj, dict) or not ({"accuracy", "effectiveness"} & set(obj)):
            continue
        acc, acc_err = _read_accuracy(obj.get("accuracy"))
        eff, eff_err = _read_effectiveness(obj.get("effectiveness"))
        reason = obj.get("reason")
        reason = reason.strip()[:REASON_KEPT] if isinstance(reason, str) else ""
        error = "; ".join(e for e in (acc_err, eff_err) if e)
        return ModelVerdict(judge, acc, eff, reason, raw, error)
    return ModelVerdict(judge, None, None, "", raw,
                        "no JSON verdict in the judge's answer: " + repr(visible.strip()[:200]))


def judge_with_model(backend: Any, case: Any, reply: str, tool_results: Sequence[Any], *, name: str = "judge",
                     max_tokens: int = 300, temperature: float = 0.0, seed: int | None = None) -> ModelVerdict:
    """Ask one judge model (anything with the chat client's ``stream_chat``) for its verdict on ``reply``. Never
    raises: an endpoint failure or a malformed answer abstains, with the raw answer kept."""
    params: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens}
    if seed is not None:
        params["seed"] = seed
    parts: list[str] = []
    try:
        for delta in backend.stream_chat(judge_messages(case, reply, tool_results), None, **params):
            content = getattr(delta, "content", "")
            if content:
                parts.append(content)
    except Exception as exc:  # ModelError or a client bug: the judge abstains, the run goes on
        message = getattr(exc, "message", None) or str(exc)
        kind = getattr(exc, "kind", None) or type(exc).__name__
        return ModelVerdict(name, None, None, "", "".join(parts)[:RAW_KEPT], f"endpoint: {kind}: {message}"[:500])
    return parse_model_verdict("".join(parts), judge=name)


# --- several judges -------------------------------------------------------------------------------------------------

TieBreak = Literal["rules", "abstain"]


def _pick(values: Sequence[Any], rules_value: Any, tie_break: TieBreak) -> tuple[Any, str]:
    """(the vote on one field, how it was decided: majority | tie_rules | tie_abstain | no_votes)."""
    if not values:
        return None, "no_votes"
    counts = Counter(values)
    top = max(counts.values())
    leaders = [v for v, c in counts.items() if c == top]
    if len(leaders) == 1:
        return leaders[0], "majority"
    if tie_break == "rules" and rules_value is not None and rules_value in leaders:
        return rules_value, "tie_rules"
    return None, "tie_abstain"


def _counts(values: Sequence[Any]) -> dict[str, int]:
    return {_label(v): c for v, c in sorted(Counter(values).items())}


def _label(v: Any) -> str:
    return "abstain" if v is None else (str(int(v)) if float(v).is_integer() else str(v))


@dataclass(frozen=True)
class Vote:
    """The judges' vote on one sample (fields as in :class:`ModelVerdict`; ``None``: the vote abstained)."""

    accuracy: int | None
    effectiveness: float | None
    accuracy_decided: str  # majority | tie_rules | tie_abstain | no_votes
    effectiveness_decided: str
    accuracy_votes: dict[str, int]  # class -> judges ("0", "1")
    effectiveness_votes: dict[str, int]  # ("0", "0.5", "1")
    judges: int  # judges asked
    tie_break: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def vote(verdicts: Sequence[ModelVerdict], *, rules: tuple[Any, Any] | None = None,
         tie_break: TieBreak = "rules") -> Vote:
    """The judges' vote; ``rules`` = the rules' (accuracy, effectiveness), used only to break ties (see the module
    docstring)."""
    if tie_break not in ("rules", "abstain"):
        raise ValueError("tie_break must be 'rules' or 'abstain'")
    accs = [v.accuracy for v in verdicts if v.accuracy is not None]
    effs = [v.effectiveness for v in verdicts if v.effectiveness is not None]
    r_acc, r_eff = rules if rules is not None else (None, None)
    r_acc = None if r_acc is None else int(float(r_acc))
    r_eff = None if r_eff is None else float(r_eff)
    acc, acc_how = _pick(accs, r_acc, tie_break)
    eff, eff_how = _pick(effs, r_eff, tie_break)
    return Vote(acc, eff, acc_how, eff_how, _counts(accs), _counts(effs), len(verdicts), tie_break)


def disagreements(verdicts: Sequence[ModelVerdict], the_vote: Vote, *, rules: tuple[Any, Any]) -> dict[str, Any]:
    """Where the judges part: among themselves (``split``: the judges that voted on a field gave more than one
    value), from the rules (the judges whose verdict on a field differs from the rules'), and the vote against the
    rules (None when the vote abstained)."""
    r_acc, r_eff = int(float(rules[0])), float(rules[1])
    accs = {v.accuracy for v in verdicts if v.accuracy is not None}
    effs = {v.effectiveness for v in verdicts if v.effectiveness is not None}
    return {
        "split": {"accuracy": len(accs) > 1, "effectiveness": len(effs) > 1},
        "against_rules": {
            "accuracy": [v.judge for v in verdicts if v.accuracy is not None and v.accuracy != r_acc],
            "effectiveness": [v.judge for v in verdicts if v.effectiveness is not None and v.effectiveness != r_eff],
        },
        "abstained": [v.judge for v in verdicts if v.abstained],
        "vote_against_rules": {
            "accuracy": None if the_vote.accuracy is None else the_vote.accuracy != r_acc,
            "effectiveness": None if the_vote.effectiveness is None else the_vote.effectiveness != r_eff,
        },
    }


def judge_sample(backends: Sequence[tuple[str, Any]], case: Any, reply: str, tool_results: Sequence[Any], *,
                 rules: tuple[Any, Any], tie_break: TieBreak = "rules", seed: int | None = None,
                 max_tokens: int = 300) -> dict[str, Any]:
    """Every judge's verdict on one sample, their vote and the disagreements, as stored with the sample
    (``EvalResult.detail["judges"]``): ``{"verdicts": [...], "vote": {...}, "disagreements": {...}}``.
    ``backends``: (judge name, chat backend); a backend that is an Exception (the endpoint could not be opened)
    makes that judge abstain with its message."""
    verdicts = []
    for name, backend in backends:
        if isinstance(backend, BaseException):
            verdicts.append(ModelVerdict(name, None, None, "", "", f"endpoint: {backend}"[:500]))
            continue
        verdicts.append(judge_with_model(backend, case, reply, tool_results, name=name, seed=seed,
                                         max_tokens=max_tokens))
    the_vote = vote(verdicts, rules=rules, tie_break=tie_break)
    return {"verdicts": [v.to_dict() for v in verdicts], "vote": the_vote.to_dict(),
            "disagreements": disagreements(verdicts, the_vote, rules=rules)}


# --- over a run -----------------------------------------------------------------------------------------------------


def judges_summary(samples: Iterable[tuple[Any, Any, Mapping[str, Any] | None]], judges: Sequence[str]
                   ) -> dict[str, Any]:
    """Agreement of each judge and of the vote with the rules over a run's samples: ``samples`` are
    (rules' accuracy, rules' effectiveness, the sample's ``detail["judges"]`` or None when it was not judged).
    Per judge and for the vote: ``accuracy`` / ``effectiveness`` agreement blocks
    (:func:`training_jobs.evals.agreement.agreement_block`: raw agreement, kappa, matrix), ``abstained``; the
    judges' pairwise agreement; ``split``: samples where the judges gave more than one value on a field."""
    r_acc: list[Any] = []
    r_eff: list[Any] = []
    per: dict[str, tuple[list[Any], list[Any]]] = {name: ([], []) for name in judges}
    v_acc: list[Any] = []
    v_eff: list[Any] = []
    judged = 0
    split = {"accuracy": 0, "effectiveness": 0}
    abstained = dict.fromkeys(judges, 0)
    for acc, eff, block in samples:
        if not block or not isinstance(block, Mapping):
            continue
        judged += 1
        r_acc.append(acc)
        r_eff.append(eff)
        by_name = {str(v.get("judge")): v for v in block.get("verdicts") or [] if isinstance(v, Mapping)}
        for name in judges:
            v = by_name.get(name) or {}
            per[name][0].append(v.get("accuracy"))
            per[name][1].append(v.get("effectiveness"))
            if v.get("accuracy") is None and v.get("effectiveness") is None:
                abstained[name] += 1
        the_vote = block.get("vote") or {}
        v_acc.append(the_vote.get("accuracy"))
        v_eff.append(the_vote.get("effectiveness"))
        for key in split:
            if (block.get("disagreements") or {}).get("split", {}).get(key):
                split[key] += 1
    out: dict[str, Any] = {"judges": list(judges), "samples_judged": judged, "split": split, "with_rules": {}}
    for name in judges:
        out["with_rules"][name] = {**agreement_block(per[name][0], r_acc, a_eff=per[name][1], b_eff=r_eff),
                                   "abstained": abstained[name]}
    out["with_rules"]["vote"] = {**agreement_block(v_acc, r_acc, a_eff=v_eff, b_eff=r_eff),
                                 "abstained": sum(1 for a, e in zip(v_acc, v_eff) if a is None and e is None)}
    out["between_judges"] = [
        {"a": a, "b": b, **agreement_block(per[a][0], per[b][0], a_eff=per[a][1], b_eff=per[b][1])}
        for a, b in itertools.combinations(judges, 2)]
    return out
