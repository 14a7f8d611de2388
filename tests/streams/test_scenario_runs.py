"""Play mode and scenario runs through the real services and the real HTTP client against the scripted
loopback endpoint: the clock advances by elapsed real time x speed in server-side ticks, stands still while a
turn runs, stops on pause/close/end; duplicated or stale ticks do nothing; a run plays a scenario to the end
(through the workers' path or in-process for the CLI) and stores its transcript and summary. One test plays a
whole demo scenario on the project's real local model."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.utils import timezone

from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from console.jobs import job_models, jobs_sweep_stalled
from console.models import AuditEvent
from streams import selectors, services, tasks
from streams.models import PreviewEvent, PreviewRoom
from streams.models import ScenarioRun as ScenarioRunJob
from streams.simulator import ScenarioRun
from tests.streams.preview_helpers import GOOD, event_types, price_script
from tests.streams.scripted_endpoint import hermes_calls, native_calls, reply

SCENARIOS = Path(__file__).resolve().parents[2] / "streams" / "scenarios"
LOST = services.LOST_TURN_S + 1  # seconds: a queued turn without any event for longer is lost
STOCK_REPLY = "I can't check the stock right now, please look at the product card."


def quick_yaml() -> str:
    """A 6-minute cut of the after-sales demo scenario: three scripted comments (minutes 1, 2.5 and 4), a stock
    change at 3, the stock tool denied from 2 to 3."""
    data = yaml.safe_load((SCENARIOS / "after-sales-faults.yaml").read_text(encoding="utf-8"))
    data.update(id="quick-check", title="Quick check", duration_minutes=6, timeline=[
        {"at_minute": 0, "kind": "phase_change", "params": {"phase": "regular"}},
        {"at_minute": 3, "kind": "stock_change", "params": {"link_id": 202, "stock": 3}}],
        faults=[{"binding": "catalog.stock", "kind": "permission_denied", "from_minute": 2, "to_minute": 3}])
    data["personas"] = [{"id": "askers", "kind": "price_asker", "names": ["Ann", "Bo"], "comments": [
        {"at_minute": 1, "text": "how much is #101?", "name": "Ann"},
        {"at_minute": 2.5, "text": "is the hair dryer #202 in stock?", "name": "Bo", "link_id": 202},
        {"at_minute": 4, "text": "thanks, bye!", "name": "Ann"}]}]
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture
def quick(manager):
    return services.scenario_import(yaml_text=quick_yaml(), user=manager)


@pytest.fixture
def queued(monkeypatch):
    """Turns and clock ticks queued on commit, recorded instead of sent to the broker."""
    calls = {"turns": [], "ticks": []}
    monkeypatch.setattr(tasks.preview_turn, "delay", lambda *args: calls["turns"].append(args))
    monkeypatch.setattr(tasks.preview_clock_tick, "apply_async",
                        lambda args, countdown=0: calls["ticks"].append((*args, countdown)))
    return calls


class FakeClock:
    def __init__(self):
        self.now = timezone.now()

    def after(self, seconds: float):
        self.now += dt.timedelta(seconds=seconds)
        return self.now


def drain(queued, capture, clock: FakeClock, limit: int = 400) -> int:
    """A worker in this process: queued turns first (as the solo worker would finish them), then ticks, each
    after its countdown on the fake clock. Returns how many tasks ran."""
    for n in range(limit):
        if queued["turns"]:
            room_id, turn_id = queued["turns"].pop(0)
            with capture(execute=True):
                services.preview_turn_run(room_id=room_id, turn_id=turn_id)
                services.preview_play_nudge(room_id=room_id)  # what the preview_turn task does after a turn
        elif queued["ticks"]:
            room_id, token, countdown = queued["ticks"].pop(0)
            with capture(execute=True):
                services.preview_clock_tick(room_id=room_id, token=token, now=clock.after(countdown))
        else:
            return n
    raise AssertionError("the queue never emptied")


def _open(user, version, model, scenario, **kw):
    return services.preview_open(user=user, version=version, scenario=scenario, endpoint=model, **kw)


def _tick(room, token, now, capture):
    with capture(execute=True):
        return services.preview_clock_tick(room_id=room.pk, token=token, now=now)


def test_play_advances_by_elapsed_time_and_stands_still_while_a_turn_runs(
        manager, harness_with_history, scripted_model, scripted_endpoint, quick, queued,
        django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    room = _open(manager, harness_with_history["v1"], scripted_model, quick)
    with capture(execute=True):
        services.preview_play(user=manager, room=room, speed=60)  # a simulated minute per real second
    room.refresh_from_db()
    assert room.playing and room.play_speed == 60 and event_types(room.pk)[-1] == "playing"
    assert queued["ticks"] == [(str(room.pk), room.tick_token, 0)]
    t0 = room.clock_ticked_at

    out = _tick(room, room.tick_token, t0 + dt.timedelta(seconds=0.5), capture)
    room.refresh_from_db()
    assert out["ran"] and room.scenario_minute == pytest.approx(0.5) and out["turn_ids"] == []
    _, token, countdown = queued["ticks"][-1]
    assert token == room.tick_token and countdown == pytest.approx(0.5)  # lands on the comment at minute 1

    # the same tick delivered twice, or an older one: nothing happens, no second chain
    first_token = queued["ticks"][0][1]
    assert _tick(room, first_token, t0 + dt.timedelta(seconds=5), capture) == {"ran": False, "reason": "stale"}
    assert tasks.preview_clock_tick.run(str(room.pk), first_token)["ran"] is False  # the task, as the worker runs it
    room.refresh_from_db()
    assert room.scenario_minute == pytest.approx(0.5) and len(queued["ticks"]) == 2

    out = _tick(room, token, t0 + dt.timedelta(seconds=1.5), capture)
    room.refresh_from_db()
    assert room.scenario_minute == pytest.approx(1.5) and len(out["turn_ids"]) == 1
    assert queued["turns"] == [(str(room.pk), out["turn_ids"][0])]
    assert queued["ticks"][-1][2] == services.WAIT_TICK_S

    # the turn is queued, not answered: the clock stands still however long it takes
    later = t0 + dt.timedelta(seconds=30)
    out = _tick(room, room.tick_token, later, capture)
    room.refresh_from_db()
    assert out["ran"] and room.scenario_minute == pytest.approx(1.5) and room.clock_ticked_at == later
    price_script(scripted_endpoint)
    assert services.preview_turn_run(room_id=room.pk, turn_id=queued["turns"].pop()[1]).reply == GOOD
    out = _tick(room, room.tick_token, later + dt.timedelta(seconds=0.5), capture)
    room.refresh_from_db()
    assert room.scenario_minute == pytest.approx(2.0)  # from where it stood, not from the 30 s of waiting

    # pause stops the chain; step still works; resume starts a new one
    services.preview_pause(user=manager, room=room)
    room.refresh_from_db()
    assert room.tick_token == "" and _tick(room, token, later, capture)["ran"] is False
    with capture(execute=True):
        services.preview_clock_step(user=manager, room=room, minutes=0.25)
    room.refresh_from_db()
    assert room.scenario_minute == pytest.approx(2.25)
    with capture(execute=True):
        services.preview_resume(user=manager, room=room)
    room.refresh_from_db()
    assert room.playing and not room.paused and queued["ticks"][-1] == (str(room.pk), room.tick_token, 0)

    # closing stops it for good
    token = room.tick_token
    services.preview_close(user=manager, room=room)
    assert _tick(room, token, later, capture)["ran"] is False
    assert event_types(room.pk)[-1] == "room_closed"
    with pytest.raises(InvalidTransition):
        services.preview_play(user=manager, room=room, speed=10)


def test_play_validation(manager, operator, harness_with_history, scripted_model, quick):
    v1 = harness_with_history["v1"]
    plain = services.preview_open(user=manager, version=v1, endpoint=scripted_model)
    with pytest.raises(ValidationFailed):  # no scenario, no clock
        services.preview_play(user=manager, room=plain, speed=10)
    room = _open(manager, v1, scripted_model, quick)
    for bad in (-1, "fast", float("nan"), 10_000):
        with pytest.raises(ValidationFailed):
            services.preview_play(user=manager, room=room, speed=bad)
    with pytest.raises(NotAllowed):
        services.preview_play(user=operator, room=room, speed=10)
    room.refresh_from_db()
    assert not room.playing and event_types(room.pk).count("playing") == 0


def test_play_to_the_end_posts_every_comment_and_stops(manager, harness_with_history, scripted_model, quick,
                                                       queued, django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    room = _open(manager, harness_with_history["v1"], scripted_model, quick)
    with capture(execute=True):
        services.preview_play(user=manager, room=room, speed=services.ASAP)
    drain(queued, capture, FakeClock())  # no scripted answers: every turn falls back, the play goes on
    room.refresh_from_db()
    assert not room.playing and room.tick_token == "" and room.status == "open"  # an interactive room stays open
    assert room.scenario_minute == 6 and event_types(room.pk)[-1] == "scenario_finished"
    expected = ScenarioRun(quick.parsed(), room.seed).advance_to(6)
    comments = list(PreviewEvent.objects.filter(room=room, type="viewer_comment").order_by("seq"))
    assert [c.payload["text"] for c in comments] == [c.text for c in expected]  # none skipped
    assert len({c.turn_id for c in comments}) == 3  # as fast as turns finish: one turn per comment time
    timeline = [e.payload["kind"] for e in PreviewEvent.objects.filter(room=room, type="timeline_event")]
    assert timeline == ["phase_change", "stock_change"]
    with pytest.raises(InvalidTransition):  # over: nothing left to play
        services.preview_play(user=manager, room=room, speed=10)


def _script_quick_run(ep) -> None:
    """Turn 1 (minute 1): price question answered; turn 2 (minute 2.5): the stock tool is denied; turn 3:
    nothing scripted, the endpoint fails and the engine falls back."""
    price_script(ep)
    ep.add(hermes_calls(("load_skill", {"skill_id": "price_stock_qa"})),
           native_calls(("check_stock", {"link_id": 202})), reply(STOCK_REPLY))


def test_run_through_the_workers_path(manager, harness_with_history, scripted_model, scripted_endpoint, quick,
                                      queued, django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    _script_quick_run(scripted_endpoint)
    with capture(execute=True):
        run = services.scenario_run_start(user=manager, version=harness_with_history["v1"], scenario=quick,
                                          endpoint=scripted_model)
    run.refresh_from_db()
    assert (run.kind, run.job.status, run.playing, run.play_speed) == ("run", "queued", True, services.ASAP)
    assert len(queued["ticks"]) == 1
    drain(queued, capture, FakeClock())
    run.refresh_from_db()
    job = run.job
    assert (job.status, run.status, run.playing) == ("succeeded", "closed", False)
    assert job.started_at and job.finished_at and job.finished_at >= job.started_at and job.worker_host
    assert (job.progress_done, job.progress_total, job.percent) == (360, 360, 100)  # scenario seconds
    assert [e.action for e in AuditEvent.objects.filter(scope=f"scenario_run:{run.pk}").order_by("id")] == [
        "scenario_run.queued", "scenario_run.succeeded"]
    s = job.summary
    assert (s["comments"], s["turns"], s["replies"], s["failed_turns"]) == (3, 3, 3, 0)
    assert s["fallbacks"] == 1 and s["fallback_reasons"] == {"model_error": 1} and s["model_errors"] >= 1
    assert s["tool_faults"] == 1 and s["tool_faults_by_kind"] == {"permission_denied": 1}
    assert s["tool_faults_by_tool"] == {"catalog.stock": 1}
    assert s["tool_calls"] == 4 and s["turn_ms_p50"] is not None and s["turn_ms_p95"] >= s["turn_ms_p50"]
    assert s["ttft_ms_p50"] is not None
    finished = PreviewEvent.objects.get(room=run, type="scenario_finished")
    assert finished.payload["summary"] == s
    transcript = selectors.preview_transcript(room_id=run.pk)
    assert [t["reply"]["text"] for t in transcript[:2]] == [GOOD, STOCK_REPLY]
    stock_call = transcript[1]["tools"][-1]
    assert stock_call["name"] == "check_stock" and stock_call["result"]["fault"] == "permission_denied"
    assert transcript[1]["started"]["faults"] == {"catalog.stock": "permission_denied"}
    assert [r.pk for r in selectors.scenario_run_list(scenario_id=quick.pk)] == [run.pk]
    assert not selectors.preview_room_list(user=manager).filter(pk=run.pk).exists()  # runs have their own list


def test_a_tick_that_breaks_fails_the_run(manager, harness_with_history, scripted_model, quick, queued,
                                          monkeypatch, django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    with capture(execute=True):
        run = services.scenario_run_start(user=manager, version=harness_with_history["v1"], scenario=quick,
                                          endpoint=scripted_model)
    queued["turns"].clear()
    run.refresh_from_db()

    def broken(room):
        raise RuntimeError("scenario store unreachable")

    monkeypatch.setattr(services.play, "_scenario_run_at", broken)
    with pytest.raises(RuntimeError):
        _tick(run, run.tick_token, timezone.now() + dt.timedelta(seconds=LOST), capture)
    run.refresh_from_db()
    assert (run.job.status, run.status, run.playing) == ("failed", "closed", False)
    assert "scenario store unreachable" in run.job.error and event_types(run.pk)[-1] == "play_failed"


def test_a_run_no_worker_advances_is_failed_by_the_sweep(manager, harness_with_history, scripted_model, quick,
                                                        queued, django_capture_on_commit_callbacks, settings):
    capture = django_capture_on_commit_callbacks
    with capture(execute=True):
        run = services.scenario_run_start(user=manager, version=harness_with_history["v1"], scenario=quick,
                                          endpoint=scripted_model)
    run.refresh_from_db()
    _tick(run, run.tick_token, timezone.now(), capture)  # the worker takes it: running
    run.refresh_from_db()
    assert run.job.status == "running" and run.job.heartbeat_at == run.clock_ticked_at  # each tick beats
    silent = services.LOST_TURN_S + settings.HEARTBEAT_STALE_S
    assert jobs_sweep_stalled(now=run.clock_ticked_at + dt.timedelta(seconds=silent - 5)) == []
    # ... then the worker died with its tick: nothing advances the clock any more
    later = run.clock_ticked_at + dt.timedelta(seconds=silent + 5)
    assert jobs_sweep_stalled(now=later) == [str(run.pk)]  # the one sweep of every job kind
    run.refresh_from_db()
    assert (run.job.status, run.status, run.playing) == ("failed", "closed", False)
    assert run.job.error.startswith("WorkerLost: no worker advanced this run") and run.job.summary
    assert event_types(run.pk)[-1] == "play_failed"
    assert jobs_sweep_stalled(now=later) == []
    assert ScenarioRunJob in job_models()


def test_closing_a_run_before_its_end_fails_it(manager, harness_with_history, scripted_model, quick, queued,
                                               django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        run = services.scenario_run_start(user=manager, version=harness_with_history["v1"], scenario=quick,
                                          endpoint=scripted_model)
    token = queued["ticks"][0][1]
    services.preview_close(user=manager, room=run)  # closing a run cancels it: queued, at once
    assert (run.job.status, run.status, run.job.error, run.playing) == ("cancelled", "closed", "", False)
    assert event_types(run.pk)[-2:] == ["cancel_requested", "run_cancelled"]
    assert AuditEvent.objects.filter(scope=f"scenario_run:{run.pk}", action="scenario_run.cancel",
                                     to_state="cancelled").exists()
    assert services.preview_clock_tick(room_id=run.pk, token=token)["ran"] is False
    with pytest.raises(InvalidTransition):  # only a queued run can be executed
        services.scenario_run_execute(room_id=run.pk)


def test_a_lost_turn_no_longer_holds_the_clock(manager, harness_with_history, scripted_model, quick, queued,
                                               django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    room = _open(manager, harness_with_history["v1"], scripted_model, quick)
    with capture(execute=True):
        services.preview_clock_step(user=manager, room=room, minutes=1)  # the minute-1 comment: a turn queued
    turn_id = queued["turns"].pop()[1]
    with capture(execute=True):
        services.preview_play(user=manager, room=room, speed=60)
    room.refresh_from_db()
    soon = room.clock_ticked_at + dt.timedelta(seconds=1)
    assert _tick(room, room.tick_token, soon, capture)["minute"] == 1  # waits for the queued turn
    room.refresh_from_db()
    # the worker died with it: after LOST_TURN_S without an event the turn is recorded as failed
    out = _tick(room, room.tick_token, timezone.now() + dt.timedelta(seconds=LOST), capture)
    assert event_types(room.pk, turn_id)[-1] == "turn_failed" and out["minute"] > 1
    room.refresh_from_db()
    assert room.scenario_minute == 6  # the rest of the 6 minutes, in one go after so long


def test_run_scenario_command(manager, harness_with_history, scripted_model, scripted_endpoint, quick):
    _script_quick_run(scripted_endpoint)
    out = io.StringIO()
    call_command("run_scenario", "quick-check", "--version", "glow-gadget@1", "--endpoint", "scripted",
                 "--user", manager.username, stdout=out)
    text = out.getvalue()
    run = PreviewRoom.objects.get(kind="run")
    assert str(run.pk) in text and "status: succeeded" in text
    assert "turns 3 · replies 3 · fallbacks 1" in text and "tool faults 1" in text and "turn ms p50" in text
    assert (run.job.status, run.status, run.seed) == ("succeeded", "closed", quick.parsed().seed)
    assert run.job.summary["tool_faults_by_kind"] == {"permission_denied": 1}
    assert [t["state"] for t in selectors.preview_transcript(room_id=run.pk)] == ["done"] * 3

    out = io.StringIO()
    with pytest.raises(SystemExit) as exit_info:
        call_command("run_scenario", "quick-check", "--version", "glow-gadget@1", "--endpoint", "scripted",
                     "--user", manager.username, "--json", "--seed", "5", "--fail-on-fallback", stdout=out)
    assert exit_info.value.code == 2 and '"status": "succeeded"' in out.getvalue()  # every turn fell back
    for args, message in ((["nope", "--version", "glow-gadget@1"], "no scenario"),
                          (["quick-check", "--version", "glow-gadget"], "<harness-slug>@<number>"),
                          (["quick-check", "--version", "glow-gadget@9"], "no harness version"),
                          (["quick-check", "--version", "glow-gadget@1", "--endpoint", "x"], "no model endpoint"),
                          (["quick-check", "--version", "glow-gadget@1"], "no superuser")):
        with pytest.raises(CommandError, match=message):
            call_command("run_scenario", *args)
    with pytest.raises(CommandError, match="does not allow"):
        from django.contrib.auth import get_user_model

        op = get_user_model().objects.create_user("op_cli")
        call_command("run_scenario", "quick-check", "--version", "glow-gadget@1", "--user", op.username)


# --- the real local model ---------------------------------------------------------------------------------

LOCAL_SCENARIO = "compliance-traps"


def test_whole_demo_scenario_on_the_local_model(request, manager, demo_manifest, demo_scenarios):
    """A demo scenario played to the end on the project's tiny model (real tokens over real HTTP), the way
    ``run_scenario`` plays it: every comment answered in a stored turn, the summary matches the events."""
    from tests.streams.test_preview_local_model import local_model_endpoint, tiny_version

    endpoint = local_model_endpoint(request)
    scenario = demo_scenarios[LOCAL_SCENARIO]
    run = services.scenario_run_start(user=manager, version=tiny_version(manager, demo_manifest),
                                      scenario=scenario, endpoint=endpoint, play=False)
    run = services.scenario_run_execute(room_id=run.pk)
    assert (run.job.status, run.status, run.job.error) == ("succeeded", "closed", "")
    assert run.scenario_minute == scenario.duration_minutes

    expected = ScenarioRun(scenario.parsed(), run.seed).advance_to(scenario.duration_minutes)
    stored = [e.payload for e in PreviewEvent.objects.filter(room=run, type="viewer_comment").order_by("seq")]
    assert [(p["viewer"], p["text"]) for p in stored] == [(c.viewer_name, c.text) for c in expected]
    timeline = [e.payload["kind"] for e in PreviewEvent.objects.filter(room=run, type="timeline_event")]
    assert timeline == [e.kind for e in ScenarioRun(scenario.parsed(), run.seed).scenario.timeline]

    transcript = selectors.preview_transcript(room_id=run.pk)
    assert transcript and all(t["state"] == "done" and t["reply"]["text"] for t in transcript)
    assert sum(len(t["comments"]) for t in transcript) == len(expected)
    real = [t for t in transcript if t["timings"]["model_calls"] >= 1 and t["timings"]["ttft_ms"] is not None]
    assert len(real) == len(transcript)  # every turn streamed from the model
    assert any(t["tools"] for t in transcript) and any(t["skills"] for t in transcript)
    s = run.job.summary
    assert (s["comments"], s["turns"], s["replies"]) == (len(expected), len(transcript), len(transcript))
    assert s["model_errors"] == 0 and s["failed_turns"] == 0
    assert 0 < s["turn_ms_p50"] <= s["turn_ms_p95"] and 0 < s["ttft_ms_p50"] <= s["ttft_ms_p95"]
    assert s["fallbacks"] == sum(1 for t in transcript if t["reply"]["fallback"])
    assert s["hook_failures"] == _count_failed_hooks(transcript)


def _count_failed_hooks(transcript) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in transcript:
        for h in t["hooks"]:
            if not h["passed"]:
                out[h["hook_id"]] = out.get(h["hook_id"], 0) + 1
    return dict(sorted(out.items()))
