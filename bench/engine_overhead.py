"""Turn-engine overhead per turn, model time excluded: render + parse + tools + hooks + events.

    .venv/bin/python bench/engine_overhead.py [--turns 1000] [--target-ms 2]

Runs the real :func:`streams.engine.turn.run_turn` on the demo harness (harness_editor/demo/skincare_v1.yaml)
and the demo room (room.yaml) with an in-process scripted backend (no HTTP, no model): each turn loads the
price skill, calls ``lookup_product`` (native tool call, arguments streamed in pieces) and replies with a
tool-backed price streamed as ~20 token deltas, so every stage runs: context, viewer-input hook, prompt
assembly, three model rounds, Hermes and native tool-call parsing, JSON-Schema validation, a binding call,
all before-reply hooks, dispatch and ~50 events. Overhead = total turn time minus the time spent inside the
backend's ``stream_chat`` generator (token events emitted while streaming count as overhead). Prints median
and p99 over ``--turns`` turns (after 50 warm-up turns); PASS means median <= ``--target-ms``. Exit status 1
on FAIL. Wall-clock on this machine: run it on an idle one.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from harness_editor.schemas import manifest_from_yaml  # noqa: E402
from streams.engine.client import ChatDelta, NativeToolCall  # noqa: E402
from streams.engine.turn import ScriptedBackend, run_turn  # noqa: E402

REPLY = "The HydraGlow serum is $24.9 today, down from $34, and there are 180 left in stock!"


def script() -> list[list[ChatDelta]]:
    load = '<tool_call>\n{"name": "load_skill", "arguments": {"skill_id": "price_stock_qa"}}\n</tool_call>'
    tokens = [REPLY[i : i + 4] for i in range(0, len(REPLY), 4)]
    return [
        [ChatDelta(content=load[i : i + 8]) for i in range(0, len(load), 8)] + [ChatDelta(finish_reason="stop")],
        [ChatDelta(tool_calls=(NativeToolCall(0, "call-1", "lookup_product", json.dumps({"link_id": 101})),),
                   finish_reason="tool_calls")],
        [ChatDelta(content=t) for t in tokens] + [ChatDelta(finish_reason="stop")],
    ]


class TimedBackend:
    """Wraps the scripted backend and adds up the time spent inside it (the stand-in for model time)."""

    def __init__(self, inner: ScriptedBackend):
        self.inner = inner
        self.seconds = 0.0

    def stream_chat(self, messages, tools, **sampling):
        it = iter(self.inner.stream_chat(messages, tools, **sampling))
        while True:
            t = time.perf_counter()
            try:
                d = next(it)
            except StopIteration:
                self.seconds += time.perf_counter() - t
                return
            self.seconds += time.perf_counter() - t
            yield d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--target-ms", type=float, default=2.0)
    args = ap.parse_args()

    demo = ROOT / "harness_editor" / "demo"
    manifest = manifest_from_yaml((demo / "skincare_v1.yaml").read_text(encoding="utf-8"))
    room0 = yaml.safe_load((demo / "room.yaml").read_text(encoding="utf-8"))
    comments = [{"viewer": "amy", "text": "how much is the serum on link 101?"}]
    responses = script()

    overhead: list[float] = []
    totals: list[float] = []
    events = 0
    for i in range(args.warmup + args.turns):
        backend = TimedBackend(ScriptedBackend(responses))
        room = copy.deepcopy(room0)  # outside the timed region: the caller owns the room
        gc.disable()
        start = time.perf_counter()
        result = run_turn(manifest=manifest, room=room, comments=comments, backend=backend, turn_id=f"b{i}")
        elapsed = (time.perf_counter() - start) * 1000
        gc.enable()
        if result.fallback or result.reply != REPLY:
            print(f"unexpected turn result: {result.reason} {result.reply!r}", file=sys.stderr)
            return 1
        if i >= args.warmup:
            totals.append(elapsed)
            overhead.append(elapsed - backend.seconds * 1000)
            events = len(result.events)

    def pct(xs: list[float], q: float) -> float:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]

    med, p99 = statistics.median(overhead), pct(overhead, 0.99)
    print(f"engine overhead per turn ({args.turns} turns, {events} events/turn, 3 model rounds, "
          f"1 binding call, model time excluded)")
    print(f"  median {med:.3f} ms   p99 {p99:.3f} ms   (wall per turn incl. scripted backend: "
          f"median {statistics.median(totals):.3f} ms)")
    ok = med <= args.target_ms
    print(f"{'PASS' if ok else 'FAIL'}: median {med:.3f} ms {'<=' if ok else '>'} target {args.target_ms} ms")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
