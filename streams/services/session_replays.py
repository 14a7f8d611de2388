"""Session replays (writes): start, cancel, resume, and the worker's replay of a recorded live session.

A replay (:class:`streams.replay_models.SessionReplay`) is a job (:mod:`console.jobs`) on the batch ``gpu`` queue:
it loads a model server the way evaluations do and never waits in front of, or slows, the interactive runner's
turns. The worker (:func:`session_replay_execute`) takes the session's answered turns in order
(:func:`streams.replay_selectors.session_turns`) and plays each again through the one turn engine
(:func:`streams.engine.turn.run_turn`) under the replay's harness version and endpoint, from the room state, the
comments and the history that turn started from; it judges the recorded reply and the new one with the one set of
reply rules (:mod:`streams.replay_compare`) and stores the pair at once. A cancel is honoured between turns; a
cancelled, failed or killed replay resumes at the turns not stored yet.

Who may: everyone who watches live sessions reads replays (VIEW_LIVE); starting one needs VIEW_LIVE and either
RUN_LIVE (operators replay their broadcasts) or RUN_EVAL (ML staff evaluate a candidate harness or model on real
traffic). Cancel and resume: the person who started it, or an ML lead (``roles.MANAGE_ANY_TRAINING``: the rule
the ML team's jobs follow).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction

from console import roles
from console.errors import NotAllowed, ValidationFailed
from console.jobs import (
    JobCancelled,
    JobReporter,
    job_cancel,
    job_enqueue,
    job_resume,
    job_run,
)
from console.services import audit_record
from streams import replay_selectors as selectors
from streams.replay_models import SessionReplay, SessionReplayTurn

logger = logging.getLogger(__name__)

EVENTS_KEPT_PER_TURN = 300
MAX_REQUEST_MODEL_CHARS = 200


def may_start(user) -> bool:
    return user.has_perm(roles.VIEW_LIVE) and (user.has_perm(roles.RUN_LIVE) or user.has_perm(roles.RUN_EVAL))


def may_manage(user, replay: SessionReplay) -> bool:
    """Cancel or resume: a role that may start replays, and the replay's starter or an ML lead (the rule of the ML
    team's jobs)."""
    return may_start(user) and (replay.created_by_id == user.pk or user.has_perm(roles.MANAGE_ANY_TRAINING))


def _require_start(user, what: str) -> None:
    if not user.has_perm(roles.VIEW_LIVE):
        raise NotAllowed("your role does not allow you to see live sessions")
    if not may_start(user):
        raise NotAllowed(f"your role does not allow you to {what}: operators and ML staff replay sessions")


def _require_manage(user, replay: SessionReplay, what: str) -> None:
    _require_start(user, what)
    if not may_manage(user, replay):
        owner = replay.created_by.get_username()
        raise NotAllowed(f"only {owner}, who started it, or an ML lead may {what}")


def _bounded_int(value: Any, path: str, lo: int, hi: int, errors: list[dict[str, str]]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not (lo <= value <= hi):
        errors.append({"path": path, "message": f"a whole number from {lo} to {hi}"})
        return lo
    return value


def session_replay_start(*, user, session, harness_version, endpoint, request_model: str = "", sampling: Any = None,
                         seed: int = 0, deadline_s: float | None = None, name: str = "",
                         enqueue: bool = True) -> SessionReplay:
    """Queue a replay of ``session``'s answered turns under ``harness_version`` (any version of any harness:
    drafts too, nothing is spoken) against ``endpoint`` (``request_model``: the model name requests carry, e.g. a
    LoRA adapter loaded there; default the endpoint's). On commit, ``gpu`` queue (``enqueue=False``: only create
    it). NotAllowed for roles that may not replay; ValidationFailed with located errors (``harness_version``,
    ``endpoint``, ``sampling.temperature``, ``seed``, ``deadline_s``, ``request_model``, ``session``), nothing
    saved."""
    from streams.engine.outbound import OutboundRefused
    from streams.sampling import validate_sampling

    _require_start(user, "replay sessions")
    errors: list[dict[str, str]] = []
    if harness_version is None:
        errors.append({"path": "harness_version", "message": "the harness version the turns run under"})
    if endpoint is None:
        errors.append({"path": "endpoint", "message": "the model endpoint the turns are sent to"})
    else:
        try:
            endpoint.check_usable()
        except OutboundRefused as exc:
            errors.append({"path": "endpoint", "message": str(exc)})
    seed = _bounded_int(seed, "seed", 0, 2**31 - 1, errors)
    if deadline_s is not None and (isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float))
                                   or not (0 < deadline_s <= 600)):
        errors.append({"path": "deadline_s", "message": "seconds, more than 0 and at most 600"})
    if not isinstance(request_model, str) or len(request_model) > MAX_REQUEST_MODEL_CHARS:
        errors.append({"path": "request_model", "message": f"text, at most {MAX_REQUEST_MODEL_CHARS} characters"})
        request_model = ""
    try:
        parsed_sampling = validate_sampling(sampling)
    except ValidationFailed as exc:
        errors += exc.errors
    turns = selectors.session_turns(session=session)
    if not turns:
        errors.append({"path": "session", "message": "this session has no answered turn to replay yet"})
    if errors:
        raise ValidationFailed("the session replay is not valid", errors=errors)
    name = (name or "").strip()[:120] or (
        f"{session.title} · {harness_version.harness.slug} v{harness_version.number} · {endpoint.name}")[:120]
    with transaction.atomic():
        replay = SessionReplay.objects.create(
            name=name, session=session, harness_version=harness_version, endpoint=endpoint,
            request_model=request_model.strip(), sampling=parsed_sampling, seed=seed,
            deadline_s=float(deadline_s) if deadline_s is not None else None, created_by=user,
            progress_total=len(turns))
        audit_record(actor=user, action="session_replay.queued", scope=replay.audit_scope(),
                     target=replay.audit_target(), to_state=SessionReplay.Status.QUEUED,
                     data={"session": str(session.pk), "harness_version": str(harness_version.pk),
                           "harness": harness_version.harness.slug, "version": harness_version.number,
                           "endpoint": endpoint.name, "request_model": replay.request_model, "seed": seed,
                           "sampling": parsed_sampling, "turns": len(turns)})
        if enqueue:
            job_enqueue(replay)
    return replay


