"""Reads of the catalog and the stored scenarios."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db.models import Q, QuerySet

from console import roles
from streams.models import LiveRoom, ModelEndpoint, PreviewEvent, PreviewRoom, Scenario


def _money(value) -> float:
    return float(value)


def room_state(room: LiveRoom) -> dict[str, Any]:
    """The room dict of :mod:`streams.bindings` (see its module docstring) built from the database.

    Two queries (products, coupons), none when the caller loaded the room with
    ``prefetch_related("products", "coupons")``. The dict is a fresh copy: bindings may mutate it freely.
    """
    products = [
        {
            "link_id": p.link_id,
            "title": p.title,
            "price": _money(p.price),
            "list_price": _money(p.list_price),
            "stock": p.stock,
            "attributes": dict(p.attributes or {}),
            "attribute_order": list(p.attribute_order or []),
            "compliance_notes": list(p.compliance_notes or []),
        }
        for p in room.products.all()
    ]
    coupons = [
        {
            "code": c.code,
            "discount": _money(c.discount),
            "min_spend": _money(c.min_spend),
            "expires_at_minute": c.expires_at_minute,
            "remaining": c.remaining,
        }
        for c in room.coupons.all()
    ]
    shipping = dict(room.shipping or {})
    shipping["regions"] = {name: dict(v) for name, v in (shipping.get("regions") or {}).items()}
    return {
        "room_id": room.slug,
        "title": room.title,
        "currency": room.currency,
        "clock_minute": room.clock_minute,
        "low_stock_threshold": room.low_stock_threshold,
        "products": products,
        "coupons": coupons,
        "campaign": {"phase": room.phase, "flash_sale": dict(room.flash_sale) if room.flash_sale else None},
        "shipping": shipping,
        "pinned": dict(room.pinned) if room.pinned else None,
    }


def live_room_list() -> QuerySet[LiveRoom]:
    return LiveRoom.objects.all()


def live_room_get(*, slug: str) -> LiveRoom:
    """With products and coupons prefetched, so :func:`room_state` adds no query."""
    return LiveRoom.objects.prefetch_related("products", "coupons").get(slug=slug)


def scenario_list() -> QuerySet[Scenario]:
    """For pickers and lists: without the YAML text."""
    return Scenario.objects.defer("yaml_text").select_related("created_by")


def scenario_get(*, slug: str) -> Scenario:
    return Scenario.objects.get(slug=slug)


# --- preview rooms --------------------------------------------------------------------------------------

HISTORY_TURNS = 6  # previous turns given to the model as history


def model_endpoint_list() -> QuerySet[ModelEndpoint]:
    return ModelEndpoint.objects.all()


def preview_room_get(*, room_id) -> PreviewRoom:
    return PreviewRoom.objects.select_related("harness_version__harness", "scenario", "endpoint",
                                              "created_by").get(pk=room_id)


# Who may do what in a preview room (the users need the preview role as well):
# - an interactive room belongs to its owner (created_by) and the people the owner invited (members): they see it,
#   comment and drive its clock; only the owner invites, removes and closes. Everyone else is told it does not exist.
# - a scenario run is shared evidence: every preview user reads it (transcript, watching live); only the person who
#   started it drives or closes (cancels) it. Nobody is invited into a run.
OWNER, MEMBER, READER = "owner", "member", "reader"


def preview_room_access(*, user, room: PreviewRoom) -> str | None:
    """``OWNER``, ``MEMBER``, ``READER`` (a run someone else started), or None: the room is hidden from the user."""
    if user is None or not user.is_authenticated or not user.has_perm(roles.USE_PREVIEW):
        return None
    if room.created_by_id == user.pk:
        return OWNER
    if room.is_run:
        return READER
    if room.members.filter(pk=user.pk).exists():
        return MEMBER
    return None


def preview_room_get_for(*, user, room_id) -> PreviewRoom:
    """The room if the user may see it; PreviewRoom.DoesNotExist otherwise, so a hidden room and a missing one look
    the same. The room carries the user's ``access``."""
    room = preview_room_get(room_id=room_id)
    room.access = preview_room_access(user=user, room=room)
    if room.access is None:
        raise PreviewRoom.DoesNotExist(f"no preview room {room_id}")
    return room


def preview_room_list(*, user) -> QuerySet[PreviewRoom]:
    """The interactive rooms the user owns or was invited to (runs have their own list)."""
    return (PreviewRoom.objects.filter(Q(created_by=user) | Q(pk__in=PreviewRoom.members.through.objects.filter(
        user_id=user.pk).values("previewroom_id")), kind=PreviewRoom.Kind.INTERACTIVE)
            .select_related("harness_version__harness", "scenario", "endpoint", "created_by"))


def preview_room_members(*, room: PreviewRoom) -> list:
    """The people the owner invited, by username."""
    return list(room.members.order_by("username"))


