"""Live sessions: start and end one, ingest tokens, viewer comments in, and waking the session runner.

- :func:`live_session_start` opens a session of a live room on a deployment in force and hands it to a runner
  (:func:`streams.services.live_controls.live_runner_ensure`, on commit); :func:`live_session_end` ends it (the
  runner sees the status and stops).
- :func:`live_comments_ingest` is the one way comments come in (REST, the ingest WebSocket, the webhook, the replay
  feed): every comment is stored, with its outcome (queued, duplicate, rate_limited, filtered) and priority, and a
  ``comment_in`` event, in one transaction that commits before the caller acknowledges anything.
- :func:`live_runner_wake` / :func:`live_runner_wait`: the nudge a runner waits on between turns (module section
  "waking the runner").
- :func:`webhook_signature_check`: the webhook's HMAC (``X-Hat-Timestamp``, ``X-Hat-Signature``); replays and
  floods are refused by :mod:`streams.services.live_ingest_guards`.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console import roles
from console.errors import DomainError, InvalidTransition, NotAllowed, ValidationFailed
from console.services import audit_record
from streams.deployment_selectors import deployment_in_force
from streams.engine import hooks as H
from streams.live import handling as rules
from streams.live.schemas import (
    CommentHandling,
    IncomingComment,
    IngestInvalid,
    feed_config_errors,
    handling_errors,
    handling_from,
    parse_ingest,
)
from streams.models import Deployment, LiveComment, LiveRoom, LiveSession, LiveToken, Scenario
from streams.services import live_ingest_guards as guards
from streams.services.live_events import live_event_append

logger = logging.getLogger(__name__)

SOURCES = ("api", "ws", "webhook", "replay")
WEBHOOK_MAX_SKEW_S = 300


def _require(user, perm: str, what: str) -> None:
    if not user.has_perm(perm):
        raise NotAllowed(f"your role does not allow you to {what}")


def _scope(session: LiveSession) -> str:
    return f"deployment:{session.deployment.name}"  # the deployment's timeline shows the sessions it served


# --- start and end ------------------------------------------------------------------------------------------------


def live_session_start(*, user, room: LiveRoom, deployment: Deployment, title: str, feed: str = "api",
                       feed_config: dict[str, Any] | None = None,
                       handling: dict[str, Any] | None = None) -> LiveSession:
    """A live session of ``room`` served by ``deployment`` as it is in force now (409 when nothing is approved,
    its label is gone or no endpoint serves it). The webhook feed gets a fresh HMAC key (the caller shows it
    once). On commit the session is handed to a runner."""
    _require(user, roles.RUN_LIVE, "start live sessions")
    errors: list[dict[str, str]] = []
    title = (title or "").strip()
    if not title:
        errors.append({"path": "title", "message": "a session needs a title"})
    elif len(title) > 120:
        errors.append({"path": "title", "message": "at most 120 characters"})
    if feed not in LiveSession.Feed.values:
        errors.append({"path": "feed", "message": f"one of {', '.join(LiveSession.Feed.values)}"})
        config: dict[str, Any] = {}
    else:
        config, problems = feed_config_errors(feed, feed_config)
        errors += [{"path": e.path, "message": e.message} for e in problems]
    errors += [{"path": e.path, "message": e.message} for e in handling_errors(handling)]
    if feed == "replay" and config:
        if config.get("scenario") and not Scenario.objects.filter(slug=config["scenario"]).exists():
            errors.append({"path": "feed_config.scenario", "message": f"no scenario {config['scenario']!r}"})
        if config.get("session") and not LiveSession.objects.filter(pk=config["session"]).exists():
            errors.append({"path": "feed_config.session", "message": f"no live session {config['session']}"})
    if errors:
        raise ValidationFailed("the live session is invalid", errors=errors)
    in_force = deployment_in_force(deployment)  # InvalidTransition (409): nothing approved, label gone
    if not in_force.endpoints:
        raise InvalidTransition(f"no endpoint serves deployment {deployment.name!r} now: start a server for it "
                                "(or load its adapter) first")
    from streams.selectors import room_state

    described = in_force.describe()
    with transaction.atomic():
        session = LiveSession.objects.create(
            title=title, room=room, deployment=deployment, feed=feed, feed_config=config,
            room_state=room_state(room), handling=CommentHandling.model_validate(handling or {}).model_dump(),
            started_by=user, revision_in_force=in_force.revision, version_in_force=in_force.version,
            webhook_secret=secrets.token_urlsafe(32) if feed == LiveSession.Feed.WEBHOOK else "")
        live_event_append(session_id=session.pk, type="session_started", payload={
            "deployment": deployment.name, "revision": in_force.revision.number, "version": described["version"],
            "label": in_force.label, "endpoints": described["endpoints"], "title": title, "feed": feed,
            "room": room.slug, "by": user.get_username()})
        audit_record(actor=user, action="live_session.started", scope=_scope(session),
                     target=f"live_session:{session.pk}", to_state=LiveSession.Status.LIVE,
                     data={"session": str(session.pk), "title": title, "room": room.slug, "feed": feed,
                           **{k: described[k] for k in ("revision", "label", "version", "model", "adapter")}})
        session_id = session.pk
        transaction.on_commit(lambda: _runner_ensure(session_id), robust=True)
    return session


def _runner_ensure(session_id) -> None:
    """Hand the session to a runner (helper "runner"'s service; a console without it yet just stores comments)."""
    try:
        from streams.services.live_controls import live_runner_ensure
    except ImportError:
        logger.warning("live session %s: no session runner in this build (streams.services.live_controls)",
                       session_id)
        return
    live_runner_ensure(session_id)


def live_session_end(*, user, session: LiveSession, reason: str = "") -> LiveSession:
    """End a live session (409 if it already ended). Comments still queued are expired; the runner sees the
    status, lets a turn in flight finish and stops."""
    _require(user, roles.RUN_LIVE, "end live sessions")
    with transaction.atomic():
        locked = LiveSession.objects.select_for_update(of=("self",)).select_related("deployment").get(pk=session.pk)
        if locked.status != LiveSession.Status.LIVE:
            raise InvalidTransition(f"this live session already {locked.status}")
        locked.status = LiveSession.Status.ENDED
        locked.ended_at = timezone.now()
        locked.ended_by = user
        locked.save(update_fields=["status", "ended_at", "ended_by"])
        queued = list(LiveComment.objects.filter(session=locked, status=LiveComment.Status.QUEUED)
                      .values_list("pk", flat=True))
        LiveComment.objects.filter(pk__in=queued).update(status=LiveComment.Status.EXPIRED,
                                                          reason="the session ended")
        events = [("comment_status", {"comment_id": pk, "status": LiveComment.Status.EXPIRED,
                                      "reason": "the session ended"}) for pk in queued]
        events.append(("session_ended", {"by": user.get_username(),
                                          "reason": (reason or "ended by an operator")[:200]}))
        live_event_append(session_id=locked.pk, events=events)
        audit_record(actor=user, action="live_session.ended", scope=_scope(locked),
                     target=f"live_session:{locked.pk}", from_state=LiveSession.Status.LIVE,
                     to_state=LiveSession.Status.ENDED, comment=reason[:4000] if reason else "",
                     data={"session": str(locked.pk), "title": locked.title, "expired_comments": len(queued)})
        transaction.on_commit(lambda: live_runner_wake(locked.pk), robust=True)
    return locked


# --- ingest tokens ------------------------------------------------------------------------------------------------


def live_token_create(*, user, session: LiveSession, scope: str) -> tuple[LiveToken, str]:
    """A bearer token for one session and one scope (``ingest``, ``overlay``). Returns (token, secret): only the
    secret's SHA-256 is stored, so the caller shows the secret once."""
    _require(user, roles.RUN_LIVE, "create tokens for live sessions")
    if scope not in LiveToken.Scope.values:
        raise ValidationFailed("the token is invalid", errors=[
            {"path": "scope", "message": f"one of {', '.join(LiveToken.Scope.values)}"}])
    if session.status != LiveSession.Status.LIVE:
        raise InvalidTransition(f"this live session already {session.status}")
    secret = LiveToken.new_secret()
    with transaction.atomic():
        token = LiveToken.objects.create(session=session, scope=scope, digest=LiveToken.digest_of(secret),
                                         prefix=secret[:12], created_by=user)
        audit_record(actor=user, action="live_token.created", scope=_scope(session),
                     target=f"live_session:{session.pk}", data={"token": str(token.pk), "scope": scope,
                                                                "prefix": token.prefix})
    return token, secret


def live_token_revoke(*, user, token: LiveToken) -> LiveToken:
    """From now on the token is refused (403); 409 if it already was revoked."""
    _require(user, roles.RUN_LIVE, "revoke tokens of live sessions")
    with transaction.atomic():
        locked = (LiveToken.objects.select_for_update(of=("self",)).select_related("session__deployment")
                  .get(pk=token.pk))
        if locked.revoked_at is not None:
            raise InvalidTransition("this token is already revoked")
        locked.revoked_at = timezone.now()
        locked.save(update_fields=["revoked_at"])
        audit_record(actor=user, action="live_token.revoked", scope=_scope(locked.session),
                     target=f"live_session:{locked.session_id}", data={"token": str(locked.pk),
                                                                      "scope": locked.scope, "prefix": locked.prefix})
    return locked


class TokenRefused(DomainError):
    """A token that exists but may not do this (revoked, another scope or session): 403."""

    status_code = 403
    code = "token_refused"


def live_token_check(token: LiveToken, *, session_id, scope: str) -> None:
    """Raise :class:`TokenRefused` unless ``token`` may act on ``session_id`` in ``scope``."""
    if token.revoked_at is not None:
        raise TokenRefused("this token was revoked")
    if str(token.session_id) != str(session_id):
        raise TokenRefused("this token belongs to another live session")
    if token.scope != scope:
        raise TokenRefused(f"this token's scope is {token.scope!r}, not {scope!r}")


# --- the webhook's signature --------------------------------------------------------------------------------------


class WebhookRejected(DomainError):
    status_code = 401
    code = "bad_signature"


def webhook_signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex HMAC-SHA256(secret, timestamp + "." + body)>``: what a platform sends as X-Hat-Signature."""
    mac = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii", "replace") + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def webhook_signature_check(*, secret: str, timestamp: str | None, signature: str | None, body: bytes,
                            now: float | None = None, max_skew_s: int = WEBHOOK_MAX_SKEW_S) -> None:
    """Raise :class:`WebhookRejected` (401) unless the body was signed with the session's key within
    ``max_skew_s`` of now (a captured request replayed later is refused). Constant-time comparison."""
    if not secret:
        raise WebhookRejected("this session takes no webhook")
    if not timestamp or not signature:
        raise WebhookRejected("send X-Hat-Timestamp and X-Hat-Signature")
    try:
        sent = int(timestamp)
    except ValueError:
        raise WebhookRejected("X-Hat-Timestamp must be Unix seconds") from None
    if abs((time.time() if now is None else now) - sent) > max_skew_s:
        raise WebhookRejected(f"X-Hat-Timestamp is more than {max_skew_s} s away from now")
    expected = webhook_signature(secret, timestamp, body)
    if not hmac.compare_digest(expected.encode("ascii"), signature.strip().encode("ascii", "replace")):
        raise WebhookRejected("the signature does not match the body")


# --- comments in --------------------------------------------------------------------------------------------------


_HOOKS: dict[str, tuple[Any, ...]] = {}  # manifest content hash -> its enabled viewer_input hooks


def _viewer_hooks(version) -> tuple[Any, ...]:
    """The enabled viewer_input hooks of a harness version (by content hash: parsed once per process)."""
    if version is None:
        return ()
    hooks = _HOOKS.get(version.content_hash)
    if hooks is None:
        if len(_HOOKS) >= 64:
            _HOOKS.clear()
        hooks = _HOOKS[version.content_hash] = tuple(H.enabled_hooks(version.manifest, "viewer_input"))
    return hooks


def _version_for(session: LiveSession):
    """The harness version whose viewer-input hooks filter comments now: the deployment's label resolved now,
    else the one the session last used."""
    try:
        return deployment_in_force(session.deployment).version
    except DomainError:
        return session.version_in_force


def _abuse_reason(hooks: Sequence[Any], comment: IncomingComment) -> str:
    for hook in hooks:
        verdict = H.check_viewer_input(hook, [{"text": comment.text, "viewer": comment.display_name(),
                                               "viewer_id": comment.viewer_id}])
        if not verdict.passed:
            detail = verdict.detail.removeprefix("comment 0: ").removeprefix("comment 0 ")
            return f"{verdict.hook_id}: {detail}"[:200]
    return ""


def _as_comments(comments: Sequence[IncomingComment | dict[str, Any]]) -> list[IncomingComment]:
    if all(isinstance(c, IncomingComment) for c in comments):
        if not comments:
            raise ValidationFailed("send at least one comment", errors=[{"path": "comments", "message": "empty"}])
        return list(comments)
    try:
        return parse_ingest({"comments": [c.as_dict() if isinstance(c, IncomingComment) else c for c in comments]})
    except IngestInvalid as exc:
        raise ValidationFailed("the comments are invalid",
                               errors=[{"path": e.path, "message": e.message} for e in exc.errors]) from None


def live_comments_ingest(*, session: LiveSession, comments: Sequence[IncomingComment | dict[str, Any]],
                         source: str, token: LiveToken | None = None,
                         signed: tuple[str, int] | None = None) -> list[dict[str, Any]]:
    """Store viewer comments (validated :class:`IncomingComment` s, or dicts of that shape: 400 with paths and
    nothing stored when any is bad) and say what became of each, in order: ``{"index", "external_id",
    "comment_id", "status", "reason", "priority"}`` with status ``queued``, ``duplicate`` (that id was received
    before: no second row), ``rate_limited`` or ``filtered``. Everything is committed when this returns (the caller
    acknowledges after); 409 when the session has ended. ``token``: the ingest token they came with; ``signed``:
    a webhook request's (signature, timestamp), taken once (409 :class:`~streams.services.live_ingest_guards.
    WebhookReplayed` again). Past the token's or the session's limit nothing is stored: 429
    :class:`~streams.services.live_ingest_guards.IngestLimited`, counted on the session."""
    if source not in SOURCES:
        raise ValueError(f"unknown source {source!r}")
    incoming = _as_comments(comments)
    try:
        return _ingest(session, incoming, source, token, signed)
    except guards.IngestLimited as exc:  # counted after the refused transaction rolled back
        guards.ingest_refused_count(session_id=session.pk, comments=exc.comments)
        raise


def _ingest(session: LiveSession, incoming: list[IncomingComment], source: str, token: LiveToken | None,
            signed: tuple[str, int] | None) -> list[dict[str, Any]]:
    woke = False
    with transaction.atomic():
        # the session's row lock: one ingest of a session at a time (dedupe and the rate limits see each other),
        # and none after the session ended
        locked = LiveSession.objects.select_for_update(of=("self",)).select_related("deployment").get(pk=session.pk)
        if locked.status != LiveSession.Status.LIVE:
            raise InvalidTransition(f"this live session already {locked.status}: it takes no more comments")
        now = time.time()
        if signed is not None:
            guards.webhook_receipt_take(session=locked, signature=signed[0], sent_at=signed[1],
                                        window_s=WEBHOOK_MAX_SKEW_S, now=now)
        handling = handling_from(locked.handling)
        hooks = _viewer_hooks(_version_for(locked))
        received = timezone.now()
        keys = []
        for c in incoming:
            ts = c.ts.timestamp() if c.ts else None
            keys.append([c.external_id] if c.external_id else
                        rules.dedupe_keys(viewer_id=c.viewer_id, text=c.text, ts=ts, now=now))
        known = dict(LiveComment.objects.filter(session=locked, external_id__in=[k for ks in keys for k in ks])
                     .values_list("external_id", "pk"))
        seen, fresh = set(known), 0  # the comments this request adds (deduped as the loop below): what limits count
        for ks in keys:
            if not seen.intersection(ks):
                fresh += 1
                seen.add(ks[0])
        guards.ingest_limit_check(session=locked, token=token, handling=handling, wanted=fresh, now=now,
                                  source=source)
        since = received - timedelta(seconds=60)
        recent: dict[str, list[float]] = {}
        for viewer_id, at in (LiveComment.objects.filter(session=locked, viewer_id__in={c.viewer_id for c in incoming},
                                                         received_at__gt=since)
                              .exclude(status=LiveComment.Status.RATE_LIMITED)
                              .values_list("viewer_id", "received_at")):
            recent.setdefault(viewer_id, []).append(at.timestamp())
        results: list[dict[str, Any]] = []
        events: list[tuple[str, dict[str, Any]]] = []
        for index, (c, ks) in enumerate(zip(incoming, keys)):
            seen = next((known[k] for k in ks if k in known), None)
            if seen is not None:
                results.append({"index": index, "external_id": ks[0], "comment_id": seen, "status": "duplicate",
                                "reason": "received before", "priority": None})
                continue
            prio = rules.comment_priority(c.text, locked.room_state)
            status, reason = LiveComment.Status.QUEUED, prio.reason
            limit = rules.rate_limit(recent.get(c.viewer_id, []), now, handling.per_viewer_per_minute)
            if not limit.allowed:
                status = LiveComment.Status.RATE_LIMITED
                reason = (f"more than {handling.per_viewer_per_minute} comments a minute from this viewer "
                          f"(try again in {limit.retry_after_s:.0f} s)")
            elif len(c.text) > handling.max_chars:
                status, reason = LiveComment.Status.FILTERED, f"longer than {handling.max_chars} characters"
            else:
                abuse = _abuse_reason(hooks, c)
                if abuse:
                    status, reason = LiveComment.Status.FILTERED, abuse
            if status != LiveComment.Status.RATE_LIMITED:
                recent.setdefault(c.viewer_id, []).append(now)
            row = LiveComment.objects.create(
                session=locked, external_id=ks[0], viewer_id=c.viewer_id, viewer=c.display_name()[:120],
                text=c.text, source=source, priority=prio.score, status=status, reason=reason[:200], token=token)
            for k in ks[:1]:
                known[k] = row.pk
            woke = woke or status == LiveComment.Status.QUEUED
            results.append({"index": index, "external_id": row.external_id, "comment_id": row.pk,
                            "status": status, "reason": row.reason, "priority": prio.score})
            events.append(("comment_in", {
                "comment_id": row.pk, "external_id": row.external_id, "viewer": row.viewer,
                "viewer_id": row.viewer_id, "text": row.text, "priority": prio.score, "status": status,
                "reason": row.reason, "source": source, "received_at": received.isoformat()}))
        if events:
            live_event_append(session_id=locked.pk, events=events)
        if woke:
            transaction.on_commit(lambda: live_runner_wake(locked.pk), robust=True)
    return results


# --- waking the runner --------------------------------------------------------------------------------------------
#
# A runner waits between turns on its session's wake list in Redis (BLPOP ``hat:live:wake:<session id>``); every
# stored comment (and the end of the session) pushes one entry. Without Redis (the embedded default) or while
# Redis is down, the wait is a plain timeout: the runner reads the queue from the database each time it wakes,
# so a lost nudge costs at most one wait, never a comment. Runners in this process are also woken in memory.

WAKE_TTL_S = 120  # a nudge nobody waited for is gone after this (the list never grows without bound)
MAX_WAIT_S = 30.0
_local_lock = threading.Lock()
_local_events: dict[str, threading.Event] = {}
_clients: dict[str, Any] = {}


def _wake_key(session_id) -> str:
    return f"hat:live:wake:{session_id}"


def _redis(kind: str):
    """A per-process client (``nudge``: short timeouts, a blip must not hold up an ingest; ``wait``: reads
    outlast the longest BLPOP)."""
    url = getattr(getattr(settings, "ENV", None), "redis_url", None)
    if not url:
        return None
    key = f"{os.getpid()}:{kind}"
    client = _clients.get(key)
    if client is None:
        import redis

        timeout = 1.0 if kind == "nudge" else MAX_WAIT_S + 5.0
        client = _clients[key] = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=1.0,
                                                      socket_keepalive=True, health_check_interval=25)
    return client


def _local(session_id) -> threading.Event:
    with _local_lock:
        return _local_events.setdefault(str(session_id), threading.Event())


def live_runner_wake(session_id) -> None:
    """Nudge the session's runner: comments were stored (or the session ended). Never raises."""
    _local(session_id).set()
    client = _redis("nudge")
    if client is None:
        return
    try:
        pipe = client.pipeline(transaction=False)
        pipe.lpush(_wake_key(session_id), "1")
        pipe.ltrim(_wake_key(session_id), 0, 0)  # one pending nudge says it all
        pipe.expire(_wake_key(session_id), WAKE_TTL_S)
        pipe.execute()
    except Exception:  # Redis is down: the runner finds the comments on its next timed look
        logger.warning("live session %s: waking the runner through Redis failed", session_id, exc_info=True)


def live_runner_wait(session_id, timeout_s: float) -> bool:
    """Block until the session is nudged or ``timeout_s`` passes (capped at 30 s); True when nudged. The runner
    calls it between turns and then reads the queue from the database either way."""
    timeout_s = max(0.0, min(float(timeout_s), MAX_WAIT_S))
    local = _local(session_id)
    if local.is_set():
        local.clear()
        _drain(session_id)
        return True
    client = _redis("wait")
    if client is None or timeout_s < 0.01:
        woke = local.wait(timeout_s)
        local.clear()
        return woke
    try:
        got = client.blpop([_wake_key(session_id)], timeout=timeout_s)
    except Exception:  # Redis is down: fall back to a plain wait (comments are in the database)
        logger.warning("live session %s: waiting through Redis failed", session_id, exc_info=True)
        woke = local.wait(timeout_s)
        local.clear()
        return woke
    local.clear()
    return got is not None


def _drain(session_id) -> None:
    client = _redis("nudge")
    if client is not None:
        try:
            client.delete(_wake_key(session_id))
        except Exception:
            pass
