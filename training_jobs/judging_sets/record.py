"""Turns to judge: the contexts (room, comments, the reference policy's gold answer when it has one) and the
demo model's recorded answers to them.

Contexts come from three places, each with a room reference that says how to rebuild its room:

- ``tiny:<split>:<seed>:<i>`` — the tiny model's seeded gold generator (:func:`training_jobs.tiny_model.gold.generate`);
- ``scenario:<id>@<minute>`` — the demo scenarios, the room as it stands at that minute;
- ``demo`` — the demo room (``harness_editor/demo/room.yaml``) with comments written here.

:func:`record` serves the committed demo model (``models/demo-tiny``, :func:`training_jobs.tiny_model.serve.start_local_server`)
and runs the one turn engine on every context under the tiny harness, greedy and sampled; every candidate reply
of a turn (the ones the hooks sent back and the final one) is kept with what the turn had done before it: the
successful tool results, the bound calls, the skills loaded, and the hooks that failed it. Plain Python.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_editor.schemas import LOAD_SKILL_TOOL, Manifest
from streams.engine.toolcalls import split_content
from streams.reference_policy import GoldComment, GoldTrajectory, ReferencePolicyError, gold_trajectory
from training_jobs.tiny_model.gold import generate, load_demo_room, load_tiny_manifest

TINY_SOURCES = (("heldout", 7, 40), ("heldout_ids", 7, 30), ("train", 11, 30))
SAMPLING = ({"temperature": 0.0, "max_tokens": 96}, {"temperature": 1.0, "seed": 1, "max_tokens": 96})

# Demo-room comments a new user types in the preview room (the issue's own among them), with the gold the
# reference policy answers them with: (text, intent, link id, condition).
DEMO_COMMENTS: tuple[tuple[str, str, int | None, str], ...] = (
    ("is there a coupon code?", "coupon", None, ""),
    ("any coupon for the dryer?", "coupon", None, ""),
    ("hi!", "chit_chat", None, ""),
    ("hello Mia, love the show", "chit_chat", None, ""),
    ("does link 103 heal scars?", "compliance", 103, "scars"),
    ("will the steamer clear my acne?", "compliance", 201, "acne"),
    ("how much is the hair dryer?", "price", 202, ""),
    ("price of #104 please", "price", 104, ""),
    ("how many eye massagers are left?", "stock", 203, ""),
    ("is #102 still in stock?", "stock", 102, ""),
    ("how long is shipping to Hawaii?", "shipping", None, ""),
    ("how much is #999?", "price", 999, ""),
)


@dataclass
class Context:
    ref: str
    room: dict[str, Any]
    comments: list[dict[str, str]]
    gold: GoldTrajectory | None
    condition: str = ""

    @property
    def key(self) -> str:
        return f"{self.ref}|{self.comments[0]['viewer']}|{self.comments[0]['text']}"


def _gold(manifest: Manifest, room: Mapping[str, Any], comment: GoldComment) -> GoldTrajectory | None:
    try:
        return gold_trajectory(manifest, copy.deepcopy(dict(room)), comment)
    except ReferencePolicyError:
        return None


def tiny_contexts() -> list[Context]:
    out = []
    for split, seed, n in TINY_SOURCES:
        for i, t in enumerate(generate(n, seed=seed, split=split)):  # type: ignore[arg-type]
            out.append(Context(f"tiny:{split}:{seed}:{i}", t.meta["room"],
                               [{"viewer": t.meta["viewer"], "text": t.meta["comment"]}], t))
    return out


def scenario_contexts(manifest: Manifest) -> list[Context]:
    from streams.scenarios import demo_scenario_paths, load_scenario
    from streams.simulator import ScenarioRun
    from training_jobs.hsa.samples import gold_comment

    out = []
    for path in demo_scenario_paths():
        scenario = load_scenario(path)
        for tick in ScenarioRun(scenario).iter_ticks(1.0):
            for c in tick.comments:
                gc = gold_comment(c.text, viewer=c.viewer_name, persona_kind=c.persona_kind, link_ids=c.link_ids,
                                  room=tick.room)
                gold = _gold(manifest, tick.room, gc) if gc is not None else None
                out.append(Context(f"scenario:{scenario.id}@{tick.minute:g}", tick.room,
                                   [{"viewer": c.viewer_name, "text": c.text}], gold, gc.condition if gc else ""))
    return out


def demo_contexts(manifest: Manifest) -> list[Context]:
    room = load_demo_room()
    out = []
    for i, (text, intent, link_id, cond) in enumerate(DEMO_COMMENTS):
        viewer = ("ann", "bo", "kim", "max")[i % 4]
        gold = _gold(manifest, room, GoldComment(text, intent, viewer, link_id=link_id, condition=cond))  # type: ignore[arg-type]
        out.append(Context("demo", room, [{"viewer": viewer, "text": text}], gold, cond))
    return out


def contexts(manifest: Manifest | None = None) -> list[Context]:
    manifest = manifest or load_tiny_manifest()
    return tiny_contexts() + scenario_contexts(manifest) + demo_contexts(manifest)


# --- recording -------------------------------------------------------------------------------------------------


def candidates(result: Any, manifest: Manifest) -> list[dict[str, Any]]:
    """Every candidate reply of a finished turn, with the results, calls and skills of the turn before it."""
    from training_jobs.hsa.judging import bound_call

    out: list[dict[str, Any]] = []
    results: list[Any] = []
    calls: list[dict[str, Any]] = []
    skills: list[str] = []
    pending: dict[str, dict[str, Any]] = {}
    content: list[str] = []
    request = -1
    for e in result.events:
        if e.type == "model_request":
            content, request = [], request + 1
        elif e.type == "token" and e.channel == "content":
            content.append(e.delta)
        elif e.type == "tool_call" and e.valid and e.error is None and e.name != LOAD_SKILL_TOOL:
            bound = bound_call(manifest, e.name, e.arguments)
            if bound is not None:
                pending[e.call_id] = {"binding": bound.binding, "arguments": dict(bound.arguments), "ok": False}
        elif e.type == "tool_result":
            call = pending.pop(e.call_id, None)
            ok = e.error is None and e.fault in (None, "slow")
            if call is not None:
                call["ok"] = ok
                calls.append(call)
            if e.binding is not None and e.error is None and isinstance(e.result, dict):
                results.append(e.result)
        elif e.type == "skill_loaded" and e.ok and e.skill_id not in skills:
            skills.append(e.skill_id)
        elif e.type == "hook_result" and e.point == "before_reply":
            if not out or out[-1]["request"] != request:
                out.append({"request": request, "reply": split_content("".join(content)).text,
                            "tool_results": copy.deepcopy(results), "calls": copy.deepcopy(calls),
                            "loaded_skills": list(skills), "engine_failed": []})
            if not e.passed:
                out[-1]["engine_failed"].append(e.hook_id)
    return out


def record(ctxs: Sequence[Context], path: Path, *, threads: int = 1) -> int:
    """Run the demo model on every context (each sampling setting) and write the candidates as JSON lines."""
    from streams.engine.client import ModelEndpoint, OpenAIChatClient
    from streams.engine.turn import run_turn
    from training_jobs.tiny_model.serve import DEMO_MODEL_DIR, start_local_server

    manifest = load_tiny_manifest()
    server = start_local_server(DEMO_MODEL_DIR, ready_timeout=180, threads=threads)
    n = 0
    try:
        client = OpenAIChatClient(ModelEndpoint(base_url=server.openai_base_url, model=server.model, timeout_s=120))
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as f:
            for ctx in ctxs:
                for sampling in SAMPLING:
                    result = run_turn(manifest=manifest, room=copy.deepcopy(ctx.room), comments=ctx.comments,
                                      backend=client, sampling=dict(sampling), deadline_s=120)
                    for i, c in enumerate(candidates(result, manifest)):
                        f.write(json.dumps({"context": ctx.key, "sampling": sampling, "candidate": i,
                                            "outcome": result.reason, **c}, ensure_ascii=False) + "\n")
                        n += 1
    finally:
        server.stop()
    return n


def read_recording(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)
