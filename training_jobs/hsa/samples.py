"""The canonical HSA sample: harness state + live room + viewer comment(s) + the target assistant turn.

The target is kept as *steps*, not as chat messages, because an augmented harness changes what some messages
say: a ``load_skill`` result is the skill body of the harness it runs under, a hook's feedback is that hook's
message. :func:`render_messages` turns a sample into OpenAI/TRL chat messages under any harness state, always
through :func:`harness_editor.render.render_prompt`, so the prompt a model is trained on is the prompt the turn
engine would send under that harness.

Steps (in turn order):

- :class:`LoadSkill` — ``load_skill(skill_id)``, answered with the skill body of the current harness;
- :class:`ToolCall` — a manifest tool with its arguments and the binding's result (results never depend on the
  harness: bindings are code);
- :class:`Retry` — a candidate reply that fails a before-reply hook, followed by the hook feedback the engine
  would send (``streams.engine.turn.hook_feedback_message``);
- :class:`Reply` — the final spoken reply (exactly one, last).

Constructors: :func:`from_gold_trajectory` (the reference policy's output), :func:`tiny_model_samples` (the
tiny model's seeded gold generator) and :func:`scenario_samples` (every comment of the demo scenarios under a
demo manifest). Plain Python, no Django.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_editor.render import render_prompt, render_skill_body
from harness_editor.schemas import LOAD_SKILL_TOOL, Manifest, content_hash, manifest_from_yaml, manifest_to_json
from streams.engine import hooks as H
from streams.engine.rules.intent import CONDITION_RE, INTENT_RULES, infer_intent  # noqa: F401 (importable here)
from streams.engine.turn import hook_feedback_message
from streams.reference_policy import (
    GoldComment,
    GoldTrajectory,
    ReferencePolicyError,
    gold_trajectory,
    tool_result_text,
)

DEMO_DIR = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"
DEMO_MANIFESTS = ("skincare_v1", "skincare_v2", "skincare_v3", "tiny_room")


# --- steps ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadSkill:
    call_id: str
    skill_id: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str
    arguments: Mapping[str, Any]
    result: Mapping[str, Any]
    result_text: str = ""  # the result as the conversation shows it (tool_result_text), kept to skip re-encoding


@dataclass(frozen=True, slots=True)
class Retry:
    reply: str  # fails at least one before-reply hook of the harness it is rendered under


@dataclass(frozen=True, slots=True)
class Reply:
    text: str


Step = LoadSkill | ToolCall | Retry | Reply


@dataclass(frozen=True)
class Sample:
    """One training example. ``manifest`` is the harness state the gold turn was written under; ``target``
    is valid under it (:func:`target_problems` is empty)."""

    id: str
    manifest: Manifest
    room: Mapping[str, Any]
    comments: tuple[Mapping[str, str], ...]
    target: tuple[Step, ...]
    source: str
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def reply(self) -> str:
        last = self.target[-1]
        assert isinstance(last, Reply)
        return last.text

    def loaded_skills(self) -> list[str]:
        return [s.skill_id for s in self.target if isinstance(s, LoadSkill)]

    def tool_calls(self) -> list[ToolCall]:
        return [s for s in self.target if isinstance(s, ToolCall)]

    def with_target(self, target: tuple[Step, ...]) -> Sample:
        # dataclasses.replace re-runs __init__; this is on the builder's per-row path
        new = object.__new__(Sample)
        object.__setattr__(new, "__dict__", {**self.__dict__, "target": target})
        return new


def canonical_target(target: Sequence[Step]) -> tuple[Step, ...]:
    """The task itself: skill loads, tool calls and the final reply. Synthetic hook retries are how a harness
    got there, not what the task is, so they are left out."""
    return tuple(s for s in target if not isinstance(s, Retry))


def target_json(target: Sequence[Step]) -> list[dict[str, Any]]:
    """Plain data for comparisons and the dataset's metadata column."""
    out: list[dict[str, Any]] = []
    for s in target:
        if isinstance(s, LoadSkill):
            out.append({"load_skill": s.skill_id})
        elif isinstance(s, ToolCall):
            out.append({"tool": s.name, "arguments": dict(s.arguments)})
        elif isinstance(s, Retry):
            out.append({"retry": s.reply})
        else:
            out.append({"reply": s.text})
    return out


