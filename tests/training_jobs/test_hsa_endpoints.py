"""A dataset recipe's teacher and judge are model endpoints administrators created, picked by name.

The attack of issue 10 (an ML staff user writes ``base_url`` + ``api_key_env: HAT_SECRET_KEY`` into a recipe and
the worker sends that variable's value to their URL) is a located 400 that saves nothing and sends nothing; an
endpoint that is not allowed (scheme, host) is refused when picked and again on the worker, even when its row was
edited behind the admin form; an administrator's endpoint with a secret sends ``Authorization: Bearer <value>``
from a real Celery worker, and the value is nowhere in the stored recipe, the API, the page, the audit trail or
the worker's log."""

from __future__ import annotations

import importlib
import io
import json
import time

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from console.models import AuditEvent
from streams.models import ModelEndpoint
from tests.streams.scripted_endpoint import ScriptedEndpoint, hermes_calls, native_calls, reply
from tests.training_jobs.test_hsa_views import queued_tasks  # noqa: F401  (fixture)
from training_jobs import services
from training_jobs.models import Dataset

SECRET_NAME = "HSA_TEACHER_KEY"
SECRET = "sk-test-5b0f7e-never-shown-anywhere"
SOURCES = {"scenarios": [], "tiny_gold": 1, "tiny_gold_seed": 0}
REGEN = {"name": "regen", "variants_per_sample": 1, "harness_pool_size": 0, "operators": [],
         "label_mode": "regenerate"}

needs_shared_db = pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                     reason="the Celery worker needs the PostgreSQL test database")


@pytest.fixture
def listener():
    """A loopback listener playing an OpenAI-compatible server: records every request and its headers."""
    ep = ScriptedEndpoint()
    yield ep
    ep.close()


@pytest.fixture
def cleanup_artifacts(db):
    yield
    import shutil

    for d in Dataset.objects.all():
        shutil.rmtree(services.datasets_dir() / str(d.pk), ignore_errors=True)


def _answer_right(listener) -> None:
    """The teacher's answer to the one sample of SOURCES, as the reference policy gives it (the judge keeps it)."""
    from training_jobs.schemas import Sources

    sample = Sources.model_validate(SOURCES).collect({})[0]
    listener.add(hermes_calls(*[("load_skill", {"skill_id": s}) for s in sample.loaded_skills()]),
                 native_calls(*[(t.name, dict(t.arguments)) for t in sample.tool_calls()]), reply(sample.reply))


