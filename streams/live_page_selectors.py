"""Reads behind the live session pages and sockets (the operator's page, the list, the overlay): counts for the
list, the comment queue as the operator sees it, pending replies, the recorded transcript (turns folded by
:func:`streams.selectors.fold_turns`, the preview transcript's one fold, plus what live turns add), the session
log and where a socket starts reading.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from streams.models import LiveComment, LiveEvent, LiveSession, LiveToken
from streams.selectors import fold_turns

# session-level events shown in the session log (comments have the queue; turns the transcript)
LOG_TYPES = ("session_started", "session_ended", "muted", "approval_mode", "product_pinned", "version_changed",
             "fault", "failover", "breaker", "runner_resumed", "reply_rejected", "reply_spoken")
# shown between turns in the transcript: what changed how the next turns ran
MARKER_TYPES = ("version_changed", "fault", "failover", "breaker", "runner_resumed", "muted", "approval_mode",
                "session_started", "session_ended")
QUEUE_OPEN = (LiveComment.Status.QUEUED, LiveComment.Status.ANSWERING)
RECENT_TURNS = 30  # the operator's page streams the last turns; older ones are on the recorded transcript
QUEUE_DONE_SHOWN = 100


def _count(model, **filters) -> Subquery:
    qs = (model.objects.filter(session=OuterRef("pk"), **filters).order_by().values("session")
          .annotate(n=Count("pk")).values("n"))
    return Coalesce(Subquery(qs, output_field=IntegerField()), 0)


def live_session_overview(*, status: str | None = None) -> QuerySet[LiveSession]:
    """Sessions, newest first, with ``turn_count`` (turns started) and ``comment_count`` (comments stored)."""
    qs = (LiveSession.objects.select_related("room", "deployment", "started_by", "ended_by")
          .annotate(turn_count=_count(LiveEvent, type="turn_started"), comment_count=_count(LiveComment)))
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("-started_at")


def live_event_list(*, session_id, after: int = 0, up_to: int | None = None, limit: int | None = None
                    ) -> list[dict[str, Any]]:
    """Stored events with ``after < seq (<= up_to)``, in order, as WebSocket messages."""
    qs = LiveEvent.objects.filter(session_id=session_id, seq__gt=after).order_by("seq")
    if up_to is not None:
        qs = qs.filter(seq__lte=up_to)
    if limit is not None:
        qs = qs[:limit]
    return [e.as_message() for e in qs]


def live_queue(*, session_id) -> dict[str, list[LiveComment]]:
    """``open``: comments waiting or in a turn, in the order they are answered (priority, then arrival);
    ``done``: the latest handled ones (answered, skipped, filtered, rate-limited, expired), newest first."""
    base = LiveComment.objects.filter(session_id=session_id)
    return {"open": list(base.filter(status__in=QUEUE_OPEN).order_by("-priority", "id")),
            "done": list(base.exclude(status__in=QUEUE_OPEN).order_by("-id")[:QUEUE_DONE_SHOWN])}


def live_pending_replies(*, session_id) -> list[dict[str, Any]]:
    """Replies waiting for an operator (approve-before-speak): ``reply_pending`` events of turns with no
    ``reply_spoken`` / ``reply_rejected`` after them, oldest first."""
    rows = (LiveEvent.objects.filter(session_id=session_id,
                                     type__in=("reply_pending", "reply_spoken", "reply_rejected"))
            .exclude(turn_id="").order_by("seq").values("seq", "turn_id", "type", "payload"))
    pending: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["type"] == "reply_pending":
            pending[r["turn_id"]] = {"turn_id": r["turn_id"], "seq": r["seq"], "text": r["payload"].get("text", "")}
        else:
            pending.pop(r["turn_id"], None)
    return list(pending.values())


def live_stream_start(*, session_id, turns: int = RECENT_TURNS) -> int:
    """The seq the operator's page starts streaming after: before the first event of the last ``turns`` turns
    (0 for a short session). The queue, state and log above the transcript come from the database."""
    nth = (LiveEvent.objects.filter(session_id=session_id, type="turn_started").order_by("-seq")
           .values_list("turn_id", flat=True)[turns - 1:turns])
    turn_id = next(iter(nth), None)
    if turn_id is None:
        return 0
    first = (LiveEvent.objects.filter(session_id=session_id, turn_id=turn_id).order_by("seq")
             .values_list("seq", flat=True).first())
    return max((first or 1) - 1, 0)


def live_session_log(*, session_id, up_to: int | None = None) -> list[dict[str, Any]]:
    """What operators did and what happened to the session (controls, takeovers, rejected replies, faults, label
    moves, start and end), oldest first, as messages: not every reply the avatar spoke (the transcript has them)."""
    qs = LiveEvent.objects.filter(session_id=session_id, type__in=LOG_TYPES).order_by("seq")
    if up_to is not None:
        qs = qs.filter(seq__lte=up_to)
    return [e.as_message() for e in qs if e.type != "reply_spoken" or (e.payload or {}).get("by") == "human"]


def _live_turn(t: dict[str, Any], extra: list[dict[str, Any]]) -> dict[str, Any]:
    """What a live turn adds to a folded one: the reply as spoken (by the avatar or an operator), a reply waiting
    for approval or rejected, the harness version change it was the first turn of, faults during it."""
    t.update(spoken=None, human=False, pending=None, rejected=None, version_changed=None, faults=[])
    version = t.get("version")
    if isinstance(version, dict) and "harness" not in version:  # live turns name the harness by slug
        t["version"] = dict(version, harness=version.get("slug", ""))
    started = t.get("started")
    if isinstance(started, dict) and isinstance(started.get("comments"), list):
        t["started"] = dict(started, comments=len(started["comments"]))
    for e in extra:
        kind, p = e["type"], e["payload"]
        if kind == "reply_spoken":
            t["spoken"], t["human"], t["pending"] = p, p.get("by") == "human", None
        elif kind == "reply_pending":
            t["pending"] = p
        elif kind == "reply_rejected":
            t["rejected"], t["pending"] = p, None
        elif kind == "version_changed":
            t["version_changed"] = p
        elif kind in ("fault", "failover", "breaker"):
            t["faults"].append({"type": kind, **p})
    if t["spoken"] and t["state"] != "failed":
        t["state"] = "spoken"
    elif t["pending"]:
        t["state"] = "pending"
    elif t["rejected"]:
        t["state"] = "rejected"
    return t


def live_transcript(*, session_id) -> list[dict[str, Any]]:
    """The recorded session: turns (folded as the preview transcript folds them, see :func:`_live_turn`) and the
    session-level markers between them (version changes, faults, failover, breaker, runner resumed, controls),
    in seq order: ``{"kind": "turn", "seq", "turn"}`` or ``{"kind": "event", "seq", "type", "payload", "at"}``."""
    rows = list(LiveEvent.objects.filter(session_id=session_id).exclude(type="token")
                .exclude(type__in=("comment_in", "comment_status")).order_by("seq")
                .values("seq", "turn_id", "type", "payload", "created_at"))
    extra: dict[str, list[dict[str, Any]]] = {}
    items: list[dict[str, Any]] = []
    for r in rows:
        if r["turn_id"]:
            extra.setdefault(r["turn_id"], []).append(r)
        elif r["type"] in MARKER_TYPES or r["type"] in ("product_pinned", "reply_spoken"):
            items.append({"kind": "event", "seq": r["seq"], "type": r["type"], "payload": r["payload"],
                          "at": r["created_at"]})
    # a turn stands where it started: its comments may have been claimed (turn_queued) before a version change that
    # was stored just before it started on the new version
    started = {r["turn_id"]: r["seq"] for r in reversed(rows) if r["turn_id"] and r["type"] == "turn_started"}
    for t in fold_turns(r for r in rows if r["turn_id"]):
        items.append({"kind": "turn", "seq": started.get(t["turn_id"], t["first_seq"]),
                      "turn": _live_turn(t, extra.get(t["turn_id"], []))})
    items.sort(key=lambda i: i["seq"])
    return items


def live_overlay_start(*, session_id) -> int:
    """Where a new overlay starts reading: at the turn being spoken now (its first event) if one is in flight,
    else at the end (an overlay shows what is said from now on, not the session's past)."""
    session = LiveSession.objects.filter(pk=session_id).values("last_seq").first()
    last_seq = session["last_seq"] if session else 0
    started = (LiveEvent.objects.filter(session_id=session_id, type="turn_started").order_by("-seq")
               .values("seq", "turn_id").first())
    if started is None:
        return last_seq
    ended = LiveEvent.objects.filter(session_id=session_id, turn_id=started["turn_id"], seq__gt=started["seq"],
                                     type__in=("timings", "turn_failed", "reply_spoken", "reply_rejected")).exists()
    return last_seq if ended else started["seq"] - 1


def live_overlay_token(*, session_id, secret: str) -> LiveToken | None:
    """The overlay token ``secret`` is, if it is one for this session and not revoked (None otherwise: a wrong
    secret, another session's, an ingest token and a revoked one are refused alike)."""
    if not secret or len(secret) > 200:
        return None
    return (LiveToken.objects.filter(digest=LiveToken.digest_of(secret), session_id=session_id,
                                     scope=LiveToken.Scope.OVERLAY, revoked_at__isnull=True).first())


def live_overlay_tokens(*, session_id) -> QuerySet[LiveToken]:
    return (LiveToken.objects.filter(session_id=session_id, scope=LiveToken.Scope.OVERLAY)
            .select_related("created_by").order_by("-created_at"))


__all__ = ["live_event_list", "live_overlay_start", "live_overlay_token", "live_overlay_tokens",
           "live_pending_replies", "live_queue", "live_session_log", "live_session_overview", "live_stream_start",
           "live_transcript"]
