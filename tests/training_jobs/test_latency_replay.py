"""Latency replays: the plain core (turn order, histogram bins, overlap, stop between turns), validation and roles,
a replay against the scripted loopback endpoint whose delays are known (its P50 / P95 / TTFT must match them and
concurrency must really overlap turns), cancel and resume by level, the CLI, and the task on a real worker."""

from __future__ import annotations

import io
import json
import threading
import time

import pytest
from django.core.management import CommandError, call_command

from console.errors import NotAllowed, ValidationFailed
from console.jobs import Job
from tests.streams.preview_helpers import scripted_model  # noqa: F401  (fixture)
from tests.streams.scripted_endpoint import Scripted, reply, scripted_endpoint  # noqa: F401  (fixture)
from tests.training_jobs.eval_helpers import t1_case, t4_case
from training_jobs import latency_services as S
from training_jobs.eval_services import eval_set_import
from training_jobs.evals import replay as R
from training_jobs.latency_models import LatencyReplay

HANG_S = 0.12  # before the response's headers: the time to first token of every model call
STALL_S = 0.18  # after the first text chunk: the rest of the call
CALLS_PER_TURN = 3  # a plain greeting fails the demo harness's reply hooks: the first try and two retries
TEXT = "Hi there, welcome to the room!"


def _import(user, name: str, kind: str, cases: list[dict]):
    version, _ = eval_set_import(user=user, name=name, kind=kind, jsonl_text="\n".join(json.dumps(c) for c in cases))
    return version


@pytest.fixture
def t1_set(ml_staff):
    return _import(ml_staff, "t1-lat", "t1", [t1_case(i, text=f"hello everyone ({i})") for i in range(3)])


@pytest.fixture
def v1(harness_with_history):
    return harness_with_history["v1"]


def _timed_replies(ep, n: int) -> None:
    """``n`` identical streamed replies, each taking HANG_S to its first token and HANG_S + STALL_S in all."""
    for _ in range(n):
        r = reply(TEXT)
        ep.add(Scripted(r.chunks, hang_s=HANG_S, stall_after=2, stall_s=STALL_S))


# --- the plain core --------------------------------------------------------------------------------------------


def test_turn_order_plays_every_case_before_any_twice_and_follows_the_seed():
    order = R.turn_order(5, 12, seed=3)
    assert len(order) == 12 and sorted(order[:5]) == list(range(5)) and sorted(order[5:10]) == list(range(5))
    assert order == R.turn_order(5, 12, seed=3) and order != R.turn_order(5, 12, seed=4)
    assert R.turn_order(0, 4, seed=0) == []


def test_histogram_bins_are_nice_shared_and_hold_every_value():
    edges = R.histogram_edges([0.05, 0.4, 1.26, 2.0])
    assert edges[0] == 0 and edges[-1] >= 2.0 and len(edges) - 1 <= R.HISTOGRAM_BINS
    width = edges[1] - edges[0]
    assert width in R.NICE_WIDTHS and all(abs((b - a) - width) < 1e-9 for a, b in zip(edges, edges[1:]))
    assert sum(R.histogram([0.05, 0.4, 1.26, 2.0], edges)) == 4
    assert R.histogram([0.0, 0.24, 0.25, 0.49, 0.5], [0.0, 0.25, 0.5]) == [2, 3]  # the last bin is closed
    summary = R.replay_summary([{"concurrency": 1, "turn_s": [0.1, 0.2]}, {"concurrency": 4, "turn_s": [3.0]}])
    assert [sum(lv["histogram"]) for lv in summary["levels"]] == [2, 1]
    assert summary["histogram_edges"][-1] >= 3.0 and summary["reference"]["p50_s"] == 3.407
    assert summary["reference"]["p95_s"] == 8.114
    lines = R.ascii_histogram(summary["histogram_edges"], summary["levels"][0]["histogram"], width=10)
    assert len(lines) == len(summary["histogram_edges"]) - 1 and "#" * 10 in lines[0]