def session_replay_cancel(*, user, replay: SessionReplay) -> SessionReplay:
    """The one cancel (console.jobs): queued → cancelled now; running → cancelling, stops after its current
    turn. Resumable."""
    _require_manage(user, replay, "cancel this replay")
    return job_cancel(replay, user=user)


def session_replay_resume(*, user, replay: SessionReplay) -> SessionReplay:
    """Queue a cancelled or failed replay again: it plays only the turns not stored yet."""
    _require_manage(user, replay, "resume this replay")
    return job_resume(replay, user=user)


# --- the worker --------------------------------------------------------------------------------------------------


SUMMARY_FIELDS = ("original", "new", "changed", "regressed", "improved", "skipped", "error")


def replay_summary(replay: SessionReplay, *, turns: int) -> dict[str, Any]:
    from streams.replay_compare import summarise

    return summarise(list(replay.turns.order_by("position").values(*SUMMARY_FIELDS)), turns=turns)


class _Manifests:
    """Harness manifests by version id (the recorded turns' own versions), read once each."""

    def __init__(self) -> None:
        self.cache: dict[Any, Any] = {}

    def get(self, version_id: Any) -> Any:
        from harness_editor.models import HarnessVersion

        if version_id not in self.cache:
            pk = version_id if isinstance(version_id, int) and not isinstance(version_id, bool) else (
                int(version_id) if isinstance(version_id, str) and version_id.isdigit() else None)
            version = HarnessVersion.objects.filter(pk=pk).first() if pk is not None else None
            self.cache[version_id] = version.manifest if version is not None else None
        return self.cache[version_id]


def _original_side(session, turn: dict[str, Any], manifests: _Manifests) -> dict[str, Any]:
    from streams.replay_compare import parse_events, turn_side

    version = (turn.get("started") or {}).get("version") or {}
    events = parse_events(selectors.turn_event_payloads(session=session, turn_id=turn["turn_id"]))
    side = turn_side(events=events, manifest=manifests.get(version.get("id")), comments=turn["replay_comments"],
                     room=turn["replay_room"], version=version)
    side["spoken"], side["rejected"] = turn.get("spoken"), bool(turn.get("rejected"))
    return side