def _api(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def _endpoint(listener, name="teacher", **fields) -> ModelEndpoint:
    """A row as an administrator's form would save it (the admin itself is tested in tests/streams)."""
    ep = ModelEndpoint(name=name, base_url=listener.base_url, model="scripted", kind="vllm", timeout_s=5,
                       connect_timeout_s=1, **fields)
    ep.full_clean()
    ep.save()
    return ep


# --- the attack ------------------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("variable", ["HAT_SECRET_KEY", "DATABASE_URL"])
@pytest.mark.parametrize("field", ["teacher", "judge"])
def test_a_recipe_cannot_name_a_url_or_an_environment_variable(ml_staff, listener, queued_tasks, variable, field,
                                                               monkeypatch):
    monkeypatch.setenv("HAT_SECRET_KEY", "django-key-under-attack-0123456789abcdef")
    _endpoint(listener, name="ok")
    written_out = {"base_url": listener.base_url, "model": "m", "api_key_env": variable}
    recipe = {**REGEN, "teacher": "ok", field: written_out}
    response = _api(ml_staff).post("/api/datasets/", {"recipe": recipe, "sources": SOURCES}, format="json")
    assert response.status_code == 400, response.json()
    errors = {e["path"]: e["message"] for e in response.json()["errors"]}
    assert list(errors) == [f"recipe.{field}"] and "name a model endpoint" in errors[f"recipe.{field}"]
    assert not Dataset.objects.exists() and queued_tasks == []
    assert not AuditEvent.objects.filter(scope__startswith="dataset:").exists()
    time.sleep(0.2)
    assert listener.requests == []  # nothing went out


@pytest.mark.django_db
def test_the_compose_form_refuses_it_too(client, ml_staff, listener, queued_tasks):
    client.force_login(ml_staff)
    recipe = {**REGEN, "teacher": {"base_url": "file:///etc/passwd", "model": "m", "api_key_env": "HAT_SECRET_KEY"}}
    response = client.post("/datasets/new/", {"name": "x", "build": "hsa", "seed": 0, "variants_per_sample": 1,
                                              "names": "train", "harness_pool_size": 0, "tiny_gold": 2,
                                              "tiny_gold_seed": 0, "label_mode": "mechanical",
                                              "recipe_json": json.dumps(recipe)})
    assert response.status_code == 400
    assert any("recipe.teacher" in e for e in response.context["form"].errors["recipe_json"])
    assert not Dataset.objects.exists() and queued_tasks == [] and listener.requests == []


@pytest.mark.django_db
@pytest.mark.parametrize("base_url, message", [
    ("file:///etc/passwd", "only http and https"),
    ("http://evil.example/v1", "not on the outbound allow-list"),
    ("http://169.254.169.254/latest", "not on the outbound allow-list"),
    ("http://user:pw@127.0.0.1:9/v1", "user name or password"),
])
def test_a_refused_endpoint_cannot_be_picked(ml_staff, queued_tasks, base_url, message):
    # a row an administrator's form would refuse, written straight into the table
    ModelEndpoint.objects.create(name="bad", base_url=base_url, model="m")
    for field in ("teacher", "judge"):
        recipe = {**REGEN, "teacher": "bad"} if field == "teacher" else {**REGEN, "teacher": "nope", "judge": "bad"}
        response = _api(ml_staff).post("/api/datasets/", {"recipe": recipe, "sources": SOURCES}, format="json")
        assert response.status_code == 400
        errors = {e["path"]: e["message"] for e in response.json()["errors"]}
        assert message in errors[f"recipe.{field}"], errors
    assert "no model endpoint is named 'nope'" in errors["recipe.teacher"]
    assert not Dataset.objects.exists() and queued_tasks == []


# --- use time, on the worker's service -----------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("base_url, message", [
    ("file:///etc/passwd", "only http and https"),
    ("http://evil.example/v1", "not on the outbound allow-list"),
])
def test_an_endpoint_edited_after_the_build_was_queued_is_refused_when_used(ml_staff, listener, queued_tasks,
                                                                            cleanup_artifacts, base_url, message):
    _endpoint(listener)
    d = services.dataset_build_start(user=ml_staff, recipe={**REGEN, "teacher": "teacher"}, sources=SOURCES)
    ModelEndpoint.objects.filter(name="teacher").update(base_url=base_url)
    d = services.dataset_build_run(dataset_id=d.pk)
    assert d.status == "failed" and not d.artifact_path
    assert "recipe.teacher: model endpoint 'teacher' is refused: " in d.error and message in d.error
    assert listener.requests == []


@pytest.mark.django_db
def test_a_secret_missing_on_the_worker_fails_the_build_without_naming_it(ml_staff, listener, queued_tasks,
                                                                         cleanup_artifacts):
    ModelEndpoint.objects.create(name="teacher", base_url=listener.base_url, model="m", api_key_secret="GONE_KEY")
    d = services.dataset_build_start(user=ml_staff, recipe={**REGEN, "teacher": "teacher"}, sources=SOURCES)
    d = services.dataset_build_run(dataset_id=d.pk)
    assert d.status == "failed" and "secret holding its API key is not set" in d.error
    assert "GONE_KEY" not in d.error and listener.requests == []


@pytest.mark.django_db
def test_a_removed_endpoint_fails_the_build_at_its_path(ml_staff, listener, queued_tasks, cleanup_artifacts):
    _endpoint(listener)
    d = services.dataset_build_start(user=ml_staff, recipe={**REGEN, "teacher": "teacher"}, sources=SOURCES)
    ModelEndpoint.objects.filter(name="teacher").delete()
    d = services.dataset_build_run(dataset_id=d.pk)
    assert d.status == "failed" and "recipe.teacher: no model endpoint is named 'teacher'" in d.error


# --- picking by name: the compose page and the API ----------------------------------------------------------------