def _timing(i, start, length):
    return R.TurnTiming(index=i, case_id="c", started_s=start, turn_s=length, ttft_s=None, decode_tps=None,
                        model_calls=1, reason="ok", fallback=False)


def test_in_flight_counts_overlapping_turns_only():
    assert R.in_flight_max([_timing(0, 0, 1), _timing(1, 1, 1), _timing(2, 2, 1)]) == 1  # back to back
    assert R.in_flight_max([_timing(0, 0, 2), _timing(1, 0.5, 2), _timing(2, 1, 0.2)]) == 3


class _SleepyBackend:
    """Answers every call with one text delta after ``delay_s``; counts calls in flight."""

    live = 0
    most = 0
    lock = threading.Lock()

    def __init__(self, delay_s: float):
        self.delay_s = delay_s
        self.closed = False

    def stream_chat(self, messages, tools=None, **sampling):
        from streams.engine.client import ChatDelta

        cls = type(self)
        with cls.lock:
            cls.live += 1
            cls.most = max(cls.most, cls.live)
        try:
            time.sleep(self.delay_s)
            yield ChatDelta(content=TEXT)
            yield ChatDelta(finish_reason="stop")
        finally:
            with cls.lock:
                cls.live -= 1

    def close(self):
        self.closed = True


def test_run_level_overlaps_turns_stops_between_turns_and_closes_its_backends(demo_manifest):
    from harness_editor.schemas import manifest_from_yaml  # noqa: F401  (demo_manifest parses)
    from training_jobs.evals.cases import parse_case

    manifest = demo_manifest("skincare_v1")
    turns = [(parse_case(t1_case(i, text="hello everyone")), manifest) for i in range(8)]
    backends: list[_SleepyBackend] = []

    def make():
        backends.append(_SleepyBackend(0.05))
        return backends[-1]

    _SleepyBackend.most = 0
    level = R.run_level(turns, concurrency=4, make_backend=make)
    assert not level.stopped and [t.index for t in level.timings] == list(range(8))
    assert len(backends) == 4 and all(b.closed for b in backends)
    assert _SleepyBackend.most == 4 and R.in_flight_max(level.timings) == 4
    assert all(t.model_calls == CALLS_PER_TURN and t.ttft_s is not None for t in level.timings)
    # asked to stop once two turns ended: the turns in flight finish, no new one starts
    progress = []
    level = R.run_level(turns, concurrency=2, make_backend=lambda: _SleepyBackend(0.05),
                        should_stop=lambda: len(progress) and progress[-1] >= 2,
                        on_progress=lambda done, planned: progress.append(done))
    assert level.stopped and 2 <= len(level.timings) <= 4 and progress[-1] == len(level.timings)
    summary = R.level_summary(level)
    assert summary["complete"] is False and summary["turns"] == len(level.timings)


def test_a_backend_that_cannot_be_made_fails_the_level(demo_manifest):
    from training_jobs.evals.cases import parse_case

    turns = [(parse_case(t1_case(0)), demo_manifest("skincare_v1"))]

    def broken():
        raise RuntimeError("no endpoint config")

    with pytest.raises(RuntimeError, match="no endpoint config"):
        R.run_level(turns, concurrency=2, make_backend=broken)


# --- starting: validation and roles -----------------------------------------------------------------------------


