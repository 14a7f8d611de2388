import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from console import roles
from harness_editor.models import Harness, HarnessVersion

pytestmark = pytest.mark.django_db


def test_seed_demo_creates_users_per_role_and_a_harness_with_history(capsys):
    call_command("seed_demo", password="pw-for-tests-123")
    out = capsys.readouterr().out
    User = get_user_model()
    for username, role in [("alice", roles.CAMPAIGN_MANAGER), ("carol", roles.COMPLIANCE_REVIEWER),
                           ("erin", roles.ML_STAFF), ("frank", roles.OPERATOR)]:
        user = User.objects.get(username=username)
        assert roles.user_roles(user) == [role]
        assert user.check_password("pw-for-tests-123")
        assert username in out
    harness = Harness.objects.get(slug="glow-gadget")
    statuses = dict(harness.versions.values_list("number", "status"))
    assert statuses == {1: "approved", 2: "approved", 3: "submitted"}
    labels = dict(harness.labels.values_list("name", "version__number"))
    assert labels == {"production": 1, "staging": 2}
    assert harness.versions.get(number=3).manifest.tools  # the stored manifest parses
    # the demo model's own lean harness, approved by someone other than its author
    tiny = Harness.objects.get(slug="tiny-room")
    v1 = tiny.versions.get()
    assert v1.status == "approved" and v1.decided_by_id != v1.author_id
    assert dict(tiny.labels.values_list("name", "version__number")) == {"production": 1}
    assert {t.name for t in v1.manifest.tools} == {"lookup_product", "check_stock", "get_shipping", "get_deals"}
    # a harness from outside the live room, in production, with its own scenario
    desk = Harness.objects.get(slug="order-desk").versions.get()
    assert desk.status == "approved" and desk.decided_by_id != desk.author_id
    assert len(desk.manifest.tools) == 16 and desk.manifest.conventions.speaker_label == "customer"
    assert {t.binding.kind for t in desk.manifest.tools} == {"fixture"}
    from streams.models import Scenario

    assert Scenario.objects.get(slug="order-desk-day").parsed().fixtures


def test_seed_demo_is_idempotent():
    call_command("seed_demo")
    call_command("seed_demo")
    assert Harness.objects.count() == 3
    assert HarnessVersion.objects.count() == 5


@pytest.mark.parametrize("url", [
    "/admin/", "/admin/harness_editor/harness/", "/admin/harness_editor/harnessversion/",
    "/admin/harness_editor/label/", "/admin/console/auditevent/", "/admin/auth/group/",
])
def test_admin_lists_every_model(client, url):
    call_command("seed_demo")
    client.force_login(get_user_model().objects.get(username="admin"))
    assert client.get(url).status_code == 200


def test_admin_cannot_change_a_version(client):
    call_command("seed_demo")
    client.force_login(get_user_model().objects.get(username="admin"))
    version = HarnessVersion.objects.get(harness__slug="glow-gadget", number=1)
    response = client.post(f"/admin/harness_editor/harnessversion/{version.pk}/change/",
                                 {"change_note": "edited in admin"})
    assert response.status_code == 403


def test_seed_demo_registers_make_runs_server_and_the_live_deployment():
    from console.models import AuditEvent
    from streams.deployment_selectors import deployment_in_force
    from streams.models import Deployment, ServeProfile, ServerInstance

    call_command("seed_demo")
    call_command("seed_demo")  # idempotent: one profile, one live server record, one deployment revision
    profile = ServeProfile.objects.get(name="vllm-cpu")
    assert profile.spec["kind"] == "vllm" and profile.spec["enable_lora"] and profile.spec["runtime_lora_updating"]
    server = ServerInstance.objects.get(profile=profile)
    assert (server.managed, server.status, server.endpoint.name) == (False, "ready", "local")
    assert server.endpoint.base_url.endswith(":8011/v1") and server.model is not None
    deployment = Deployment.objects.get(name="tiny-room-live")
    revision = deployment.revisions.get()
    assert (revision.status, revision.proposed_by.username, revision.decided_by.username) == (
        "approved", "ivan", "carol")
    in_force = deployment_in_force(deployment)
    assert (in_force.version.harness.slug, in_force.version.number, in_force.label) == ("tiny-room", 1, "production")
    assert [e.name for e in in_force.endpoints] == ["local"] and in_force.model == server.model
    assert in_force.profile == profile
    from streams.services.serving import serve_spec_check

    for stored in ServeProfile.objects.all():  # the seeded profiles pass today's checks (loopback, allowed flags)
        serve_spec_check(stored.spec)
    assert list(AuditEvent.objects.filter(scope="deployment:tiny-room-live").order_by("id")
                .values_list("action", flat=True)) == ["deployment.create", "deployment.approve"]


