"""Serving without a model server: serve profiles (bad specs are 400s naming each path, nothing saved), launch
and stop records and where their tasks go, a stop routed to the host that runs the server (a real worker on this
host's queue does not take another host's stop; that host's worker does, and only then is it stopped), the
periodic check, servers registered from outside, and every page and API per role (403/404)."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from django.db import transaction

from console.models import AuditEvent
from streams import serving_tasks
from streams.models import ModelEndpoint, ServeProfile, ServerInstance
from streams.serve_profiles import DEMO_MODEL_DIR, process_alive
from streams.services import serving
from training_jobs.models import TrainedModel

VLLM_SPEC = {"kind": "vllm", "enable_lora": True, "max_lora_rank": 16, "runtime_lora_updating": True}
MISSING = "0b5b4a47-2f0e-4a39-9d8b-3c4f5c1d2e3f"


@pytest.fixture
def demo_model(db, ml_staff):
    return TrainedModel.objects.create(name="demo-tiny", kind="base", path=str(DEMO_MODEL_DIR), created_by=ml_staff)


@pytest.fixture
def profile(db, ml_staff):
    return serving.serve_profile_create(user=ml_staff, name="cpu-lora", spec=VLLM_SPEC)


@pytest.fixture
def sent(monkeypatch):
    """Tasks sent on commit, recorded with their queue instead of sent."""
    out: list[tuple] = []
    for name in ("server_run", "server_stop"):
        task = getattr(serving_tasks, name)
        monkeypatch.setattr(task, "apply_async",
                            lambda args, queue, name=name, **kw: out.append((name, args[0], queue)))
    return out


@pytest.fixture
def sleeper():
    """A process in its own session, as a launched server is (the stop signals its group)."""
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(5)


def _api(client, user):
    client.force_login(user)
    return client


# --- profiles ---------------------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_profile_is_created_and_bad_specs_are_refused_with_paths(client, ml_staff):
    api = _api(client, ml_staff)
    response = api.post("/api/serving/profiles/", {"name": "cpu-lora", "spec": VLLM_SPEC},
                        content_type="application/json")
    assert response.status_code == 201, response.content
    assert response.json()["spec"]["kind"] == "vllm" and response.json()["created_by"]["username"] == ml_staff.username
    assert AuditEvent.objects.filter(action="serve_profile.create").count() == 1
    bad = [
        ({"kind": "tpu"}, "spec.kind"),
        ({"kind": "vllm", "port": 0}, "spec.port"),
        ({"kind": "vllm", "bogus": 1}, "spec.bogus"),
        ({"kind": "vllm", "enable_lora": True, "lora_adapters": [{"name": "no spaces!", "path": "/a"}]},
         "spec.lora_adapters[0].name"),
        ({"kind": "vllm", "extra_args": "--x"}, "spec.extra_args"),
        ({"kind": "local", "enable_lora": True}, "spec"),
        ("vllm", "spec"),
    ]
    for spec, path in bad:
        response = api.post("/api/serving/profiles/", {"name": "other", "spec": spec}, content_type="application/json")
        assert response.status_code == 400, (spec, response.content)
        assert path in [e["path"] for e in response.json()["errors"]], (spec, response.json())
    for name in ("Has Spaces", "", "cpu-lora"):  # not a slug, missing, taken
        response = api.post("/api/serving/profiles/", {"name": name, "spec": VLLM_SPEC},
                            content_type="application/json")
        assert response.status_code == 400 and "name" in [e["path"] for e in response.json()["errors"]], name
    assert list(ServeProfile.objects.values_list("name", flat=True)) == ["cpu-lora"]  # nothing half-saved
    # the page's form: a spec that is not JSON, then a bad field, both shown with their paths
    page = client.post("/serving/profiles/", {"name": "x", "spec": "{nope"})
    assert page.status_code == 400 and b"<code>spec</code>" in page.content
    page = client.post("/serving/profiles/", {"name": "x", "spec": '{"kind": "vllm", "port": 70000}'})
    assert page.status_code == 400 and b"<code>spec.port</code>" in page.content
    assert client.post("/serving/profiles/", {"name": "x", "spec": '{"kind": "local"}'}).status_code == 302
    assert set(ServeProfile.objects.values_list("name", flat=True)) == {"cpu-lora", "x"}


# --- launch and stop: records and queues -------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_launch_goes_to_the_serve_queue_and_stop_to_the_host_running_it(client, ml_staff, demo_model, profile, sent,
                                                                        sleeper):
    response = _api(client, ml_staff).post("/api/serving/servers/",
                                           {"profile": "cpu-lora", "model": str(demo_model.pk)},
                                           content_type="application/json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "starting" and body["profile"] == "cpu-lora" and body["model"]["name"] == "demo-tiny"
    assert sent == [("server_run", body["id"], "serve")]
    instance = ServerInstance.objects.get(pk=body["id"])
    # the launch task took it on host-b and started the process (the record says where)
    ServerInstance.objects.filter(pk=instance.pk).update(host="host-b", pid=sleeper.pid, port=9, status="ready")
    response = client.post(f"/api/serving/servers/{instance.pk}/stop/")
    assert response.status_code == 202 and response.json()["status"] == "stopping"
    assert sent[-1] == ("server_stop", str(instance.pk), "serve.host-b")
    assert sleeper.poll() is None  # nothing stopped here: only host-b may
    assert client.post(f"/api/serving/servers/{instance.pk}/stop/").status_code == 202  # asked again: still routed
    ServerInstance.objects.filter(pk=instance.pk).update(status="stopped")
    response = client.post(f"/api/serving/servers/{instance.pk}/stop/")
    assert response.status_code == 409 and "already stopped" in response.json()["detail"]
    assert [e.to_state for e in AuditEvent.objects.filter(action="server.stop").order_by("id")] == ["stopping"] * 2


@pytest.mark.django_db(transaction=True)
def test_a_launch_no_worker_took_yet_is_cancelled_and_then_not_started(ml_staff, demo_model, profile, sent):
    instance = serving.server_launch(user=ml_staff, profile=profile, model=demo_model)
    stopped = serving.server_stop(user=ml_staff, instance=instance)
    assert stopped.status == "stopped" and [s[0] for s in sent] == ["server_run"]
    assert serving.server_run(instance.pk).status == "stopped"  # the late launch task starts nothing
    assert ServerInstance.objects.get(pk=instance.pk).pid is None


@pytest.mark.django_db
def test_what_cannot_be_launched(ml_staff, demo_model, profile, sent, tmp_path, client):
    adapter = TrainedModel.objects.create(name="lora", kind="sft", path=str(tmp_path), parent=demo_model,
                                          is_adapter=True)
    gone = TrainedModel.objects.create(name="gone", kind="sft", path=str(tmp_path / "nope"))
    api = _api(client, ml_staff)
    for model, status, words in ((adapter, 409, "LoRA adapter"), (gone, 409, "is gone")):
        response = api.post("/api/serving/servers/", {"profile": "cpu-lora", "model": str(model.pk)},
                            content_type="application/json")
        assert response.status_code == status and words in response.json()["detail"], response.content
    response = api.post("/api/serving/servers/", {"profile": "nope", "model": MISSING}, content_type="application/json")
    assert response.status_code == 400
    assert {e["path"] for e in response.json()["errors"]} == {"profile", "model"}
    response = api.post("/api/serving/servers/", {"profile": "cpu-lora", "model": "not-a-uuid"},
                        content_type="application/json")
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "model"
    page = client.post("/serving/servers/", {"profile": "nope", "model": "x"})
    assert page.status_code == 400 and b"<code>profile</code>" in page.content
    assert ServerInstance.objects.count() == 0 and sent == []


# --- stop routing through real workers ----------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_stop_is_taken_only_by_the_worker_of_the_host_running_the_server(ml_staff, demo_model, profile, sleeper):
    import redis
    from django.conf import settings

    from tests.conftest import start_worker, stop_worker
    from tests.streams.preview_helpers import wait_for

    here = serving.serve_host()
    elsewhere = f"host-{uuid.uuid4().hex[:6]}"
    instance = ServerInstance.objects.create(profile=profile, model=demo_model, model_path=demo_model.path,
                                             status="ready", host=elsewhere, pid=sleeper.pid, port=9,
                                             started_by=ml_staff)
    proc, log = start_worker(f"serve,serve.{here}", log_name="serve-here-worker.log", pool="threads")
    try:
        serving.server_stop(user=ml_staff, instance=instance)  # sent on commit (autocommit here)
        # this host's worker is consuming (it answers a task on its own host queue) ...
        probe = serving_tasks.servers_check_host.apply_async(args=(here,), queue=f"serve.{here}")
        probe.get(timeout=60)
        # ... and the stop is still waiting on the other host's queue, the process alive, the record stopping
        assert redis.Redis.from_url(settings.ENV.redis_url).llen(f"serve.{elsewhere}") == 1
        assert sleeper.poll() is None and ServerInstance.objects.get(pk=instance.pk).status == "stopping"
    finally:
        stop_worker(proc, log)
    # the worker of that host (same machine, told its host name) takes it: process gone, then STOPPED
    proc, log = start_worker(f"serve,serve.{elsewhere}", log_name="serve-there-worker.log", pool="threads",
                             env_extra={"HAT_SERVE_HOST": elsewhere})
    try:
        assert wait_for(lambda: ServerInstance.objects.get(pk=instance.pk).status == "stopped", timeout=90,
                        interval=0.2), open(log.name).read()[-3000:]
    finally:
        stop_worker(proc, log)
    assert sleeper.wait(10) == -signal.SIGTERM
    assert ServerInstance.objects.get(pk=instance.pk).stopped_at is not None


@pytest.mark.django_db
def test_a_stop_task_on_the_wrong_host_kills_nothing(ml_staff, demo_model, profile, sleeper):
    instance = ServerInstance.objects.create(profile=profile, model=demo_model, model_path=demo_model.path,
                                             status="stopping", host="not-this-host", pid=sleeper.pid)
    with pytest.raises(RuntimeError, match="not-this-host"):
        serving.server_stop_run(instance.pk)
    assert sleeper.poll() is None and ServerInstance.objects.get(pk=instance.pk).status == "stopping"


# --- the periodic check -----------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_the_periodic_check_fails_servers_whose_process_died(ml_staff, demo_model, profile, sleeper, monkeypatch):
    here = serving.serve_host()
    dead = subprocess.Popen(["true"], start_new_session=True)
    dead.wait(10)
    make = lambda status, pid, host=here: ServerInstance.objects.create(  # noqa: E731
        profile=profile, model=demo_model, model_path=demo_model.path, status=status, host=host, pid=pid)
    died, alive, stopping, other = make("ready", dead.pid), make("ready", sleeper.pid), make("stopping", dead.pid), \
        make("ready", dead.pid, "host-x")
    assert not process_alive(dead.pid) and process_alive(sleeper.pid)
    checked = []
    monkeypatch.setattr(serving_tasks.servers_check_host, "apply_async",
                        lambda args, queue, **kw: checked.append((args[0], queue)))
    assert serving.servers_check() == sorted({here, "host-x"})
    assert (here, f"serve.{here}") in checked and ("host-x", "serve.host-x") in checked
    assert sorted(serving.servers_check_here()) == sorted([str(died.pk), str(stopping.pk)])
    status = dict(ServerInstance.objects.values_list("pk", "status"))
    assert (status[died.pk], status[alive.pk], status[stopping.pk], status[other.pk]) == \
        ("failed", "ready", "stopped", "ready")
    assert "exited" in ServerInstance.objects.get(pk=died.pk).error


# --- registered servers -------------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_server_started_outside_is_registered_once_and_never_stopped_by_the_console(ml_staff, profile, demo_model):
    endpoint = ModelEndpoint.objects.create(name="make-run", base_url="http://127.0.0.1:8011/v1",
                                            model=str(DEMO_MODEL_DIR), kind="vllm")
    first = serving.server_register(profile=profile, endpoint=endpoint, model=demo_model)
    again = serving.server_register(profile=profile, endpoint=endpoint, model=demo_model, host="box")
    assert first.pk == again.pk and ServerInstance.objects.count() == 1
    assert (again.status, again.managed, again.port, again.host) == ("ready", False, 8011, "box")
    with pytest.raises(Exception, match="outside the console"):
        serving.server_stop(user=ml_staff, instance=again)
    bare = serving.server_register(profile=profile, endpoint=endpoint, host="")
    assert bare.pk == again.pk and bare.model_path == demo_model.path


# --- pages and API per role ---------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_every_page_and_api_per_role(client, ml_staff, operator, outsider, manager, demo_model, profile, sent):
    with transaction.atomic():
        instance = serving.server_launch(user=ml_staff, profile=profile, model=demo_model)
    reads = ["/serving/", f"/serving/servers/{instance.pk}/", "/api/serving/profiles/", "/api/serving/servers/",
             f"/api/serving/servers/{instance.pk}/"]
    writes = [("/api/serving/profiles/", {"name": "p2", "spec": {"kind": "local"}}),
              ("/api/serving/servers/", {"profile": "cpu-lora", "model": str(demo_model.pk)}),
              (f"/api/serving/servers/{instance.pk}/stop/", {})]
    pages = [("/serving/profiles/", {"name": "p3", "spec": '{"kind": "local"}'}),
             ("/serving/servers/", {"profile": "cpu-lora", "model": str(demo_model.pk)}),
             (f"/serving/servers/{instance.pk}/stop/", {})]
    # anonymous: the pages send to the login page, the API asks for a token
    for url in reads[:2]:
        assert client.get(url).status_code == 302
    for url in reads[2:]:
        assert client.get(url).status_code == 401
    # no role: nothing
    client.force_login(outsider)
    for url in reads:
        assert client.get(url).status_code == 403, url
    for url, data in writes:
        assert client.post(url, data, content_type="application/json").status_code == 403, url
    for url, data in pages:
        assert client.post(url, data).status_code == 403, url
    # VIEW_SERVING only (operators, campaign managers): read, no forms, no writes
    for user in (operator, manager):
        client.force_login(user)
        for url in reads:
            assert client.get(url).status_code == 200, (user, url)
        page = client.get("/serving/").content.decode()
        assert 'data-testid="server-row"' in page and 'data-testid="launch-form"' not in page \
            and 'data-testid="stop"' not in page
        for url, data in writes:
            assert client.post(url, data, content_type="application/json").status_code == 403, (user, url)
        for url, data in pages:
            assert client.post(url, data).status_code == 403, (user, url)
    # MANAGE_SERVING: the forms; unknown servers are 404s everywhere
    client.force_login(ml_staff)
    page = client.get("/serving/").content.decode()
    assert 'data-testid="launch-form"' in page and 'data-testid="stop"' in page and "cpu-lora" in page
    for url in (f"/serving/servers/{MISSING}/", f"/api/serving/servers/{MISSING}/"):
        assert client.get(url).status_code == 404, url
    assert client.post(f"/api/serving/servers/{MISSING}/stop/").status_code == 404
    assert client.post(f"/serving/servers/{MISSING}/stop/").status_code == 404
    assert client.get("/api/serving/servers/not-a-uuid/").status_code == 404
    assert client.get("/api/serving/servers/?status=bogus").status_code == 400
    assert ServerInstance.objects.count() == 1 and ServeProfile.objects.count() == 1  # the refusals saved nothing
    # the launch and stop forms work for the manager
    response = client.post("/serving/servers/", {"profile": "cpu-lora", "model": str(demo_model.pk)})
    assert response.status_code == 302
    response = client.post(f"/serving/servers/{instance.pk}/stop/", follow=True)
    assert response.status_code == 200 and ServerInstance.objects.get(pk=instance.pk).status == "stopped"
    api = client.get("/api/serving/servers/?status=starting").json()
    assert api["count"] == 1 and api["results"][0]["profile"] == "cpu-lora"


@pytest.mark.django_db
def test_server_page_shows_where_and_what(client, operator, ml_staff, demo_model, profile, tmp_path):
    log = tmp_path / "server.log"
    log.write_text("INFO engine ready\n")
    instance = ServerInstance.objects.create(
        profile=profile, model=demo_model, model_path=demo_model.path, status="ready", host="gpu-7", pid=os.getpid(),
        port=8123, argv=["python", "-m", "vllm.entrypoints.openai.api_server"], log_path=str(log),
        adapters=[{"name": "hat-lora-1", "path": "/a", "model_id": "x", "loaded_at": "now"}], started_by=ml_staff)
    client.force_login(operator)
    page = client.get(f"/serving/servers/{instance.pk}/").content.decode()
    assert "gpu-7:8123" in page and "hat-lora-1" in page and "engine ready" in page and 'data-testid="stop"' not in page
    # the command line and the model directory are for those who launch servers (issue 14), folded in <details>
    assert "vllm.entrypoints.openai.api_server" not in page and demo_model.path not in page
    client.force_login(ml_staff)
    page = client.get(f"/serving/servers/{instance.pk}/").content.decode()
    paths = page[page.index('data-testid="server-paths"'):page.index("</details>")]
    assert "vllm.entrypoints.openai.api_server" in paths and demo_model.path in paths and str(log) in paths
    client.force_login(operator)
    listing = client.get("/serving/").content.decode()
    assert "hat-lora-1" in listing and "gpu-7" in listing


@pytest.mark.django_db
def test_a_server_that_dies_before_it_is_ready_is_failed_with_its_error(ml_staff, tmp_path, sent):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")  # no weights, no model type: the server exits at start
    model = TrainedModel.objects.create(name="broken", kind="base", path=str(broken))
    local = serving.serve_profile_create(user=ml_staff, name="light", spec={"kind": "local", "ready_timeout_s": 300})
    instance = serving.server_launch(user=ml_staff, profile=local, model=model)
    instance = serving.server_run(instance.pk)
    assert instance.status == "failed" and "exited with code" in instance.error, instance.error
    assert instance.host == serving.serve_host() and instance.pid and not process_alive(instance.pid)
    assert instance.endpoint_id is None and Path(instance.log_path).is_file()
    # a stored spec edited behind the services' back: refused at launch, never sent
    ServeProfile.objects.filter(pk=local.pk).update(spec={"kind": "tpu"})
    local.refresh_from_db()
    with pytest.raises(Exception, match="serve profile is invalid"):
        serving.server_launch(user=ml_staff, profile=local, model=model)
    assert [s[0] for s in sent] == []  # no commit in this test: nothing went out