def preview_event_list(*, room_id, after: int = 0, up_to: int | None = None, limit: int | None = None
                       ) -> list[dict[str, Any]]:
    """Stored events with ``after < seq (<= up_to)``, in order, as WebSocket messages."""
    qs = PreviewEvent.objects.filter(room_id=room_id, seq__gt=after).order_by("seq")
    if up_to is not None:
        qs = qs.filter(seq__lte=up_to)
    if limit is not None:
        qs = qs[:limit]
    return [e.as_message() for e in qs]


def preview_turn_comments(*, room_id, turn_id: str) -> list[dict[str, str]]:
    """The viewer comments a queued turn answers (stored as ``viewer_comment`` events)."""
    rows = PreviewEvent.objects.filter(room_id=room_id, turn_id=turn_id, type="viewer_comment").order_by("seq")
    return [{"viewer": e.payload.get("viewer", ""), "viewer_id": e.payload.get("viewer_id", ""),
             "text": e.payload.get("text", "")} for e in rows]


def preview_history(*, room_id, before_turn_id: str, turns: int = HISTORY_TURNS) -> list[dict[str, str]]:
    """The previous turns as chat messages: the comments (as the renderer shows them) and the final reply."""
    replies = list(PreviewEvent.objects.filter(room_id=room_id, type="reply").exclude(turn_id=before_turn_id)
                   .order_by("-seq").values_list("turn_id", "payload")[:turns])
    replies.reverse()
    if not replies:
        return []
    by_turn: dict[str, list[str]] = {}
    for turn_id, payload in (PreviewEvent.objects.filter(room_id=room_id, type="viewer_comment",
                                                         turn_id__in=[t for t, _ in replies])
                             .order_by("seq").values_list("turn_id", "payload")):
        by_turn.setdefault(turn_id, []).append(f"[{payload.get('viewer', '')}] {payload.get('text', '')}")
    history: list[dict[str, str]] = []
    for turn_id, payload in replies:
        if by_turn.get(turn_id) and payload.get("text"):
            history.append({"role": "user", "content": "\n".join(by_turn[turn_id])})
            history.append({"role": "assistant", "content": payload["text"]})
    return history


def preview_transcript(*, room_id) -> list[dict[str, Any]]:
    """The stored turns of a room, oldest first (:func:`fold_turns` of its events)."""
    events = (PreviewEvent.objects.filter(room_id=room_id).exclude(turn_id="").exclude(type="token")
              .order_by("seq").values("seq", "turn_id", "type", "payload"))
    return fold_turns(events)