@pytest.mark.django_db
def test_compose_offers_endpoints_by_name(client, ml_staff, listener, queued_tasks, monkeypatch):
    monkeypatch.setenv(f"HAT_ENDPOINT_SECRET_{SECRET_NAME}", SECRET)
    _endpoint(listener, api_key_secret=SECRET_NAME)
    client.force_login(ml_staff)
    page = client.get("/datasets/new/").content.decode()
    assert '<option value="teacher">teacher · scripted</option>' in page
    assert SECRET_NAME not in page and SECRET not in page
    form = {"name": "regen", "build": "hsa", "seed": 0, "variants_per_sample": 1, "names": "train",
            "harness_pool_size": 0, "tiny_gold": 2, "tiny_gold_seed": 0, "label_mode": "regenerate",
            "teacher": "teacher"}
    response = client.post("/datasets/new/", {**form, "teacher": "http://evil.example/v1"})
    assert response.status_code == 400 and "teacher" in response.context["form"].errors
    response = client.post("/datasets/new/", {**form, "teacher": ""})
    assert response.status_code == 400 and "teacher" in response.context["form"].errors  # regenerate needs one
    assert not Dataset.objects.exists()
    response = client.post("/datasets/new/", form)
    assert response.status_code == 302
    d = Dataset.objects.get()
    assert (d.recipe["label_mode"], d.recipe["teacher"], d.recipe["judge"]) == ("regenerate", "teacher", None)
    page = client.get(f"/datasets/{d.pk}/").content.decode()
    assert 'data-testid="endpoint-teacher">teacher</code>' in page and SECRET_NAME not in page


@pytest.mark.django_db
def test_endpoint_list_api_shows_names_never_secrets(request, listener, monkeypatch):
    monkeypatch.setenv(f"HAT_ENDPOINT_SECRET_{SECRET_NAME}", SECRET)
    _endpoint(listener, api_key_secret=SECRET_NAME)
    ModelEndpoint.objects.create(name="bad", base_url="file:///etc/passwd", model="m")
    body = _api(request.getfixturevalue("ml_staff")).get("/api/model-endpoints/")
    assert body.status_code == 200
    rows = {r["name"]: r for r in body.json()}
    assert rows["teacher"]["usable"] is True and rows["bad"]["usable"] is False
    assert set(rows["teacher"]) == {"name", "model", "kind", "base_url", "is_default", "usable"}
    assert SECRET_NAME not in body.content.decode() and SECRET not in body.content.decode()
    for role, status in (("operator", 403), ("outsider", 403)):
        assert _api(request.getfixturevalue(role)).get("/api/model-endpoints/").status_code == status
    assert APIClient().get("/api/model-endpoints/").status_code == 401


