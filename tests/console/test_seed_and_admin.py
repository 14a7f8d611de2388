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
    assert list(AuditEvent.objects.filter(scope="deployment:tiny-room-live").order_by("id")
                .values_list("action", flat=True)) == ["deployment.create", "deployment.approve"]