def fold_turns(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Turn events (``seq``, ``turn_id``, ``type``, ``payload``; in order) folded into turns, oldest first, as the
    transcript shows them (``streams/preview_transcript.html#turn``): comments, tool calls (each with its
    ``result``), skills, hook verdicts, retries, the reply and the timings of each (token events are folded into
    the reply). The preview room's events and an evaluation sample's engine events go through this one fold: a
    turn without the room's ``viewer_comment`` events shows the engine's ``comment_received`` ones."""
    turns: dict[str, dict[str, Any]] = {}
    calls: dict[tuple[str, str], dict[str, Any]] = {}
    for e in events:
        turn_id, kind, p = e["turn_id"], e["type"], e["payload"]
        if not turn_id or kind == "token":
            continue
        t = turns.setdefault(turn_id, {"turn_id": turn_id, "first_seq": e["seq"], "comments": [], "tools": [],
                                       "results": [], "skills": [], "hooks": [], "retries": [], "reply": None,
                                       "timings": None, "errors": [], "version": None, "started": None,
                                       "state": "queued", "number": 0, "received": [], "queued": None})
        if kind == "viewer_comment":
            t["comments"].append(p)
        elif kind == "comment_received":
            t["received"].append(p)
        elif kind == "turn_queued":
            t["queued"] = p
        elif kind == "turn_started":
            t["version"], t["started"], t["state"] = p.get("version"), p, "running"
        elif kind == "tool_call":
            call = dict(p, result=None)
            t["tools"].append(call)
            calls[(turn_id, p.get("call_id"))] = call
        elif kind == "tool_result":
            t["results"].append(p)
            call = calls.get((turn_id, p.get("call_id")))
            if call is not None:
                call["result"] = p
        elif kind == "skill_loaded":
            t["skills"].append(p)
        elif kind == "hook_result":
            t["hooks"].append(p)
        elif kind == "retry":
            t["retries"].append(p)
        elif kind == "reply":
            t["reply"], t["state"] = p, "done"
        elif kind == "timings":
            t["timings"] = p
        elif kind == "deadline_exceeded":
            t["errors"].append({"stage": p.get("stage"), "message": f"deadline exceeded after "
                                f"{p.get('elapsed_ms', 0):.0f} ms (budget {p.get('budget_ms', 0):.0f} ms)"})
        elif kind in ("error", "turn_failed"):
            t["errors"].append(p)
            if kind == "turn_failed":
                t["state"] = "failed"
    ordered = sorted(turns.values(), key=lambda t: t["first_seq"])
    for number, t in enumerate(ordered, 1):
        t["number"] = number
        t["hook_failures"] = sum(1 for h in t["hooks"] if not h.get("passed"))
        if not t["comments"]:
            t["comments"] = t["received"]
    return ordered


def preview_turns_in_flight(*, room_id) -> dict[str, Any]:
    """The turns of a room queued or running (comments stored, no ``timings`` / ``turn_failed`` yet), each
    with the time of its latest event, oldest turn first."""
    from django.db.models import Max, Min

    ended = PreviewEvent.objects.filter(room_id=room_id, type__in=("timings", "turn_failed")).values("turn_id")
    waiting = list(PreviewEvent.objects.filter(room_id=room_id, type="viewer_comment").exclude(turn_id__in=ended)
                   .values("turn_id").annotate(first=Min("seq")).order_by("first").values_list("turn_id", flat=True))
    if not waiting:
        return {}
    last = dict(PreviewEvent.objects.filter(room_id=room_id, turn_id__in=waiting).order_by().values("turn_id")
                .annotate(last=Max("created_at")).values_list("turn_id", "last"))
    return {t: last[t] for t in waiting}


def _percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    values = sorted(values)
    pos = (len(values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return round(values[lo] + (values[hi] - values[lo]) * (pos - lo), 1)


SUMMARY_TYPES = ("viewer_comment", "turn_started", "reply", "turn_failed", "hook_result", "retry", "tool_call",
                 "tool_result", "timings", "error")


def scenario_run_summary(*, room_id) -> dict[str, Any]:
    """The numbers of a run (or any room) from its stored events: turns, replies, fallbacks (by reason), failed
    turns, hook failures per hook id, retries, tool calls (invalid ones), tool faults per kind and per tool,
    model errors, and p50/p95 of turn time and of time to first token (ms)."""
    counts = {t: 0 for t in SUMMARY_TYPES}
    fallbacks: dict[str, int] = {}
    hook_failures: dict[str, int] = {}
    faults: dict[str, int] = {}
    faults_by_tool: dict[str, int] = {}
    invalid_calls = tool_errors = model_errors = 0
    total_ms: list[float] = []
    ttft_ms: list[float] = []
    rows = PreviewEvent.objects.filter(room_id=room_id, type__in=SUMMARY_TYPES).values_list("type", "payload")
    for type_, p in rows.iterator():
        counts[type_] += 1
        if type_ == "reply" and p.get("fallback"):
            reason = p.get("reason") or "?"
            fallbacks[reason] = fallbacks.get(reason, 0) + 1
        elif type_ == "hook_result" and not p.get("passed"):
            hook_failures[p.get("hook_id") or "?"] = hook_failures.get(p.get("hook_id") or "?", 0) + 1
        elif type_ == "tool_call" and not p.get("valid"):
            invalid_calls += 1
        elif type_ == "tool_result":
            if p.get("fault"):
                faults[p["fault"]] = faults.get(p["fault"], 0) + 1
                name = p.get("binding") or p.get("name") or "?"
                faults_by_tool[name] = faults_by_tool.get(name, 0) + 1
            elif p.get("error"):
                tool_errors += 1
        elif type_ == "timings":
            total_ms.append(float(p.get("total_ms") or 0))
            if p.get("ttft_ms") is not None:
                ttft_ms.append(float(p["ttft_ms"]))
        elif type_ == "error" and p.get("stage") == "model":
            model_errors += 1
    return {
        "comments": counts["viewer_comment"], "turns": counts["turn_started"], "replies": counts["reply"],
        "fallbacks": sum(fallbacks.values()), "fallback_reasons": fallbacks, "failed_turns": counts["turn_failed"],
        "hook_failures": dict(sorted(hook_failures.items())), "retries": counts["retry"],
        "tool_calls": counts["tool_call"], "invalid_tool_calls": invalid_calls, "tool_errors": tool_errors,
        "tool_faults": sum(faults.values()), "tool_faults_by_kind": dict(sorted(faults.items())),
        "tool_faults_by_tool": dict(sorted(faults_by_tool.items())), "model_errors": model_errors,
        "turn_ms_p50": _percentile(total_ms, 0.5), "turn_ms_p95": _percentile(total_ms, 0.95),
        "ttft_ms_p50": _percentile(ttft_ms, 0.5), "ttft_ms_p95": _percentile(ttft_ms, 0.95),
    }


def scenario_run_list(*, scenario_id=None, version_id=None) -> QuerySet[PreviewRoom]:
    """Scenario runs, newest first, optionally of one scenario and/or one harness version."""
    qs = (PreviewRoom.objects.filter(kind=PreviewRoom.Kind.RUN)
          .select_related("harness_version__harness", "scenario", "endpoint", "created_by", "job"))
    if scenario_id:
        qs = qs.filter(scenario_id=scenario_id)
    if version_id:
        qs = qs.filter(harness_version_id=version_id)
    return qs
