"""Fixtures of the live-session ingest tests: a deployment in force on the demo harness (``production`` at v1, whose
viewer-input hook blocks off-platform pitches and comments over 300 characters), the demo live room, a session on
them, users per role and an ingest token."""

from __future__ import annotations

import pytest
from django.utils import timezone


@pytest.fixture
def operator2(db, django_user_model):
    from django.contrib.auth.models import Group

    from console import roles

    user = django_user_model.objects.create_user(username="op_olga", password="x-pass-123")
    user.groups.add(Group.objects.get(name=roles.OPERATOR))
    return user


@pytest.fixture
def live_world(harness_with_history, ml_staff, reviewer):
    """An approved deployment (rows as the deployment service stores them) serving the demo harness' production
    label through one endpoint, and the demo live room."""
    from streams import services as stream_services
    from streams.models import Deployment, DeploymentRevision, ModelEndpoint, ServeProfile

    profile = ServeProfile.objects.create(name="vllm-cpu-ingest", spec={"kind": "vllm"})
    endpoint = ModelEndpoint.objects.create(name="ingest-ep", base_url="http://127.0.0.1:8311/v1", model="demo",
                                            kind="vllm")
    deployment = Deployment.objects.create(name="glow-live", title="Glow live", harness=harness_with_history["harness"],
                                           created_by=ml_staff)
    revision = DeploymentRevision.objects.create(
        deployment=deployment, number=1, label="production", harness_version=harness_with_history["v1"],
        serve_profile=profile, endpoints=[endpoint.pk], status=DeploymentRevision.Status.APPROVED,
        proposed_by=ml_staff, decided_by=reviewer, decided_at=timezone.now())
    deployment.current_revision = revision
    deployment.save(update_fields=["current_revision"])
    room = stream_services.catalog_seed_demo()
    return {**harness_with_history, "deployment": deployment, "revision": revision, "endpoint": endpoint,
            "profile": profile, "room": room}


@pytest.fixture
def live_session(live_world, operator):
    from streams.services.live_sessions import live_session_start

    return live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                              title="Evening show")


@pytest.fixture
def ingest_secret(live_session, operator):
    from streams.services.live_sessions import live_token_create

    _token, secret = live_token_create(user=operator, session=live_session, scope="ingest")
    return secret


def comment(n: int, text: str = "how much is the serum?", viewer: str = "v1", **extra) -> dict:
    return {"id": f"c{n}", "viewer_id": viewer, "viewer": viewer.upper(), "text": text, **extra}
