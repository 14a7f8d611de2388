"""The operator's controls of a live session (RUN_LIVE; each audited on the deployment's timeline and stored as the
session's event), and handing the session to a runner.

- :func:`live_session_mute` — no turns run while muted (comments keep queueing; a reply that finishes meanwhile is
  withheld and its comments answered after unmuting).
- :func:`live_approval_mode` — approve-before-speak: each reply waits (``reply_pending``) for
  :func:`live_reply_approve` (as is, or edited: an edited text passes the output hooks again) or
  :func:`live_reply_reject`.
- :func:`live_tool_decide` — approve or refuse a destructive tool's call that a turn holds
  (``destructive_tools_need_approval``: :mod:`streams.services.live_tool_approval`).
- :func:`live_takeover_say` — the operator speaks through the avatar: the text passes the SAME output hooks the
  turn engine judges replies by (those configured in the manifest in force, :func:`streams.engine.hooks.
  run_before_reply`), and is stored as ``reply_spoken`` {by: "human", operator}; a failing hook refuses it (400,
  each verdict listed), nothing spoken.
- :func:`live_comment_skip`, :func:`live_product_pin` (the pinned card is in the next turn's room context).
- :func:`live_runner_ensure` — send a runner (interactive queue, on commit) unless a fresh lease exists;
  :func:`live_runners_sweep` (the scheduler's ``live-runners-sweep``) does it for every live session whose lease
  went stale: a killed runner or worker resumes within ``RUNNER_STALE_S`` + the sweep interval.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from console import roles
from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from console.services import audit_record
from streams.models import LiveComment, LiveEvent, LiveSession
from streams.services.live_events import live_event_append
from streams.services.live_turns import DECIDED, QUEUED_PREFIX, RUNNER_STALE_S, lease_fresh, queued_mark

logger = logging.getLogger(__name__)

MAX_TAKEOVER_CHARS = 1000
# Hooks about how the model reached its reply, not about the words: an operator loads no skill and may speak without
# a comment to answer. Every hook on the text itself (format, banned phrases, factual risk, language, tone, quality)
# judges the operator as it judges the avatar.
PROCEDURAL_HOOK_KINDS = frozenset({"reply_skill_loaded", "relevance"})


def _require_run(user) -> None:
    if not user.has_perm(roles.RUN_LIVE):
        raise NotAllowed("your role does not allow you to steer live sessions")


def _locked_live(session: LiveSession) -> LiveSession:
    locked = LiveSession.objects.select_for_update(of=("self",)).select_related("deployment").get(pk=session.pk)
    if locked.status != LiveSession.Status.LIVE:
        raise InvalidTransition(f"this live session has {locked.status}")
    return locked


def _audit(user, session: LiveSession, action: str, *, from_state: str = "", to_state: str = "",
           data: dict | None = None, comment: str = "") -> None:
    audit_record(actor=user, action=f"live_session.{action}", scope=f"deployment:{session.deployment.name}",
                 target=f"live_session:{session.pk}", from_state=from_state, to_state=to_state, comment=comment,
                 data={"session": str(session.pk), "title": session.title, **(data or {})})


def _wake(session_id) -> None:
    from streams.services.live_sessions import live_runner_wake

    transaction.on_commit(lambda: live_runner_wake(session_id), robust=True)


# --- mute and approval -----------------------------------------------------------------------------------------------


def live_session_mute(*, user, session: LiveSession, muted: bool) -> LiveSession:
    """Mute (no turns run, comments wait) or unmute the avatar. Idempotent: the same state stores nothing."""
    _require_run(user)
    muted = bool(muted)
    with transaction.atomic():
        locked = _locked_live(session)
        if locked.muted != muted:
            locked.muted = muted
            locked.save(update_fields=["muted"])
            live_event_append(session_id=locked.pk, type="muted", payload={"muted": muted,
                                                                            "by": user.get_username()})
            _audit(user, locked, "muted" if muted else "unmuted", from_state="muted" if not muted else "speaking",
                   to_state="muted" if muted else "speaking")
            _wake(locked.pk)
    return locked


def live_approval_mode(*, user, session: LiveSession, on: bool) -> LiveSession:
    """Approve-before-speak on or off (from the next reply; one already pending still waits for a decision)."""
    _require_run(user)
    on = bool(on)
    with transaction.atomic():
        locked = _locked_live(session)
        if locked.approve_before_speak != on:
            locked.approve_before_speak = on
            locked.save(update_fields=["approve_before_speak"])
            live_event_append(session_id=locked.pk, type="approval_mode", payload={"on": on,
                                                                                    "by": user.get_username()})
            _audit(user, locked, "approval_on" if on else "approval_off")
    return locked


def _pending(locked: LiveSession, turn_id: str) -> LiveEvent:
    """The undecided reply_pending of ``turn_id`` (404 if none, 409 if already decided)."""
    turn_id = str(turn_id or "")[:64]
    event = LiveEvent.objects.filter(session=locked, turn_id=turn_id, type="reply_pending").first() if turn_id \
        else None
    if event is None:
        raise LiveEvent.DoesNotExist(f"no reply of turn {turn_id!r} waits for approval in this session")
    decided = LiveEvent.objects.filter(session=locked, turn_id=turn_id, type__in=DECIDED).first()
    if decided is not None:
        raise InvalidTransition(f"the reply of turn {turn_id} was already decided ({decided.type})")
    return event


def _turn_comments_close(locked: LiveSession, turn_id: str, status: str, reason: str) -> list[tuple[str, dict]]:
    ids = list(LiveComment.objects.filter(session=locked, turn_id=turn_id, status=LiveComment.Status.ANSWERING)
               .values_list("pk", flat=True))
    LiveComment.objects.filter(pk__in=ids).update(status=status, reason=reason[:200])
    return [("comment_status", {"comment_id": pk, "status": status, "reason": reason[:200]}) for pk in ids]


def live_reply_approve(*, user, session: LiveSession, turn_id: str, text: str | None = None) -> dict[str, Any]:
    """Speak a pending reply: as the turn wrote it, or ``text`` (an edit passes the output hooks again: 400 listing
    the verdicts when one fails; then nothing is spoken and the reply still waits). Returns the spoken event's
    payload."""
    _require_run(user)
    with transaction.atomic():
        locked = _locked_live(session)
        pending = _pending(locked, turn_id)
        original = pending.payload.get("text", "")
        edited = text is not None and text.strip() != original.strip()
        verdicts: list[dict[str, Any]] = []
        if edited:
            text = _text_checked(locked, text)
            verdicts = _verdicts_or_refuse(locked, text)
        spoken = {"text": text.strip() if edited else original, "by": "human" if edited else "avatar",
                  "operator": user.get_username(), "approved": True, "edited": edited}
        events = [("hook_result", v) for v in verdicts] + [("reply_spoken", spoken)]
        events += _turn_comments_close(locked, pending.turn_id, LiveComment.Status.ANSWERED, "")
        live_event_append(session_id=locked.pk, turn_id=pending.turn_id, events=events)
        _audit(user, locked, "reply_approved", from_state="pending", to_state="spoken",
               data={"turn_id": pending.turn_id, "edited": edited})
        _wake(locked.pk)
    return spoken


def live_reply_reject(*, user, session: LiveSession, turn_id: str) -> dict[str, Any]:
    """Drop a pending reply: nothing is spoken; its comments are skipped (the operator decided)."""
    _require_run(user)
    with transaction.atomic():
        locked = _locked_live(session)
        pending = _pending(locked, turn_id)
        payload = {"by": user.get_username(), "text": pending.payload.get("text", "")}
        events = [("reply_rejected", payload)]
        events += _turn_comments_close(locked, pending.turn_id, LiveComment.Status.SKIPPED,
                                       f"reply rejected by {user.get_username()}")
        live_event_append(session_id=locked.pk, turn_id=pending.turn_id, events=events)
        _audit(user, locked, "reply_rejected", from_state="pending", to_state="rejected",
               data={"turn_id": pending.turn_id})
        _wake(locked.pk)
    return payload


def live_tool_decide(*, user, session: LiveSession, turn_id: str, call_id: str, approve: bool) -> dict[str, Any]:
    """Approve or refuse a tool call waiting in a turn (``destructive_tools_need_approval``: the turn waits for this;
    :mod:`streams.services.live_tool_approval`). 404 when no such call waits, 409 once it was decided (by an
    operator, or by the turn's deadline). Returns the decision's payload."""
    from streams.services.live_tool_approval import DECIDED, PENDING, decision_of

    _require_run(user)
    turn_id, call_id = str(turn_id or "")[:64], str(call_id or "")[:128]
    with transaction.atomic():
        locked = _locked_live(session)
        pending = next((e for e in LiveEvent.objects.filter(session=locked, turn_id=turn_id, type=PENDING)
                        if e.payload.get("call_id") == call_id), None) if turn_id and call_id else None
        if pending is None:
            raise LiveEvent.DoesNotExist(f"no tool call {call_id!r} of turn {turn_id!r} waits for approval")
        decided = decision_of(locked.pk, turn_id, call_id)
        if decided is not None:
            raise InvalidTransition(f"the call of {pending.payload.get('tool')} was already decided "
                                    f"({'approved' if decided.get('approved') else 'refused'} by {decided.get('by')})")
        payload = {"call_id": call_id, "tool": pending.payload.get("tool", ""), "approved": bool(approve),
                   "by": user.get_username()}
        live_event_append(session_id=locked.pk, turn_id=turn_id, type=DECIDED, payload=payload)
        _audit(user, locked, "tool_approved" if approve else "tool_refused", from_state="pending",
               to_state="approved" if approve else "refused",
               data={"turn_id": turn_id, "call_id": call_id, "tool": payload["tool"],
                     "arguments": pending.payload.get("arguments")})
        _wake(locked.pk)  # the turn waits on the runner's nudge
    return payload


# --- take over -------------------------------------------------------------------------------------------------------


def _text_checked(locked: LiveSession, text: Any) -> str:
    text = text.strip() if isinstance(text, str) else ""
    if not text:
        raise ValidationFailed("nothing to say", errors=[{"path": "text", "message": "write what the avatar says"}])
    if len(text) > MAX_TAKEOVER_CHARS:
        raise ValidationFailed("the text is too long", errors=[
            {"path": "text", "message": f"at most {MAX_TAKEOVER_CHARS} characters"}])
    return text


def operator_text_verdicts(manifest, room: dict[str, Any], text: str) -> list[Any]:
    """The output hooks' verdicts on an operator's text: the manifest's before-reply hooks and the built-in checks,
    the room's catalogue standing in for the tool results a turn would have (a price is backed by the product's
    own price), without the procedural hooks (:data:`PROCEDURAL_HOOK_KINDS`)."""
    from streams.engine import hooks as H

    products = [p for p in (room or {}).get("products") or [] if isinstance(p, dict)]
    state = H.ReplyState(reply=text, loaded_skills=(), tool_results=products, comments=(), room=room)
    return [v for v in H.run_before_reply(manifest, state) if v.kind not in PROCEDURAL_HOOK_KINDS]


def _verdicts_or_refuse(locked: LiveSession, text: str) -> list[dict[str, Any]]:
    from streams.deployment_selectors import deployment_in_force

    manifest = deployment_in_force(locked.deployment).version.manifest
    verdicts = operator_text_verdicts(manifest, locked.room_state, text)
    listed = [{"hook_id": v.hook_id, "kind": v.kind, "point": v.point, "passed": v.passed, "on_fail": v.on_fail,
               "message": v.message, "detail": v.detail, "by": "operator"} for v in verdicts]
    failed = [v for v in listed if not v["passed"]]
    if failed:
        raise ValidationFailed("the output hooks refused this text: nothing was spoken", errors=[
            {"path": "text", "message": f"{v['hook_id']} ({v['kind']}): {v['detail'] or v['message'] or 'failed'}"}
            for v in failed])
    return listed


def live_takeover_say(*, user, session: LiveSession, text: str) -> dict[str, Any]:
    """The operator speaks through the avatar (module docstring). Returns {"turn_id", "text", "verdicts"}."""
    _require_run(user)
    with transaction.atomic():
        locked = _locked_live(session)
        text = _text_checked(locked, text)
        verdicts = _verdicts_or_refuse(locked, text)
        turn_id = f"human-{uuid.uuid4().hex[:26]}"
        live_event_append(session_id=locked.pk, turn_id=turn_id, events=[
            *[("hook_result", v) for v in verdicts],
            ("reply_spoken", {"text": text, "by": "human", "operator": user.get_username()})])
        _audit(user, locked, "takeover", data={"turn_id": turn_id, "text": text[:200]})
    return {"turn_id": turn_id, "text": text, "verdicts": verdicts}


# --- the queue and the room ------------------------------------------------------------------------------------------


def live_comment_skip(*, user, session: LiveSession, comment_id: Any) -> LiveComment:
    """Take a queued comment out of the reply queue (409 once a turn answers it)."""
    _require_run(user)
    try:
        comment_id = int(comment_id)
    except (TypeError, ValueError):
        raise LiveComment.DoesNotExist(f"no comment {comment_id!r} in this session") from None
    with transaction.atomic():
        locked = _locked_live(session)
        comment = LiveComment.objects.select_for_update().filter(session=locked, pk=comment_id).first()
        if comment is None:
            raise LiveComment.DoesNotExist(f"no comment {comment_id} in this session")
        if comment.status != LiveComment.Status.QUEUED:
            raise InvalidTransition(f"comment {comment_id} is {comment.status}: only a queued comment can be skipped")
        reason = f"skipped by {user.get_username()}"
        comment.status, comment.reason = LiveComment.Status.SKIPPED, reason
        comment.save(update_fields=["status", "reason"])
        live_event_append(session_id=locked.pk, type="comment_status", payload={
            "comment_id": comment.pk, "status": comment.status, "reason": reason})
        _audit(user, locked, "comment_skipped", data={"comment_id": comment.pk, "viewer": comment.viewer})
    return comment


def live_product_pin(*, user, session: LiveSession, link_id: Any) -> dict[str, Any] | None:
    """Pin a product card on screen (``link_id`` of the session's room), or unpin (None). The next turn's room
    context shows it. Returns the pinned card."""
    _require_run(user)
    with transaction.atomic():
        locked = _locked_live(session)
        room = dict(locked.room_state or {})
        pinned = None
        if link_id is not None and link_id != "":
            try:
                wanted = int(link_id)
            except (TypeError, ValueError):
                wanted = None
            product = next((p for p in room.get("products") or [] if p.get("link_id") == wanted), None) \
                if wanted is not None else None
            if product is None:
                known = ", ".join(str(p.get("link_id")) for p in room.get("products") or [])
                raise ValidationFailed("no such product", errors=[
                    {"path": "link_id", "message": f"{link_id!r} is not a product of this room (links: {known})"}])
            pinned = {"link_id": product["link_id"], "title": product.get("title", ""), "duration_s": 0,
                      "pinned_at_minute": room.get("clock_minute") or 0}
        before = room.get("pinned")
        room["pinned"] = pinned
        locked.room_state = room
        locked.save(update_fields=["room_state"])
        live_event_append(session_id=locked.pk, type="product_pinned", payload={
            "link_id": pinned["link_id"] if pinned else None, "title": pinned["title"] if pinned else "",
            "by": user.get_username()})
        _audit(user, locked, "product_pinned" if pinned else "product_unpinned",
               from_state=str((before or {}).get("link_id") or ""), to_state=str(pinned["link_id"] if pinned else ""))
    return pinned


# --- the runner -------------------------------------------------------------------------------------------------------


def live_runner_ensure(session_id, *, replacing: str | None = None) -> bool:
    """Send the session a runner (the interactive queue, on commit) unless a runner holds a fresh lease or one was
    just sent; the lease is marked queued for that task meanwhile. ``replacing``: the id of a runner task that was
    sent but will not run (its worker is shutting down): its queued mark does not count. True when one was sent."""
    from streams.tasks import live_session_run

    task_id = uuid.uuid4().hex
    with transaction.atomic():
        session = (LiveSession.objects.select_for_update().filter(pk=session_id, status=LiveSession.Status.LIVE)
                   .only("runner_id", "runner_beat_at").first())
        if session is None:
            return False
        replaced = bool(replacing) and session.runner_id.startswith(f"{QUEUED_PREFIX}{replacing}:")
        if not replaced and lease_fresh(session.runner_id, session.runner_beat_at):
            return False
        session.runner_id, session.runner_beat_at = queued_mark(task_id, session.runner_id), timezone.now()
        session.save(update_fields=["runner_id", "runner_beat_at"])
        queue, sid = settings.INTERACTIVE_QUEUE, str(session.pk)
        transaction.on_commit(lambda: live_session_run.apply_async((sid,), queue=queue, task_id=task_id),
                              robust=True)
    return True


def live_runners_sweep() -> list[str]:
    """Periodic: a runner for every live session whose lease is stale (its runner or worker died). Returns the
    sessions a runner was sent to."""
    stale = timezone.now() - timedelta(seconds=RUNNER_STALE_S)
    ids = list(LiveSession.objects.filter(status=LiveSession.Status.LIVE)
               .filter(Q(runner_beat_at__isnull=True) | Q(runner_beat_at__lt=stale)).values_list("pk", flat=True))
    return [str(pk) for pk in ids if live_runner_ensure(pk)]