def write_samples_jsonl(samples: Iterable[Sample], path: str | Path) -> int:
    """Canonical samples as JSON lines, whole (harness, room, comments, steps with their tool results): how a
    worker hands the RL stage's samples to a stage process it launches. Each harness is written once, with the
    first sample that uses it. Returns the number of samples written."""
    numbers: dict[int, int] = {}  # id(manifest) -> its number in the file
    n = 0
    with Path(path).open("w", encoding="utf-8") as f:
        for s in samples:
            new = id(s.manifest) not in numbers
            number = numbers.setdefault(id(s.manifest), len(numbers))
            line: dict[str, Any] = {"id": s.id, "harness": number, "room": dict(s.room),
                                    "comments": [dict(c) for c in s.comments], "source": s.source,
                                    "meta": dict(s.meta), "target": [_step_json(step) for step in s.target]}
            if new:
                line["manifest"] = json.loads(manifest_to_json(s.manifest))
            f.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
            n += 1
    return n


def read_samples_jsonl(path: str | Path) -> list[Sample]:
    """The samples :func:`write_samples_jsonl` wrote (samples that shared a harness share it again)."""
    manifests: dict[int, Manifest] = {}
    samples: list[Sample] = []
    with Path(path).open(encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            line = json.loads(text)
            if "manifest" in line:
                manifests[line["harness"]] = Manifest.model_validate(line["manifest"])
            if line["harness"] not in manifests:
                raise ValueError(f"{path}:{number}: harness {line['harness']} is used before it is written")
            samples.append(Sample(id=line["id"], manifest=manifests[line["harness"]], room=line["room"],
                                  comments=tuple(line["comments"]), target=tuple(_step(s) for s in line["target"]),
                                  source=line["source"], meta=line.get("meta") or {}))
    return samples


def _step_json(step: Step) -> dict[str, Any]:
    if isinstance(step, LoadSkill):
        return {"load_skill": step.skill_id, "call_id": step.call_id}
    if isinstance(step, ToolCall):
        return {"tool": step.name, "call_id": step.call_id, "arguments": dict(step.arguments),
                "result": dict(step.result), "result_text": step.result_text}
    if isinstance(step, Retry):
        return {"retry": step.reply}
    return {"reply": step.text}


def _step(data: Mapping[str, Any]) -> Step:
    if "load_skill" in data:
        return LoadSkill(data["call_id"], data["load_skill"])
    if "tool" in data:
        return ToolCall(data["call_id"], data["tool"], data["arguments"], data["result"], data.get("result_text", ""))
    if "retry" in data:
        return Retry(data["retry"])
    return Reply(data["reply"])


# --- construction -----------------------------------------------------------------------------------------------


def _sample_id(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def from_gold_trajectory(traj: GoldTrajectory, manifest: Manifest, room: Mapping[str, Any],
                         comments: Sequence[Mapping[str, str]], *, source: str, sample_id: str | None = None,
                         meta: Mapping[str, Any] | None = None) -> Sample:
    """Steps from the messages the reference policy wrote after the prompt (system + user)."""
    steps: list[Step] = []
    results: dict[str, Any] = {}
    for msg in traj.messages:
        if msg.get("role") == "tool":
            results[msg["tool_call_id"]] = msg["content"]
    for msg in traj.messages:
        if msg.get("role") != "assistant":
            continue
        calls = msg.get("tool_calls") or []
        for call in calls:
            fn = call["function"]
            args = json.loads(fn["arguments"])
            if fn["name"] == LOAD_SKILL_TOOL:
                steps.append(LoadSkill(call["id"], args["skill_id"]))
            else:
                text = results[call["id"]]
                steps.append(ToolCall(call["id"], fn["name"], args, json.loads(text), text))
        if not calls:
            steps.append(Reply(msg["content"]))
    info = {"intent": traj.intent, "facts": list(traj.facts), "gold": traj.meta.get("source", "")}
    info.update(meta or {})
    return Sample(
        id=sample_id or _sample_id(source, content_hash(manifest), room.get("room_id"), list(comments)),
        manifest=manifest,
        room=room,
        comments=tuple(dict(c) for c in comments),
        target=tuple(steps),
        source=source,
        meta=info,
    )


def load_demo_manifest(name: str) -> Manifest:
    return manifest_from_yaml((DEMO_DIR / f"{name}.yaml").read_text(encoding="utf-8"))


def tiny_model_samples(n: int, *, seed: int = 0, split: str = "train",
                       manifest: Manifest | None = None) -> list[Sample]:
    """Samples from the tiny model's seeded gold generator (rooms and comments vary; manifest: tiny_room)."""
    from training_jobs.tiny_model.gold import generate, load_tiny_manifest

    manifest = manifest or load_tiny_manifest()
    out = []
    for i, t in enumerate(generate(n, seed=seed, split=split, manifest=manifest)):  # type: ignore[arg-type]
        room = t.meta["room"]
        comment = {"viewer": t.messages[1]["content"].split("]", 1)[0].lstrip("["), "text": t.meta["comment"]}
        sample = from_gold_trajectory(t, manifest, room, [comment], source=f"tiny-gold:{split}:{seed}",
                                      sample_id=f"tiny-{split}-{seed}-{i}", meta={"split": split})
        if not target_problems(manifest, sample, full=True):  # a gold turn the harness rejects is no label
            out.append(sample)
    return out


# Which reply a scenario comment asks for: keyword rules over the text, tried in order (first hit wins). The
# scenario files carry the product (link ids) but not the intent; the persona kind breaks ties for chatter.
# The rules live with the reply rules (streams.engine.rules.intent), which judge replies by the same reading.
_INTENT_RULES = INTENT_RULES
_CONDITION_RE = CONDITION_RE


_LINK_ID_RE = re.compile(r"(?<![\d.$])#?(\d{2,})(?![\d.%])")


def mentioned_link_id(text: str, room: Mapping[str, Any]) -> int | None:
    """The one product of the room a comment names: a link id ("#101", "link 101") or the last word(s) of its
    short title ("the dryer"); None when it names none or several."""
    from training_jobs.tiny_model.gold import product_aliases

    ids = {p.get("link_id") for p in room.get("products") or []}
    by_id = {int(m.group(1)) for m in _LINK_ID_RE.finditer(text)} & ids
    if by_id:
        return by_id.pop() if len(by_id) == 1 else None
    low = text.lower()
    named = {lid for lid, aliases in product_aliases(dict(room)).items()
             if any(re.search(rf"\b{re.escape(a)}\b", low) for a in aliases)}
    return named.pop() if len(named) == 1 else None


def gold_comment(text: str, *, viewer: str, room: Mapping[str, Any], persona_kind: str = "",
                 link_ids: Sequence[int] = (), infer_product: bool = False) -> GoldComment | None:
    """What the reference policy needs to answer a comment (its intent from the words, the product, the
    shipping region, the condition asked about), or None when it cannot answer it. ``link_ids``: the products
    the comment is known to be about (a scenario says); ``infer_product``: else read it from the text."""
    intent = infer_intent(text, persona_kind)
    if intent is None:
        return None
    link_id = link_ids[0] if link_ids else (mentioned_link_id(text, room) if infer_product else None)
    if intent in ("price", "stock", "compliance") and link_id is None:
        return None
    regions = (room.get("shipping") or {}).get("regions") or {}
    region = next((r for r in regions if r.lower() in text.lower()), "")
    cond = _CONDITION_RE.search(text)
    return GoldComment(text, intent, viewer, link_id=link_id, region=region,  # type: ignore[arg-type]
                       condition=cond.group(0).lower() if cond else "")


def scenario_samples(manifest_names: Sequence[str | tuple[str, Manifest]] = ("skincare_v1", "skincare_v2",
                                                                          "skincare_v3"),
                     scenario_paths: Iterable[Path] | None = None, *, step_minutes: float = 1.0) -> list[Sample]:
    """Gold samples for every comment of the demo scenarios, under each named demo manifest: the reference
    policy answers each comment with the intent its words ask for. Comments it cannot answer (no intent, no
    product, no fitting skill or tool) and gold turns the harness itself would reject are skipped.
    An entry of ``manifest_names`` may also be a ``(name, manifest)`` pair (e.g. an approved harness version)."""
    from streams.scenarios import demo_scenario_paths, load_scenario
    from streams.simulator import ScenarioRun

    paths = list(scenario_paths) if scenario_paths is not None else demo_scenario_paths()
    manifests = [(m, load_demo_manifest(m)) if isinstance(m, str) else (m[0], m[1]) for m in manifest_names]
    out: list[Sample] = []
    for path in paths:
        scenario = load_scenario(path)
        for tick in ScenarioRun(scenario).iter_ticks(step_minutes):
            for c in tick.comments:
                gold = gold_comment(c.text, viewer=c.viewer_name, persona_kind=c.persona_kind, link_ids=c.link_ids,
                                    room=tick.room)
                if gold is None:
                    continue
                comments = [{"viewer": c.viewer_name, "text": c.text}]
                for name, manifest in manifests:
                    try:
                        traj = gold_trajectory(manifest, tick.room, gold)
                    except ReferencePolicyError:
                        continue
                    sample = from_gold_trajectory(
                        traj, manifest, tick.room, comments, source=f"scenario:{scenario.id}:{name}",
                        sample_id=f"{scenario.id}-{name}-{c.minute}-{c.viewer_id}-{_sample_id(c.text)[:6]}",
                        meta={"scenario": scenario.id, "manifest": name, "minute": c.minute},
                    )
                    if not target_problems(manifest, sample, full=True):
                        out.append(sample)
    return out


# --- checks ------------------------------------------------------------------------------------------------------


def _reply_format_problems(manifest: Manifest, text: str) -> list[str]:
    """Length, speakable text and sentence cap, as the before-reply hooks judge them
    (``hooks.check_reply_format`` per enabled reply_format hook, else ``hooks.check_constraints``)."""
    c = manifest.constraints
    problems: list[str] = []
    formats = [h for h in manifest.hooks if h.enabled and h.kind == "reply_format"]
    if not formats:
        return _format_problems(text, c, c.speakable, None)
    for h in formats:
        problems += _format_problems(text, c, h.speakable or c.speakable, h.max_sentences)
    return problems


_FORMAT: dict[tuple[Any, ...], list[str]] = {}


def _format_problems(text: str, c: Any, speakable: bool, max_sentences: int | None) -> list[str]:
    """``hooks.format_problems``, memoised on what it reads (the final reply is shared by every augmented row
    of a sample)."""
    key = (text, c.reply_min_chars, c.reply_max_chars, speakable, max_sentences)
    hit = _FORMAT.get(key)
    if hit is None:
        if len(_FORMAT) >= _LANG_TONE_MAX:
            _FORMAT.clear()
        hit = _FORMAT[key] = H.format_problems(text, c, speakable=speakable, max_sentences=max_sentences)
    return list(hit)


Verdicts = dict[str, list[H.Verdict]]  # failing verdicts by retried reply, for one (manifest, sample)

# The language and tone checks and the claims the factual-risk hook reads are the costly before-reply work
# (per-character loops, regex scans) and depend only on the reply, the constraints they read and (tone) the
# words of the turn's tool results, not on the harness variant: many augmented rows of one sample share them.
_LANG_TONE: dict[tuple[Any, ...], Any] = {}
_LANG_TONE_MAX = 65_536


def _memo(key: tuple[Any, ...], compute: Any) -> Any:
    hit = _LANG_TONE.get(key)
    if hit is None:
        if len(_LANG_TONE) >= _LANG_TONE_MAX:
            _LANG_TONE.clear()
        hit = _LANG_TONE[key] = compute()
    return hit


def before_reply_verdicts(manifest: Manifest, state: H.ReplyState) -> list[H.Verdict]:
    """``hooks.run_before_reply(manifest, state)`` with the checks that read only the reply (claims, language,
    tone, text quality) memoised on what they read (a test holds the verdicts equal)."""
    return H.run_before_reply(manifest, state, memo=_memo)


def _comments(sample: Sample) -> list[dict[str, Any]]:
    return [dict(c) for c in sample.comments]


def retry_verdicts(manifest: Manifest, sample: Sample, reply: str, cache: Verdicts | None = None
                   ) -> list[H.Verdict]:
    """The failing before-reply verdicts of a candidate reply at the point the target gives it (``cache``:
    shared by the check and the rendering of one row, so the hooks run once)."""
    if cache is not None and reply in cache:
        return cache[reply]
    results = [s.result for s in sample.target if isinstance(s, ToolCall)]
    state = H.ReplyState(reply, sample.loaded_skills(), results, _comments(sample), sample.room)
    failed = [v for v in before_reply_verdicts(manifest, state) if not v.passed]
    if cache is not None:
        cache[reply] = failed
    return failed


def target_problems(manifest: Manifest, sample: Sample, *, full: bool = False, verdicts: Verdicts | None = None
                    ) -> list[str]:
    """Why ``sample.target`` is not what the turn engine would accept under ``manifest`` ([] = fine).

    Always: skill ids and tool names exist, tool rounds and model requests fit the limits, retries fit the retry
    policy, each :class:`Retry` fails a retry hook (none blocks), the final reply passes the reply-format checks.
    ``full`` also runs every before-reply hook on the final reply (language, tone, banned phrases, factual risk):
    operators never change what those hooks judge, so that is checked once, when a sample is made."""
    problems: list[str] = []
    skills = {s.id: s.kind for s in manifest.skills}
    rounds = retries = 0
    for step in sample.target:
        if isinstance(step, LoadSkill):
            rounds += 1
            if step.skill_id not in skills:
                problems.append(f"unknown skill {step.skill_id!r}")
        elif isinstance(step, ToolCall):
            rounds += 1
            if manifest.tool(step.name) is None:
                problems.append(f"unknown tool {step.name!r}")
        elif isinstance(step, Retry):
            retries += 1
            failed = retry_verdicts(manifest, sample, step.reply, verdicts)
            if not failed:
                problems.append("a retried reply passes every hook")
            elif any(v.on_fail == "block" for v in failed):
                problems.append("a retried reply is blocked, not retried")
    # a harness whose conventions do not require a reply skill (the engine asks none: no reply_skill_loaded hook)
    if manifest.conventions.require_reply_skill and not any(skills.get(s) == "reply" for s in sample.loaded_skills()):
        problems.append("no reply skill loaded")
    c = manifest.constraints
    if rounds > c.max_tool_rounds:
        problems.append(f"{rounds} tool rounds, more than max_tool_rounds {c.max_tool_rounds}")
    if rounds + retries + 1 > c.turn_limit:
        problems.append(f"{rounds + retries + 1} model requests, more than turn_limit {c.turn_limit}")
    if retries:
        max_retries, _, _ = H.retry_policy(manifest)
        if retries > max_retries:
            problems.append(f"{retries} retries, more than the retry limit {max_retries}")
    reply = sample.target[-1]
    if not isinstance(reply, Reply):
        problems.append("the target does not end with a reply")
        return problems
    if full:
        results = [s.result for s in sample.target if isinstance(s, ToolCall)]
        state = H.ReplyState(reply.text, sample.loaded_skills(), results, _comments(sample), sample.room)
        problems += [f"{v.hook_id}: {v.detail}" for v in H.run_before_reply(manifest, state) if not v.passed]
    else:
        problems += _reply_format_problems(manifest, reply.text)
    return problems


# --- rendering ----------------------------------------------------------------------------------------------------


_ARGUMENTS_JSON: dict[tuple[Any, ...], str] = {}
_ARGUMENTS_JSON_MAX = 65_536
_SCALARS = (str, int, bool, type(None))  # not float: -0.0 == 0.0, yet their JSON differs


def arguments_json(arguments: Mapping[str, Any]) -> str:
    """``json.dumps(arguments, ensure_ascii=False)``, remembered for flat arguments: the same few calls
    (``load_skill`` of a skill id, ``lookup_product`` of a link id) recur in most rows, and json.dumps with a
    non-default option builds a new encoder on every call. Keyed on the values' types too (``1``, ``1.0`` and
    ``True`` are equal keys, not equal JSON)."""
    if not all(type(v) in _SCALARS for v in arguments.values()):
        return json.dumps(arguments, ensure_ascii=False)
    key = tuple((k, type(v), v) for k, v in arguments.items())
    hit = _ARGUMENTS_JSON.get(key)
    if hit is None:
        if len(_ARGUMENTS_JSON) >= _ARGUMENTS_JSON_MAX:
            _ARGUMENTS_JSON.clear()
        hit = _ARGUMENTS_JSON[key] = json.dumps(arguments, ensure_ascii=False)
    return hit


def clear_memos() -> None:
    """Forget the memoised hook checks and argument JSON (a benchmark times each build from cold)."""
    _LANG_TONE.clear()
    _FORMAT.clear()
    _ARGUMENTS_JSON.clear()


def _call_message(call_id: str, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        # arguments as a JSON string: what OpenAI sends, and what a datasets table needs (STACK.md)
        "tool_calls": [{"id": call_id, "type": "function",
                        "function": {"name": name, "arguments": arguments_json(arguments)}}],
    }


def target_messages(manifest: Manifest, sample: Sample, *, skill_bodies: dict[str, str] | None = None,
                    verdicts: Verdicts | None = None) -> list[dict[str, Any]]:
    """The target steps as chat messages under ``manifest`` (``skill_bodies``: an optional per-harness cache;
    ``verdicts``: see :func:`retry_verdicts`)."""
    out: list[dict[str, Any]] = []
    for step in sample.target:
        if isinstance(step, LoadSkill):
            out.append(_call_message(step.call_id, LOAD_SKILL_TOOL, {"skill_id": step.skill_id}))
            body = skill_bodies.get(step.skill_id) if skill_bodies is not None else None
            if body is None:
                body = render_skill_body(manifest, step.skill_id)
                if body is None:
                    raise ValueError(f"skill {step.skill_id!r} is not in the harness")
                if skill_bodies is not None:
                    skill_bodies[step.skill_id] = body
            out.append({"role": "tool", "tool_call_id": step.call_id, "name": LOAD_SKILL_TOOL, "content": body})
        elif isinstance(step, ToolCall):
            out.append(_call_message(step.call_id, step.name, step.arguments))
            out.append({"role": "tool", "tool_call_id": step.call_id, "name": step.name,
                        "content": step.result_text or tool_result_text(dict(step.result))})
        elif isinstance(step, Retry):
            failed = retry_verdicts(manifest, sample, step.reply, verdicts)
            out.append({"role": "assistant", "content": step.reply})
            out.append(hook_feedback_message(v.message for v in failed))
        else:
            out.append({"role": "assistant", "content": step.text})
    return out


def render_messages(manifest: Manifest, sample: Sample) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(messages, tools) of the sample under ``manifest``: the renderer's prompt, then the target."""
    rendered = render_prompt(manifest, room=dict(sample.room), comments=list(sample.comments))  # reads only
    return rendered.messages + target_messages(manifest, sample), rendered.tools
