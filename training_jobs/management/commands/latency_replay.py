"""Replay an eval set's complete-agent turns against a model endpoint at several concurrency levels (synchronously,
with a progress bar) and print P50 / P95 turn time, share under 15 s, TTFT, decode tokens/s and a histogram per
level, beside the report's reference figures.

    manage.py latency_replay t1-live-stream-qa --harness glow-gadget@production [--endpoint local]
        [--concurrency 1,4,8,16] [--turns 32] [--seed 0] [--deadline 30] [--json]

The set is ``NAME`` (its pinned version, else its latest) or ``NAME@N``; the harness ``SLUG@N`` or
``SLUG@LABEL``. The replay is stored like one started from the console (its page shows it). Exits with status 1
when the replay did not succeed.
"""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from console.errors import DomainError
from streams.models import ModelEndpoint
from training_jobs import latency_services as services
from training_jobs.evals.replay import REFERENCE, ascii_histogram
from training_jobs.latency_models import LatencyReplay
from training_jobs.management.commands.run_eval import _harness_version, _set_version, _user


class _Bar:
    """A one-line progress bar on stderr (a terminal), or a line every 10 % (a log)."""

    def __init__(self, stream) -> None:
        self.stream, self.tty, self.last_tenth = stream, stream.isatty(), -1

    def __call__(self, done: int, total: int, concurrency: int) -> None:
        share = done / total if total else 1.0
        text = f"{done}/{total} turns [{'#' * int(30 * share):<30}] {100 * share:5.1f} %  concurrency {concurrency}"
        if self.tty:
            self.stream.write("\r" + text + ("\n" if done >= total else ""))
            self.stream.flush()
        elif int(10 * share) > self.last_tenth:
            self.last_tenth = int(10 * share)
            self.stream.write(text + "\n")


def _f(value, fmt: str = ".2f") -> str:
    return "—" if value is None else format(value, fmt)


def table_lines(summary: dict) -> list[str]:
    """The per-level table with the reference row (also what the tests read)."""
    head = (f"{'concurrency':>11} {'turns':>6} {'P50 s':>7} {'P95 s':>7} {'<15 s':>6} {'TTFT P50':>9} "
            f"{'TTFT P95':>9} {'decode tok/s':>12} {'turns/s':>8} {'in flight':>9} {'fallbacks':>9} {'errors':>6}")
    lines = [head, "-" * len(head)]
    for lv in summary.get("levels") or []:
        under = "—" if lv.get("under_15s") is None else f"{100 * lv['under_15s']:.0f} %"
        mark = "" if lv.get("complete", True) else "  (cut short)"
        lines.append(f"{lv['concurrency']:>11} {lv['turns']:>6} {_f(lv.get('p50_s')):>7} {_f(lv.get('p95_s')):>7} "
                     f"{under:>6} {_f(lv.get('ttft_p50_s'), '.3f'):>9} {_f(lv.get('ttft_p95_s'), '.3f'):>9} "
                     f"{_f(lv.get('decode_tps_p50'), '.1f'):>12} {_f(lv.get('turns_per_s')):>8} "
                     f"{lv.get('in_flight_max', 0):>9} {lv.get('fallbacks', 0):>9} {lv.get('errors', 0):>6}{mark}")
    ref = summary.get("reference") or REFERENCE
    lines.append(f"{'reference':>11} {'':>6} {ref['p50_s']:>7.3f} {ref['p95_s']:>7.3f}   ({ref['label']})")
    return lines


class Command(BaseCommand):
    help = ("Replay an eval set's agent turns against a model endpoint at several concurrency levels and print "
            "the latency figures and histograms.")

    def add_arguments(self, parser):
        parser.add_argument("eval_set", metavar="SET[@N]", help="eval set name (T1–T3)")
        parser.add_argument("--harness", metavar="SLUG@N|SLUG@LABEL", required=True,
                            help="harness version the turns run under")
        parser.add_argument("--endpoint", default="local", help="model endpoint name (default: local)")
        parser.add_argument("--concurrency", default="1,4,8,16", help="levels, e.g. 1,4,8,16")
        parser.add_argument("--turns", type=int, default=32, help="turns per level")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--temperature", type=float)
        parser.add_argument("--max-tokens", type=int)
        parser.add_argument("--deadline", type=float, help="seconds per turn (default: the harness's own)")
        parser.add_argument("--user", help="who runs it (default: the first superuser)")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the replay as JSON only")

    def handle(self, *args, eval_set: str, harness: str, endpoint: str, concurrency: str, turns: int, seed: int,
               temperature: float | None, max_tokens: int | None, deadline: float | None, user: str | None,
               as_json: bool, **options):
        version = _set_version(eval_set)
        harness_version = _harness_version(harness)
        endpoint_obj = ModelEndpoint.objects.filter(name=endpoint).first()
        if endpoint_obj is None:
            raise CommandError(f"no model endpoint {endpoint!r}")
        sampling = {key: value for key, value in (("temperature", temperature), ("max_tokens", max_tokens))
                    if value is not None}
        try:
            replay = services.latency_replay_start(
                user=_user(user), eval_set_version=version, harness_version=harness_version, endpoint=endpoint_obj,
                concurrency=concurrency, turns_per_level=turns, seed=seed, sampling=sampling, deadline_s=deadline,
                enqueue=False)
        except DomainError as exc:
            detail = "; ".join(f"{e['path']}: {e['message']}" for e in getattr(exc, "errors", []) or [])
            raise CommandError(f"{exc.message}{': ' + detail if detail else ''}") from None
        if not as_json:
            self.stdout.write(f"replay {replay.pk}: {replay.name}, {replay.turns_per_level} turns at each of "
                              f"concurrency {', '.join(map(str, replay.concurrency))}")
        replay = services.latency_replay_execute(replay_id=replay.pk, on_progress=_Bar(sys.stderr))
        self._report(replay, as_json)
        if replay.status != LatencyReplay.Status.SUCCEEDED:
            raise SystemExit(1)

    def _report(self, replay: LatencyReplay, as_json: bool) -> None:
        s = replay.summary or {}
        if as_json:
            self.stdout.write(json.dumps({"replay": str(replay.pk), "name": replay.name, "status": replay.status,
                                          "error": replay.error, "summary": s}, indent=2, default=str))
            return
        took = (replay.finished_at - replay.started_at).total_seconds() \
            if replay.started_at and replay.finished_at else None
        self.stdout.write(f"status: {replay.status}" + (f" in {took:.1f} s" if took is not None else ""))
        if replay.error:
            self.stdout.write(f"error: {replay.error}")
        if s.get("skipped_cases"):
            self.stdout.write(f"{s['skipped_cases']} case(s) left out (their variant does not apply to this "
                              f"harness), e.g. {s['skipped'][0]}")
        self.stdout.write(f"{s.get('cases', 0)} cases; times per complete turn (all its model calls and tools), "
                          "TTFT of its first model call")
        for line in table_lines(s):
            self.stdout.write(line)
        edges = s.get("histogram_edges") or []
        for lv in s.get("levels") or []:
            self.stdout.write(f"\nturn time histogram, concurrency {lv['concurrency']} ({lv['turns']} turns):")
            for line in ascii_histogram(edges, lv.get("histogram") or []):
                self.stdout.write(line)