def test_start_validates_with_located_errors_and_saves_nothing(ml_staff, t1_set, v1, scripted_model):
    with pytest.raises(ValidationFailed) as exc:
        S.latency_replay_start(user=ml_staff, eval_set_version=t1_set, harness_version=None, endpoint=scripted_model,
                               concurrency=[1, 0, 1, "x", True, 65], turns_per_level=0, seed=-1,
                               sampling={"temperature": 5}, deadline_s=0)
    paths = {e["path"] for e in exc.value.errors}
    assert paths == {"harness_version", "concurrency[1]", "concurrency[2]", "concurrency[3]", "concurrency[4]",
                     "concurrency[5]", "turns_per_level", "seed", "sampling.temperature", "deadline_s"}
    with pytest.raises(ValidationFailed) as exc:
        S.latency_replay_start(user=ml_staff, eval_set_version=t1_set, harness_version=v1, endpoint=scripted_model,
                               concurrency=list(range(1, 11)))
    assert [e["path"] for e in exc.value.errors] == ["concurrency"]
    with pytest.raises(ValidationFailed) as exc:
        S.latency_replay_start(user=ml_staff, eval_set_version=t1_set, harness_version=v1, endpoint=scripted_model,
                               concurrency="1,4,-2")
    assert [e["path"] for e in exc.value.errors] == ["concurrency[2]"]
    t4 = _import(ml_staff, "t4-lat", "t4", [t4_case(1)])
    with pytest.raises(ValidationFailed) as exc:
        S.latency_replay_start(user=ml_staff, eval_set_version=t4, harness_version=v1, endpoint=scripted_model)
    assert [e["path"] for e in exc.value.errors] == ["eval_set_version"]
    scripted_model.base_url = "file:///etc/passwd"  # an endpoint that may not be used: a located 400, not a 500
    with pytest.raises(ValidationFailed) as exc:
        S.latency_replay_start(user=ml_staff, eval_set_version=t1_set, harness_version=v1, endpoint=scripted_model)
    assert [e["path"] for e in exc.value.errors] == ["endpoint"]
    assert not LatencyReplay.objects.exists()


def test_roles_start_cancel_resume(ml_staff, ml_staff2, ml_lead, reviewer, manager, operator, t1_set, v1,
                                   scripted_model, django_capture_on_commit_callbacks, monkeypatch):
    sent = []
    monkeypatch.setattr("training_jobs.tasks.latency_replay.apply_async", lambda **kw: sent.append(kw))
    for user in (reviewer, manager, operator):
        with pytest.raises(NotAllowed):
            S.latency_replay_start(user=user, eval_set_version=t1_set, harness_version=v1, endpoint=scripted_model)
    with django_capture_on_commit_callbacks(execute=True):
        replay = S.latency_replay_start(user=ml_staff, eval_set_version=t1_set, harness_version=v1,
                                        endpoint=scripted_model, turns_per_level=5)
    assert sent and sent[0]["queue"] == "gpu" and sent[0]["task_id"] == replay.task_id
    assert replay.concurrency == [1, 4, 8, 16] and replay.progress_total == 20 and replay.status == Job.Status.QUEUED
    with pytest.raises(NotAllowed):
        S.latency_replay_cancel(user=ml_staff2, replay=replay)
    replay = S.latency_replay_cancel(user=ml_lead, replay=replay)
    assert replay.status == Job.Status.CANCELLED
    with pytest.raises(NotAllowed):
        S.latency_replay_resume(user=ml_staff2, replay=replay)
    with django_capture_on_commit_callbacks(execute=True):
        replay = S.latency_replay_resume(user=ml_staff, replay=replay)
    assert replay.status == Job.Status.QUEUED and replay.resumes == 1 and len(sent) == 2


# --- a replay against the scripted endpoint ---------------------------------------------------------------------