def _play_turn(replay: SessionReplay, turn: dict[str, Any], backend: Any, manifest: Any
               ) -> tuple[dict[str, Any] | None, list[dict[str, Any]], str]:
    """Run the turn again; returns (the new side, its events without tokens, an engine failure or "")."""
    from streams.engine.turn import run_turn
    from streams.replay_compare import turn_side
    from streams.services.tool_runtime import tool_runtime_for

    events: list[dict[str, Any]] = []
    room = copy.deepcopy(turn["replay_room"])
    judged_room = copy.deepcopy(room)  # the state the reply speaks about: before the turn's own tools changed it
    sampling = {**replay.sampling, "seed": replay.seed}
    try:
        result = run_turn(manifest=manifest, room=room, comments=turn["replay_comments"],
                          history=turn["replay_history"], backend=backend, sampling=sampling,
                          deadline_s=replay.deadline_s, turn_id=f"replay-{turn['turn_id']}"[:64],
                          tools=tool_runtime_for(),
                          emit=lambda e: events.append(e.model_dump(mode="json")) if e.type != "token" else None)
    except Exception as exc:  # the engine reports model errors itself; this is a bug or a bad manifest
        logger.warning("replaying turn %s of session replay %s failed", turn["turn_id"], replay.pk, exc_info=True)
        return None, events, f"{type(exc).__name__}: {exc}"[:2000]
    version = {"id": replay.harness_version.pk, "slug": replay.harness_version.harness.slug,
               "number": replay.harness_version.number}
    side = turn_side(events=result.events, manifest=manifest, comments=turn["replay_comments"], room=judged_room,
                     reply=result.reply, fallback=result.fallback, reason=result.reason, version=version)
    return side, events[:EVENTS_KEPT_PER_TURN], ""


def _replay(replay: SessionReplay, reporter: JobReporter, *, backend_factory: Callable[[], Any] | None,
            on_turn: Callable[[SessionReplayTurn, int, int], None] | None) -> dict[str, Any]:
    from streams.engine.client import OpenAIChatClient
    from streams.replay_compare import compare, summarise

    reporter.stage("reading the recording")
    session = replay.session
    turns = selectors.session_turns(session=session)
    total = len(turns)
    done = set(replay.turns.values_list("turn_id", flat=True))
    reporter.progress(sum(1 for t in turns if t["turn_id"] in done), total, force=True)
    manifest = replay.harness_version.manifest
    manifests = _Manifests()
    if backend_factory is not None:
        backend = backend_factory()
    else:
        config = replay.endpoint.as_config()  # read here, in the worker (it may hold the API key)
        if replay.request_model:
            config = config.model_copy(update={"model": replay.request_model})
        backend = OpenAIChatClient(config)
    reporter.stage("replaying turns")
    stored = len(done)
    kept = list(replay.turns.values(*SUMMARY_FIELDS))  # the summary so far, kept up to date as turns are stored
    try:
        for position, turn in enumerate(turns, 1):
            if turn["turn_id"] in done:
                continue
            if reporter.cancel_requested(force=True):  # a turn takes seconds: one read each
                raise JobCancelled(summary=replay_summary(replay, turns=total))
            original = _original_side(session, turn, manifests)
            row = SessionReplayTurn(replay=replay, position=position, turn_id=turn["turn_id"][:64],
                                    comments=[{"viewer": c["viewer"], "text": c["text"]}
                                              for c in turn["replay_comments"]], original=original)
            if turn["not_replayable"]:
                row.skipped = turn["not_replayable"][:300]
            else:
                new, events, error = _play_turn(replay, turn, backend, manifest)
                row.events, row.error = events, error
                if new is not None:
                    flags = compare(original, new)
                    new["why"] = flags["why"]
                    row.new, row.changed, row.regressed, row.improved = (new, flags["changed"], flags["regressed"],
                                                                         flags["improved"])
            row.save()
            stored += 1
            kept.append({f: getattr(row, f) for f in SUMMARY_FIELDS})
            SessionReplay.objects.filter(pk=replay.pk).update(summary=summarise(kept, turns=total))
            reporter.progress(stored, total)
            if on_turn is not None:
                on_turn(row, stored, total)
    finally:
        close = getattr(backend, "close", None)
        if callable(close):
            close()
    return {"summary": replay_summary(replay, turns=total), "progress_done": total, "progress_total": total}


def session_replay_execute(*, replay_id, task_id: str | None = None,
                           backend_factory: Callable[[], Any] | None = None,
                           on_turn: Callable[[SessionReplayTurn, int, int], None] | None = None) -> SessionReplay:
    """The worker's service: claim the replay, play the turns not stored yet, store each pair as it ends, then
    the summary. Never raises for a failed replay (the failure is stored; it can be resumed). ``backend_factory``
    makes the chat backend instead of a client of the endpoint (a few tests); ``on_turn(row, done, total)`` is
    called after each stored turn."""
    replay = SessionReplay.objects.select_related("session", "harness_version__harness", "endpoint").get(pk=replay_id)

    def work(job):
        try:
            return _replay(replay, JobReporter(job), backend_factory=backend_factory, on_turn=on_turn)
        except JobCancelled:
            raise
        except Exception:
            # what was stored stays, with its summary, beside the error
            total = SessionReplay.objects.filter(pk=replay.pk).values_list("progress_total", flat=True).get()
            SessionReplay.objects.filter(pk=replay.pk).update(summary=replay_summary(replay, turns=total))
            raise

    return job_run(SessionReplay, replay.pk, work, task_id=task_id, stage="starting")
