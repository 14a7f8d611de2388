"""Live session fixtures for the runner's tests: a deployment built from rows (harness tiny-room v1 on its production
label, v2 approved beside it, one serve profile, the vLLM-CPU endpoint), the demo live room, and helpers that wait
for stored events."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from streams.models import (
    Deployment,
    DeploymentRevision,
    LiveComment,
    LiveEvent,
    LiveSession,
    ModelEndpoint,
    ServeProfile,
)

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"


def tiny_manifest(demo_manifest):
    from harness_editor.schemas import manifest_from_yaml

    tiny = DEMO / "tiny_room.yaml"
    return manifest_from_yaml(tiny.read_text(encoding="utf-8")) if tiny.exists() else demo_manifest("skincare_v1")


@pytest.fixture
def live_deployment(manager, reviewer, demo_manifest, vllm_server, settings):
    """{"deployment", "v1" (production), "v2" (approved, no label), "endpoint", "room", "harness"}."""
    from harness_editor import services as editor
    from streams import services

    settings.HAT_APPROVAL_EVIDENCE = ""  # no evaluation gate: this is about the session, not the approval
    manifest = tiny_manifest(demo_manifest)
    v1 = editor.harness_create(user=manager, slug="tiny-room", name="Tiny demo room", manifest=manifest)
    editor.version_submit(user=manager, version=v1)
    v1 = editor.version_approve(user=reviewer, version=v1)
    editor.label_move(user=reviewer, harness=v1.harness, name="production", version=v1)
    v2 = editor.version_create_draft(user=manager, harness=v1.harness, manifest=manifest, parent=v1,
                                     change_note="same harness, new version (the label moves to it mid-session)")
    editor.version_submit(user=manager, version=v2)
    v2 = editor.version_approve(user=reviewer, version=v2)
    base_url = vllm_server.openai_base_url.rstrip("/")
    endpoint = ModelEndpoint.objects.create(name="vllm-live", base_url=base_url, model=vllm_server.model,
                                            kind="vllm", timeout_s=120, connect_timeout_s=5)
    profile = ServeProfile.objects.create(name="cpu-live", spec={"kind": "vllm-cpu"})
    deployment = Deployment.objects.create(name="tiny-live", harness=v1.harness, created_by=manager)
    revision = DeploymentRevision.objects.create(
        deployment=deployment, number=1, label="production", harness_version=v1, serve_profile=profile,
        endpoints=[endpoint.pk], status=DeploymentRevision.Status.APPROVED, proposed_by=manager,
        decided_by=reviewer)
    deployment.current_revision = revision
    deployment.save(update_fields=["current_revision"])
    room = services.catalog_seed_demo()
    return {"deployment": deployment, "v1": v1, "v2": v2, "endpoint": endpoint, "room": room,
            "harness": v1.harness}


def session_start(user, setup, **kw) -> LiveSession:
    from streams.services.live_sessions import live_session_start

    return live_session_start(user=user, room=setup["room"], deployment=setup["deployment"],
                              title=kw.pop("title", "test broadcast"), handling=kw.pop("handling", {
                                  "batch_window_s": 0.0, "max_comments_per_turn": 2, "per_viewer_per_minute": 60}),
                              **kw)


def comment(session: LiveSession, text: str, viewer: str = "ann", external_id: str | None = None) -> int:
    from streams.services.live_sessions import live_comments_ingest

    item = {"viewer_id": f"v-{viewer}", "viewer": viewer, "text": text}
    if external_id:
        item["id"] = external_id
    out = live_comments_ingest(session=session, comments=[item], source="api")
    assert out[0]["status"] == "queued", out
    return out[0]["comment_id"]


def events(session_id, *types: str) -> list[LiveEvent]:
    qs = LiveEvent.objects.filter(session_id=session_id).order_by("seq")
    return list(qs.filter(type__in=types) if types else qs)


def wait_for(what, timeout: float = 120.0, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting ({timeout:.0f} s)"
        time.sleep(every)


def spoken_for(session_id, comment_id: int) -> list[LiveEvent]:
    """The reply_spoken events of the turn(s) that answered a comment."""
    turn = LiveComment.objects.get(pk=comment_id).turn_id
    return [e for e in events(session_id, "reply_spoken") if e.turn_id == turn] if turn else []


class RunnerThread:
    """A SessionRunner in a thread of the test process (the task's body without Celery)."""

    def __init__(self, session_id, **kw):
        from streams.live.runner import SessionRunner

        kw.setdefault("handover", False)  # stopped by the test: no runner is sent after it
        self.runner = SessionRunner(session_id, **kw)
        self.result = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from django.db import connection

        try:
            self.result = self.runner.run()
        finally:
            connection.close()

    def __enter__(self) -> RunnerThread:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.runner.stop()
        self.thread.join(60)