def test_replay_figures_match_the_scripted_delays_and_concurrency_overlaps(ml_staff, t1_set, v1, scripted_model,
                                                                           scripted_endpoint):
    turns = 8
    _timed_replies(scripted_endpoint, turns * CALLS_PER_TURN * 2 + 10)
    replay = S.latency_replay_start(user=ml_staff, eval_set_version=t1_set, harness_version=v1,
                                    endpoint=scripted_model, concurrency=[1, 4], turns_per_level=turns, seed=5,
                                    enqueue=False)
    replay = S.latency_replay_execute(replay_id=replay.pk)
    assert replay.status == Job.Status.SUCCEEDED, replay.error
    assert replay.progress_done == replay.progress_total == 2 * turns
    s = replay.summary
    one, four = s["levels"]
    expected_turn = CALLS_PER_TURN * (HANG_S + STALL_S)
    for lv in (one, four):
        assert lv["turns"] == turns and lv["complete"] and lv["errors"] == 0
        assert lv["fallbacks"] == turns and lv["reasons"] == {"retries_exhausted": turns}
        assert expected_turn <= lv["p50_s"] <= lv["p95_s"] < expected_turn + 0.45, lv
        assert HANG_S <= lv["ttft_p50_s"] <= lv["ttft_p95_s"] < HANG_S + 0.15, lv
        assert lv["under_15s"] == 1.0 and lv["decode_tps_p50"] is not None
        assert sum(lv["histogram"]) == turns
    # one at a time: turns back to back; four at a time: four in flight, the level takes about a quarter as long
    assert one["in_flight_max"] == 1 and four["in_flight_max"] == 4
    assert one["wall_s"] >= turns * expected_turn
    assert four["wall_s"] < one["wall_s"] / 2.5
    assert s["reference"] == {**R.REFERENCE} and s["cases"] == 3
    # every turn went out with seed + i (the same turns at both levels)
    seeds = sorted(r["seed"] for r in scripted_endpoint.requests)
    assert seeds == sorted([5 + i for i in range(turns) for _ in range(CALLS_PER_TURN)] * 2)


def test_cancel_stops_between_turns_and_resume_plays_the_unfinished_levels(ml_staff, t1_set, v1, scripted_model,
                                                                           scripted_endpoint):
    _timed_replies(scripted_endpoint, 200)
    replay = S.latency_replay_start(user=ml_staff, eval_set_version=t1_set, harness_version=v1,
                                    endpoint=scripted_model, concurrency=[1, 2], turns_per_level=6, enqueue=False)
    calls = []

    def cancel_in_level_two(done, total, concurrency):
        calls.append((done, concurrency))
        if concurrency == 2 and done >= 7 and not any(c == "cancelled" for c in calls):
            calls.append("cancelled")
            S.latency_replay_cancel(user=ml_staff, replay=LatencyReplay.objects.get(pk=replay.pk))

    replay = S.latency_replay_execute(replay_id=replay.pk, on_progress=cancel_in_level_two)
    assert replay.status == Job.Status.CANCELLED and replay.can_resume
    one, two = replay.summary["levels"]
    assert one["complete"] and one["turns"] == 6
    # cancelled as the first turn of level 2 ended: the turns in flight finish, those not started are not played
    assert not two["complete"] and 1 <= two["turns"] < 6
    assert replay.finished_levels() == {1}
    # resumed: level 1 is kept as it was, level 2 is played again whole
    LatencyReplay.objects.filter(pk=replay.pk).update(status=Job.Status.QUEUED, cancel_requested=False)
    before = len(scripted_endpoint.requests)
    replay = S.latency_replay_execute(replay_id=replay.pk)
    assert replay.status == Job.Status.SUCCEEDED, replay.error
    one_again, two = replay.summary["levels"]
    assert one_again == {**one, "histogram": one_again["histogram"]} and two["complete"] and two["turns"] == 6
    assert len(scripted_endpoint.requests) - before == 6 * CALLS_PER_TURN


def test_an_endpoint_that_fails_gives_error_turns_not_a_failed_replay(ml_staff, t1_set, v1, scripted_model,
                                                                      scripted_endpoint):
    """Nothing queued: every request is an HTTP error; the turns end in the fallback line and are counted."""
    replay = S.latency_replay_start(user=ml_staff, eval_set_version=t1_set, harness_version=v1,
                                    endpoint=scripted_model, concurrency=[2], turns_per_level=2, enqueue=False)
    replay = S.latency_replay_execute(replay_id=replay.pk)
    assert replay.status == Job.Status.SUCCEEDED, replay.error
    (lv,) = replay.summary["levels"]
    assert lv["turns"] == 2 and lv["fallbacks"] == 2 and lv["ttft_p50_s"] is None
    assert "model_error" in lv["reasons"]