# --- old recipes -------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_old_recipes_are_scrubbed_still_display_and_cannot_be_built_again(client, ml_staff, queued_tasks):
    from django.apps import apps

    old = {**REGEN, "teacher": {"base_url": "http://127.0.0.1:9/v1", "model": "old-teacher",
                                "api_key_env": "HAT_SECRET_KEY"}, "judge": None}
    d = Dataset.objects.create(name="old", kind="hsa", recipe=old, sources=SOURCES, status="succeeded",
                               created_by=ml_staff)
    fixed = Dataset.objects.create(name="fixed", kind="fixed_harness", recipe={}, sources=SOURCES,
                                   created_by=ml_staff)
    migration = importlib.import_module("training_jobs.migrations.0008_recipe_endpoint_names")
    migration.forwards(apps, None)
    d.refresh_from_db()
    assert d.recipe["teacher"] == {"base_url": "http://127.0.0.1:9/v1", "model": "old-teacher",
                                   "legacy_endpoint": True}
    assert Dataset.objects.get(pk=fixed.pk).recipe == {}
    client.force_login(ml_staff)
    page = client.get(f"/datasets/{d.pk}/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "written out in an old recipe" in text and "HAT_SECRET_KEY" not in text
    assert _api(ml_staff).get(f"/api/datasets/{d.pk}/").json()["recipe"]["teacher"]["model"] == "old-teacher"
    response = _api(ml_staff).post("/api/datasets/", {"recipe": d.recipe, "sources": SOURCES}, format="json")
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "recipe.teacher"


# --- the command line ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_build_command_takes_endpoints_by_name(tmp_path, listener, monkeypatch):
    def run(*args):
        out = io.StringIO()
        call_command("build_hsa_dataset", "--out", str(tmp_path / "ds"), "--scenarios", "", "--tiny-gold", "1",
                     "--variants", "1", "--operators", "", "--no-progress", *args, stdout=out)
        return out.getvalue()

    with pytest.raises(CommandError, match="recipe.teacher: no model endpoint is named 'nope'"):
        run("--teacher-endpoint", "nope")
    ModelEndpoint.objects.create(name="evil", base_url="http://evil.example/v1", model="m")
    with pytest.raises(CommandError, match="not on the outbound allow-list"):
        run("--teacher-endpoint", "evil")
    monkeypatch.setenv(f"HAT_ENDPOINT_SECRET_{SECRET_NAME}", SECRET)
    _endpoint(listener, api_key_secret=SECRET_NAME)
    _answer_right(listener)
    text = run("--teacher-endpoint", "teacher")
    assert "wrote " in text and listener.headers
    assert {h["authorization"] for h in listener.headers} == {f"Bearer {SECRET}"}
    stored = (tmp_path / "ds" / "recipe.json").read_text()
    assert json.loads(stored)["teacher"] == "teacher" and SECRET not in stored and SECRET_NAME not in stored


# --- end to end: an administrator's endpoint, a real Celery worker -----------------------------------------------


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_a_real_build_sends_the_secret_only_to_the_endpoint(client, ml_staff, listener, monkeypatch,
                                                            django_user_model, cleanup_artifacts):
    from tests.conftest import start_worker, stop_worker
    from training_jobs import tasks

    # the administrator: the secret is in the environment of the web and worker hosts; the form offers its name
    monkeypatch.setenv(f"HAT_ENDPOINT_SECRET_{SECRET_NAME}", SECRET)
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    response = client.post("/admin/streams/modelendpoint/add/", {
        "name": "teacher", "kind": "vllm", "base_url": listener.base_url, "model": "scripted",
        "api_key_secret": SECRET_NAME, "timeout_s": "5", "connect_timeout_s": "1"})
    assert response.status_code == 302, response.content.decode()[:2000]
    _answer_right(listener)

    # a worker of its own on a queue of its own (a session worker elsewhere has not got the secret)
    queue = f"secrets-{settings.DATABASES['default']['NAME']}"
    send = tasks.dataset_build.apply_async
    monkeypatch.setattr(tasks.dataset_build, "apply_async",
                        lambda args, task_id=None, **kw: send(args=args, queue=queue, task_id=task_id))
    proc, log = start_worker(queue, log_name="test-worker-secrets.log")
    try:
        response = _api(ml_staff).post("/api/datasets/", {"recipe": {**REGEN, "teacher": "teacher"},
                                                          "sources": SOURCES}, format="json")
        assert response.status_code == 201, response.json()
        dataset_id = response.json()["id"]
        deadline = time.monotonic() + 120
        while (d := Dataset.objects.get(pk=dataset_id)).is_active:
            assert time.monotonic() < deadline, f"timed out: {d.status} {d.error}"
            time.sleep(0.2)
    finally:
        stop_worker(proc, log)
    assert d.status == "succeeded", d.error
    assert (d.stats["label_mode"], d.stats["rows"], d.stats["regenerated"]) == ("regenerate", 1, 1), d.stats
    # the worker read the secret and sent it to the administrator's endpoint, and only there
    assert listener.headers and {h.get("authorization") for h in listener.headers} == {f"Bearer {SECRET}"}

    # ... and it is nowhere else: the stored recipe, the API, the page, the audit trail, the worker's log
    api = _api(ml_staff).get(f"/api/datasets/{dataset_id}/").content.decode()
    client.force_login(ml_staff)
    page = client.get(f"/datasets/{dataset_id}/").content.decode()
    audit = json.dumps([e.data for e in AuditEvent.objects.filter(scope=f"dataset:{dataset_id}")])
    worker_log = open(log.name, encoding="utf-8").read()
    recipe_file = (services.datasets_dir() / dataset_id / "recipe.json").read_text()
    for where, text in (("recipe", json.dumps(d.recipe)), ("api", api), ("page", page), ("audit", audit),
                        ("log", worker_log), ("recipe.json", recipe_file), ("error", d.error)):
        assert SECRET not in text, where
        if where != "log":
            assert SECRET_NAME not in text, where
    assert d.recipe["teacher"] == "teacher" and 'data-testid="endpoint-teacher">teacher</code>' in page


@pytest.mark.django_db
def test_a_build_that_keeps_no_row_fails_saying_why(ml_staff, listener, queued_tasks, cleanup_artifacts):
    _endpoint(listener)
    listener.add(reply("Lovely question, grab it now!"))  # then nothing: the retry the hooks ask for fails
    d = services.dataset_build_start(user=ml_staff, recipe={**REGEN, "teacher": "teacher"}, sources=SOURCES)
    d = services.dataset_build_run(dataset_id=d.pk)
    assert d.status == "failed" and d.error == "ValueError: no row was kept (teacher_model_error 1)"
    assert not d.artifact_path and len(listener.requests) >= 1