def test_seed_demo_serves_glow_gadget_on_a_model_trained_on_it(client):
    """The flagship harness is answered by the committed glow-gadget adapter of SmolLM2 behind the endpoint
    ``flagship`` (make run's second vLLM server): registered with what it was trained on, shown in the notice of
    a room on the tiny model, picked by "Try this draft", and one room of production on it for alice."""
    from streams.model_fit import model_fit
    from streams.models import ModelEndpoint, PreviewRoom, ServerInstance
    from streams.services.try_draft import try_draft_endpoint
    from training_jobs.base_models import glow_adapter, smollm2
    from training_jobs.models import TrainedModel

    call_command("seed_demo")
    call_command("seed_demo")  # idempotent: one adapter row, one endpoint, one server record, one room
    adapter = TrainedModel.objects.get(is_adapter=True, path=str(glow_adapter.ADAPTER_DIR.resolve()))
    assert adapter.parent.path == str(smollm2.MODEL_DIR.resolve()) and adapter.lora_rank == 16
    assert adapter.recipe["trained_manifests"] == list(glow_adapter.MIX) and adapter.recipe["command"]
    # the trainer's figures as a trained model's (the page's known rows), the held-out turns per harness
    assert adapter.metrics["final_loss"] > 0 and adapter.metrics["steps_this_run"] > 0
    assert set(adapter.metrics["heldout"]) == set(glow_adapter.MIX)
    flagship = ModelEndpoint.objects.get(name="flagship")
    assert not flagship.is_default and flagship.model == glow_adapter.ADAPTER_NAME
    assert flagship.base_url.endswith(":8012/v1") and adapter.endpoint_id == flagship.pk
    server = ServerInstance.objects.get(endpoint=flagship)
    assert (server.managed, server.status, server.model, server.profile.name) == (False, "ready", adapter,
                                                                                  "vllm-cpu-flagship")
    assert server.profile.spec["served_model_name"] == glow_adapter.ADAPTER_NAME
    harness = Harness.objects.get(slug="glow-gadget")
    v1, v3 = harness.versions.get(number=1), harness.versions.get(number=3)
    room = PreviewRoom.objects.get(endpoint=flagship)
    assert (room.harness_version, room.created_by.username) == (v1, "alice")

    assert model_fit(endpoint=flagship, version=v1) is None  # trained on this very manifest
    local = ModelEndpoint.objects.get(name="local")
    fit = model_fit(endpoint=local, version=v1)
    assert fit.level == "warning" and fit.better[0]["name"] == "flagship" and fit.better[0]["exact"]
    assert try_draft_endpoint(v3) == flagship  # v3 (in review) was in the adapter's data too
    assert try_draft_endpoint(Harness.objects.get(slug="tiny-room").versions.get()) == local

    alice = get_user_model().objects.get(username="alice")
    client.force_login(alice)
    other = PreviewRoom.objects.create(created_by=alice, harness_version=v1, endpoint=local, room_state={})
    page = client.get(f"/preview/{other.pk}/").content.decode()
    assert 'data-testid="model-fit-better"' in page and f"endpoint={flagship.pk}" in page
    form = client.get(f"/preview/?version={v1.pk}&endpoint={flagship.pk}").content.decode()
    assert f'<option value="{flagship.pk}" selected>' in form
    # before anyone picks: which model knows which harness, and what the flagship's model did in the demo room
    rows = {m.group(1): m.group(2) for m in re.finditer(
        r'data-testid="endpoint-model" data-endpoint="([^"]+)">(.*?)</tr>', form, re.S)}
    assert set(rows) == {"local", "flagship"}
    assert "skincare_v1" in rows["flagship"] and "glow-gadget v1" in rows["flagship"]
    assert "answered 4 of 9 typical viewer questions" in rows["flagship"]
    assert "tiny_room" in rows["local"] and "answered" not in rows["local"]
    flagship_room = client.get(f"/preview/{room.pk}/").content.decode()
    assert 'data-testid="endpoint-measured"' in flagship_room
    assert "Known limits: a greeting, a coupon or a condition question" in flagship_room
    assert 'data-testid="endpoint-measured"' not in page  # the tiny model: nothing measured in a room
    # a prefill that names nothing is ignored, not an error
    assert client.get("/preview/?version=nope&endpoint=999999").status_code == 200
