"""Outbound requests and secrets: model endpoints are administrators' records, checked by one function
(http(s) only, no credentials in the URL, a host on HAT_OUTBOUND_HOSTS) when an administrator saves one, when
someone picks one and again when a worker calls it; API keys are secrets referenced by name
(``HAT_ENDPOINT_SECRET_<NAME>``), read only where the request is made, never shown to other roles."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console import secrets
from console.errors import ValidationFailed
from streams import services
from streams.engine.outbound import OutboundRefused, check_url, normalise_hosts
from streams.models import ModelEndpoint, PreviewEvent
from tests.streams.preview_helpers import GOOD, event_types, price_script

LOOPBACK = ["127.0.0.1", "localhost", "::1"]


# --- the check (plain Python) ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8011/v1", "https://localhost/v1", "http://[::1]:8000/v1", "HTTP://LOCALHOST.:9/v1",
])
def test_allowed_urls_pass(url):
    assert check_url(url, LOOPBACK) == url


@pytest.mark.parametrize("url, why", [
    ("file:///etc/passwd", "only http and https"),
    ("gopher://127.0.0.1:70/_x", "only http and https"),
    ("ftp://127.0.0.1/", "only http and https"),
    ("127.0.0.1:8011/v1", "only http and https"),
    ("http://user:pw@127.0.0.1/v1", "user name or password"),
    ("http://127.0.0.1@evil.example/v1", "user name or password"),
    ("http://evil.example/v1", "not on the outbound allow-list"),
    ("http://169.254.169.254/latest/meta-data", "not on the outbound allow-list"),
    ("http://127.1/v1", "not on the outbound allow-list"),  # numeric spellings are not resolved, not listed
    ("http://2130706433/v1", "not on the outbound allow-list"),
    ("http://localhost.evil.example/v1", "not on the outbound allow-list"),
    ("http://127.0.0.1:99999/v1", "not a valid URL"),
    ("http://evil.example\\@127.0.0.1/v1", "backslashes"),
    ("http://127.0.0.1/v1 ", "spaces"),
    ("http://127.0.0.1/v1?x=1", "query"),
    ("http:///v1", "no host"),
    ("", "no URL"),
])
def test_refused_urls_say_why(url, why):
    with pytest.raises(OutboundRefused, match=why):
        check_url(url, LOOPBACK)


def test_host_entries_with_a_port_allow_that_port_only():
    allowed = ["api.example.com:443", "[::1]:8011", "gpu-1"]
    assert normalise_hosts(allowed) == {("api.example.com", 443), ("::1", 8011), ("gpu-1", None)}
    assert check_url("https://api.example.com/v1", allowed)
    assert check_url("http://gpu-1:8000/v1", allowed)
    assert check_url("http://[::1]:8011/v1", allowed)
    for url in ("https://api.example.com:8443/v1", "http://api.example.com/v1", "http://[::1]:8012/v1"):
        with pytest.raises(OutboundRefused):
            check_url(url, allowed)


def test_hosts_are_normalised_alike_on_both_sides():
    """Case and one trailing dot are the same name on both sides; a second dot is another name (it was ignored);
    an internationalised name matches its IDNA form, the name the HTTP client sends."""
    assert check_url("http://LOCALHOST.:9/v1", ["Localhost."]) and check_url("http://localhost/v1", ["LOCALHOST."])
    for url in ("http://localhost..:9/v1", "http://127.0.0.1..:9/v1"):
        with pytest.raises(OutboundRefused, match="not on the outbound allow-list"):
            check_url(url, LOOPBACK)
    assert normalise_hosts(["BÜCHER.example.", "xn--bcher-kva.example"]) == {("xn--bcher-kva.example", None)}
    assert check_url("http://xn--bcher-kva.example/v1", ["bücher.example"])
    assert check_url("http://Bücher.example./v1", ["xn--bcher-kva.example"])
    with pytest.raises(OutboundRefused):
        check_url("http://bucher.example/v1", ["bücher.example"])


def test_a_bare_host_allows_only_the_default_port_for_tool_endpoints():
    """Tool endpoints: ``127.0.0.1`` once allowed every loopback port (a tool reached Redis on 6379); now it is port
    80 (443 for https), a listed ``host:port`` its port. Model endpoints keep any port of a listed host: the
    console starts model servers on free loopback ports."""
    assert check_url("http://127.0.0.1/api", LOOPBACK, ports="default")
    assert check_url("https://localhost./api", LOOPBACK, ports="default")
    assert check_url("http://[::1]:80/api", LOOPBACK, ports="default")
    for url in ("http://127.0.0.1:6379", "https://localhost:80/api", "http://[::1]:8011/api"):
        with pytest.raises(OutboundRefused, match="not on the outbound allow-list .*allows port (80|443) only"):
            check_url(url, LOOPBACK, ports="default")
    assert check_url("http://127.0.0.1:9000/api", [*LOOPBACK, "127.0.0.1:9000"], ports="default")
    for url in ("http://127.0.0.1:8011/v1", "http://127.0.0.1:6379/v1", "http://localhost.:41234/v1"):
        assert check_url(url, LOOPBACK)  # the model endpoints' rule


def test_form_only_check_without_an_allow_list():
    assert check_url("http://anything.example/v1", None)
    with pytest.raises(OutboundRefused):
        check_url("file:///etc/passwd", None)


# --- secrets ------------------------------------------------------------------------------------------------------


def test_only_prefixed_variables_are_secrets():
    env = {"HAT_ENDPOINT_SECRET_OPENAI": "sk-1", "HAT_ENDPOINT_SECRET_EMPTY": "", "HAT_SECRET_KEY": "django",
           "DATABASE_URL": "postgres://x", "HAT_ENDPOINT_SECRET_bad-name": "v"}
    assert secrets.secret_names(env) == ["OPENAI"]
    assert secrets.secret_value("OPENAI", env) == "sk-1"
    # Django's key and the database URL are out of reach whatever name is asked for
    for name in ("HAT_SECRET_KEY", "SECRET_KEY", "DATABASE_URL", "../HAT_SECRET_KEY", "EMPTY", "openai"):
        with pytest.raises(secrets.SecretMissing):
            secrets.secret_value(name, env)


# --- the record ---------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_model_clean_refuses_bad_urls_and_unknown_secrets(monkeypatch):
    from django.core.exceptions import ValidationError

    monkeypatch.setenv("HAT_ENDPOINT_SECRET_TEACHER", "sk-teacher")
    ok = ModelEndpoint(name="t", base_url="http://127.0.0.1:9/v1", model="m", api_key_secret="TEACHER")
    ok.full_clean()
    for fields, where in ((dict(base_url="file:///etc/passwd"), "base_url"),
                          (dict(base_url="http://evil.example/v1"), "base_url"),
                          (dict(api_key_secret="HAT_SECRET_KEY"), "api_key_secret"),
                          (dict(api_key_secret="NOT_SET"), "api_key_secret")):
        bad = ModelEndpoint(**{"name": "t", "base_url": "http://127.0.0.1:9/v1", "model": "m", **fields})
        with pytest.raises(ValidationError) as info:
            bad.full_clean()
        assert where in info.value.message_dict


@pytest.mark.django_db
def test_as_config_checks_again_and_reads_the_key_there(monkeypatch, settings):
    monkeypatch.setenv("HAT_ENDPOINT_SECRET_TEACHER", "sk-teacher")
    ep = ModelEndpoint.objects.create(name="t", base_url="http://127.0.0.1:9/v1", model="m", api_key_secret="TEACHER")
    assert ep.as_config().api_key == "sk-teacher"
    # rows edited behind the form's back are refused where they are used
    for url in ("file:///etc/passwd", "http://evil.example/v1", "http://u:p@127.0.0.1/v1"):
        ModelEndpoint.objects.filter(pk=ep.pk).update(base_url=url)
        ep.refresh_from_db()
        with pytest.raises(OutboundRefused, match="model endpoint 't' is refused"):
            ep.as_config()
    ModelEndpoint.objects.filter(pk=ep.pk).update(base_url="http://127.0.0.1:9/v1", api_key_secret="GONE")
    ep.refresh_from_db()
    with pytest.raises(OutboundRefused) as info:
        ep.as_config()
    assert "GONE" not in str(info.value)  # the message reaches non-administrators: no secret name
    # the allow-list is the administrators': a host they add is allowed
    settings.HAT_OUTBOUND_HOSTS = ["gpu-1:8000"]
    ModelEndpoint.objects.filter(pk=ep.pk).update(base_url="http://gpu-1:8000/v1", api_key_secret="")
    ep.refresh_from_db()
    assert ep.as_config().base_url == "http://gpu-1:8000/v1"


# --- the admin: superusers only, secrets picked by name ------------------------------------------------------------


@pytest.fixture
def admin_user(db, django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw")


def _admin_post(client, **fields):
    data = {"name": "teacher", "kind": "vllm", "base_url": "http://127.0.0.1:9/v1", "model": "m",
            "api_key_secret": "", "timeout_s": "60", "connect_timeout_s": "5"}
    data.update(fields)
    return client.post(reverse("admin:streams_modelendpoint_add"), data)


def test_admin_creates_endpoints_with_a_secret_by_name(client, admin_user, monkeypatch):
    monkeypatch.setenv("HAT_ENDPOINT_SECRET_TEACHER", "sk-teacher-value")
    client.force_login(admin_user)
    page = client.get(reverse("admin:streams_modelendpoint_add")).content.decode()
    assert '<option value="TEACHER">TEACHER</option>' in page and "sk-teacher-value" not in page
    assert "HAT_SECRET_KEY</option>" not in page
    r = _admin_post(client, api_key_secret="TEACHER")
    assert r.status_code == 302, r.content.decode()[:2000]
    ep = ModelEndpoint.objects.get(name="teacher")
    assert ep.api_key_secret == "TEACHER"  # the name, never the value
    assert "sk-teacher-value" not in str(ModelEndpoint.objects.values().get(pk=ep.pk))


@pytest.mark.parametrize("fields, message", [
    ({"base_url": "file:///etc/passwd"}, "only http and https"),
    ({"base_url": "http://evil.example/v1"}, "not on the outbound allow-list"),
    ({"base_url": "http://user:pw@127.0.0.1/v1"}, "user name or password"),
    ({"api_key_secret": "HAT_SECRET_KEY"}, "Select a valid choice"),
    ({"api_key_secret": "DATABASE_URL"}, "Select a valid choice"),
])
def test_admin_form_refuses_bad_endpoints(client, admin_user, fields, message):
    client.force_login(admin_user)
    r = _admin_post(client, **fields)
    assert r.status_code == 200 and message in r.content.decode()
    assert not ModelEndpoint.objects.exists()


def test_only_superusers_reach_endpoints_in_the_admin(client, ml_staff, django_user_model):
    staff = django_user_model.objects.create_user("staffer", password="pw", is_staff=True)
    from django.contrib.auth.models import Permission

    staff.user_permissions.set(Permission.objects.filter(codename__endswith="modelendpoint"))
    ep = ModelEndpoint.objects.create(name="t", base_url="http://127.0.0.1:9/v1", model="m")
    for user in (ml_staff, staff):
        client.force_login(user)
        for url in (reverse("admin:streams_modelendpoint_changelist"), reverse("admin:streams_modelendpoint_add"),
                    reverse("admin:streams_modelendpoint_change", args=[ep.pk])):
            assert client.get(url).status_code in (302, 403), (user, url)


# --- preview rooms and scenario runs -------------------------------------------------------------------------------


def test_a_room_cannot_be_opened_on_a_refused_endpoint(manager, harness_with_history, demo_scenarios):
    ep = ModelEndpoint.objects.create(name="evil", base_url="http://evil.example/v1", model="m")
    with pytest.raises(ValidationFailed) as info:
        services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=ep)
    assert info.value.errors[0]["path"] == "endpoint" and "allow-list" in info.value.errors[0]["message"]
    with pytest.raises(ValidationFailed):
        services.scenario_run_start(user=manager, version=harness_with_history["v1"],
                                    scenario=demo_scenarios["compliance-traps"], endpoint=ep, play=False)
    from streams.models import PreviewRoom

    assert not PreviewRoom.objects.exists()


def test_an_endpoint_edited_after_the_room_opened_is_refused_when_called(
        manager, harness_with_history, scripted_model, scripted_endpoint, django_capture_on_commit_callbacks):
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    with django_capture_on_commit_callbacks(execute=False):
        turn_id = services.preview_comment_post(user=manager, room=room, text="how much is #101?")
    price_script(scripted_endpoint)
    ModelEndpoint.objects.filter(pk=scripted_model.pk).update(base_url="file:///etc/passwd")
    assert services.preview_turn_run(room_id=room.pk, turn_id=turn_id) is None
    assert event_types(room.pk, turn_id)[-1] == "turn_failed"
    failed = PreviewEvent.objects.get(room=room, turn_id=turn_id, type="turn_failed").payload
    assert "OutboundRefused" in failed["message"] and "only http and https" in failed["message"]
    assert scripted_endpoint.requests == []  # nothing was sent
    # put right by an administrator, the next turn runs
    ModelEndpoint.objects.filter(pk=scripted_model.pk).update(base_url=scripted_endpoint.base_url)
    with django_capture_on_commit_callbacks(execute=False):
        turn_id = services.preview_comment_post(user=manager, room=room, text="how much is #101?")
    assert services.preview_turn_run(room_id=room.pk, turn_id=turn_id).reply == GOOD


def test_the_preview_page_refuses_a_refused_endpoint_with_a_form_error(client, manager, harness_with_history):
    ep = ModelEndpoint.objects.create(name="evil", base_url="http://evil.example/v1", model="m")
    client.force_login(manager)
    v1 = harness_with_history["v1"]
    r = client.post(reverse("streams:preview_list"), {"version": v1.pk, "endpoint": ep.pk, "seed": 0})
    assert r.status_code == 400 and "not on the outbound allow-list" in r.content.decode()
    from streams.models import PreviewRoom

    assert not PreviewRoom.objects.exists()


def test_the_allow_list_is_read_from_the_environment(monkeypatch):
    from console.config import ConsoleSettings

    assert ConsoleSettings().outbound_hosts == ["127.0.0.1", "localhost", "::1"]  # loopback by default
    monkeypatch.setenv("HAT_OUTBOUND_HOSTS", '["api.example.com:443", "gpu-1"]')
    hosts = ConsoleSettings().outbound_hosts
    assert hosts == ["api.example.com:443", "gpu-1"]
    assert check_url("https://api.example.com/v1", hosts)
    with pytest.raises(OutboundRefused):
        check_url("http://127.0.0.1:8011/v1", hosts)  # loopback too is only allowed when listed
