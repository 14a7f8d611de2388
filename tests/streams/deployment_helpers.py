"""Fixtures of the deployment tests: the tiny-room harness with v1 and v2 approved (``production`` at v1), two serve
profiles, two loopback endpoints, the demo base model and one trained from it, and a live session on a deployment.

``deploy_world`` builds rows through the real services (harness versions, labels, deployments); serve profiles,
endpoints and models are rows the serving and training helpers create in the product."""

from __future__ import annotations

import pytest

from console import roles


@pytest.fixture
def ml_lead2(db, django_user_model):
    """A second ML lead: reviews what the first proposed."""
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user(username="ml_lena", password="x-pass-123")
    user.groups.add(Group.objects.get(name=roles.ML_LEAD))
    return user


@pytest.fixture
def deploy_world(manager, reviewer, ml_staff, demo_manifest):
    from harness_editor import services as harness_services
    from streams.models import ModelEndpoint, ServeProfile
    from training_jobs.models import TrainedModel

    v1 = harness_services.harness_create(user=manager, slug="tiny-room", name="Tiny demo room",
                                         manifest=demo_manifest("tiny_room"))
    harness_services.version_submit(user=manager, version=v1)
    v1 = harness_services.version_approve(user=reviewer, version=v1)
    harness = v1.harness
    harness_services.label_move(user=reviewer, harness=harness, name="production", version=v1)
    v2 = harness_services.version_create_draft(user=manager, harness=harness, manifest=demo_manifest("tiny_room"),
                                               parent=v1, change_note="v2")
    harness_services.version_submit(user=manager, version=v2)
    v2 = harness_services.version_approve(user=reviewer, version=v2)
    harness_services.label_move(user=reviewer, harness=harness, name="staging", version=v2)
    lora_spec = {"kind": "vllm", "enable_lora": True, "max_lora_rank": 16, "runtime_lora_updating": True}
    vllm = ServeProfile.objects.create(name="vllm-cpu", spec=lora_spec)
    plain = ServeProfile.objects.create(name="vllm-plain", spec={"kind": "vllm"})
    ep_a = ModelEndpoint.objects.create(name="ep-a", base_url="http://127.0.0.1:8311/v1", model="demo")
    ep_b = ModelEndpoint.objects.create(name="ep-b", base_url="http://127.0.0.1:8312/v1", model="demo")
    far = ModelEndpoint.objects.create(name="far", base_url="http://203.0.113.9:8000/v1", model="demo")
    base = TrainedModel.objects.create(name="demo-tiny", kind="base", path="/tmp/hat/deploy/demo-tiny")
    tuned = TrainedModel.objects.create(name="demo-sft", kind="sft", path="/tmp/hat/deploy/demo-sft", parent=base)
    adapter = TrainedModel.objects.create(name="demo-lora", kind="sft", path="/tmp/hat/deploy/demo-lora",
                                          parent=base, is_adapter=True)
    other = TrainedModel.objects.create(name="other-base", kind="base", path="/tmp/hat/deploy/other")
    return {"harness": harness, "v1": v1, "v2": v2, "vllm": vllm, "plain": plain, "ep_a": ep_a, "ep_b": ep_b,
            "far": far, "base": base, "tuned": tuned, "adapter": adapter, "other": other}


@pytest.fixture
def deployed(deploy_world, ml_staff, reviewer):
    """``tiny-live`` proposed by ml_staff (r1: production, demo-tiny, vllm-cpu, ep-a then ep-b), approved by the
    reviewer."""
    from streams.services import deployments

    w = deploy_world
    deployment = deployments.deployment_create(
        user=ml_staff, name="tiny-live", title="Tiny live", harness=w["harness"], label="production",
        serve_profile=w["vllm"], endpoints=[w["ep_a"], w["ep_b"]], model=w["base"], note="first")
    r1 = deployment.revisions.get(number=1)
    deployments.deployment_approve(user=reviewer, revision=r1, comment="ok")
    deployment.refresh_from_db()
    return {**w, "deployment": deployment, "r1": r1}


def live_session_on(deployment, user, title: str = "Evening show"):
    """A live session row on ``deployment`` (status live), as the session service stores it."""
    from streams import services as stream_services
    from streams.models import LiveSession

    room = stream_services.catalog_seed_demo()
    return LiveSession.objects.create(title=title, room=room, deployment=deployment, started_by=user,
                                      room_state={})