# --- the CLI -----------------------------------------------------------------------------------------------------


def test_cli_prints_the_table_with_the_reference_and_a_histogram(ml_staff, t1_set, v1, scripted_model,
                                                                 scripted_endpoint):
    _timed_replies(scripted_endpoint, 60)
    out = io.StringIO()
    call_command("latency_replay", "t1-lat", "--harness", "glow-gadget@production", "--endpoint", "scripted",
                 "--concurrency", "1,2", "--turns", "2", "--user", ml_staff.username, stdout=out,
                 stderr=io.StringIO())
    text = out.getvalue()
    assert "status: succeeded" in text and "reference" in text and "3.407" in text and "8.114" in text
    assert "turn time histogram, concurrency 2 (2 turns)" in text and "#" in text
    rows = [line.split() for line in text.splitlines() if line.strip().startswith(("1 ", "2 "))]
    assert [r[0] for r in rows[:2]] == ["1", "2"]
    out = io.StringIO()
    call_command("latency_replay", "t1-lat", "--harness", "glow-gadget@1", "--endpoint", "scripted",
                 "--concurrency", "2", "--turns", "2", "--json", "--user", ml_staff.username, stdout=out,
                 stderr=io.StringIO())
    data = json.loads(out.getvalue())
    assert data["status"] == "succeeded" and [lv["concurrency"] for lv in data["summary"]["levels"]] == [2]
    with pytest.raises(CommandError, match=r"concurrency\[1\]"):
        call_command("latency_replay", "t1-lat", "--harness", "glow-gadget@1", "--endpoint", "scripted",
                     "--concurrency", "1,zero", "--user", ml_staff.username, stdout=io.StringIO())
    with pytest.raises(CommandError, match="no eval set"):
        call_command("latency_replay", "nope", "--harness", "glow-gadget@1", stdout=io.StringIO())
    assert LatencyReplay.objects.count() == 2


# --- the task on a real worker ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_replay_on_a_real_worker_of_the_gpu_queue(ml_staff, manager, demo_manifest, scripted_endpoint):
    from harness_editor import services as harness_services
    from streams.models import ModelEndpoint
    from tests.conftest import start_worker, stop_worker
    from tests.streams.preview_helpers import wait_for

    v = harness_services.harness_create(user=manager, slug="glow-gadget", name="Glow",
                                        manifest=demo_manifest("skincare_v1"))
    endpoint = ModelEndpoint.objects.create(name="scripted-w", base_url=scripted_endpoint.base_url, model="scripted",
                                            kind="vllm", timeout_s=5.0, connect_timeout_s=1.0)
    version = _import(ml_staff, "t1-lat-w", "t1", [t1_case(i, text="hello everyone") for i in range(2)])
    _timed_replies(scripted_endpoint, 40)
    proc, log = start_worker(queues="gpu", log_name="latency-worker.log")
    try:
        replay = S.latency_replay_start(user=ml_staff, eval_set_version=version, harness_version=v,
                                        endpoint=endpoint, concurrency=[1, 3], turns_per_level=3)
        done = wait_for(lambda: LatencyReplay.objects.get(pk=replay.pk).is_finished, timeout=120, interval=0.2)
        replay = LatencyReplay.objects.get(pk=replay.pk)
        assert done and replay.status == Job.Status.SUCCEEDED, (replay.status, replay.error)
    finally:
        stop_worker(proc, log)
    assert [lv["concurrency"] for lv in replay.levels] == [1, 3]
    assert replay.levels[1]["in_flight_max"] == 3 and replay.worker_host and replay.heartbeat_at is not None
