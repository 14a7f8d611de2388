"""Dataset pages: who may see and do what (403 for every role without the permission, 404 for unknown ids), the
compose-recipe form (launch, located errors on the fields, nothing saved when invalid), the job page and its
htmx fragment, cancel, and the sample browser (semantic diff, target before/after relabelling)."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import main_part
from training_jobs import services
from training_jobs.models import Dataset
from training_jobs.schemas import Sources

pytestmark = pytest.mark.django_db

SOURCES = {"scenarios": ["compliance-traps"], "demo_manifests": ["skincare_v1"], "max_samples": 8}
RECIPE = {"name": "views", "seed": 2, "variants_per_sample": 2, "harness_pool_size": 4,
          "operators": [{"name": "rename_tools", "probability": 1.0, "settings": {"share": 1.0}},
                        {"name": "rename_skills", "probability": 1.0, "settings": {"share": 1.0}},
                        {"name": "change_prompt_layout", "probability": 1.0}]}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """One small HSA dataset folder, built once for the module (no database needed)."""
    from training_jobs.hsa.dataset import Recipe

    out = tmp_path_factory.mktemp("hsa") / "ds"
    result = services.build_artifact(Sources(**SOURCES).collect(), out, kind="hsa", recipe=Recipe(**RECIPE))
    return out, result


@pytest.fixture
def queued_tasks(monkeypatch):
    sent = []
    from training_jobs import tasks

    monkeypatch.setattr(tasks.dataset_build, "apply_async", lambda args, queue, task_id: sent.append(args[0]))
    return sent


@pytest.fixture
def done(ml_staff, artifact):
    out, result = artifact
    return Dataset.objects.create(name="views", kind="hsa", recipe=RECIPE, sources=SOURCES, created_by=ml_staff,
                                  status="succeeded", stats=result.stats.to_dict(), sample_count=8,
                                  row_counts={"train": result.stats.rows}, artifact_path=str(out),
                                  progress_done=16, progress_total=16)


@pytest.fixture
def running(ml_staff):
    return Dataset.objects.create(name="running", kind="hsa", recipe=RECIPE, sources=SOURCES, created_by=ml_staff,
                                  status="running", progress_done=5, progress_total=16, stage="building rows")


def _pages(d) -> dict[str, str]:
    return {"list": "/datasets/", "detail": f"/datasets/{d.pk}/", "samples": f"/datasets/{d.pk}/samples/",
            "sample": f"/datasets/{d.pk}/samples/0/"}


# --- who may do what -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("role, status", [("ml_staff", 200), ("manager", 200), ("reviewer", 403),
                                          ("operator", 403), ("outsider", 403)])
def test_reading_pages_by_role(request, client, done, role, status):
    client.force_login(request.getfixturevalue(role))
    for name, url in _pages(done).items():
        assert client.get(url).status_code == status, name


@pytest.mark.parametrize("role, status", [("ml_staff", 200), ("manager", 403), ("reviewer", 403),
                                          ("operator", 403), ("outsider", 403)])
def test_composing_by_role(request, client, role, status, queued_tasks):
    client.force_login(request.getfixturevalue(role))
    assert client.get("/datasets/new/").status_code == status
    response = client.post("/datasets/new/", {"name": "x", "build": "hsa", "seed": 0, "variants_per_sample": 1,
                                              "names": "train", "harness_pool_size": 1, "tiny_gold": 3,
                                              "tiny_gold_seed": 0})
    assert response.status_code == (302 if status == 200 else status)
    assert Dataset.objects.exists() == (status == 200)


@pytest.mark.parametrize("role", ["manager", "reviewer", "operator", "outsider"])
def test_cancel_is_refused_without_the_build_permission(request, client, running, role):
    client.force_login(request.getfixturevalue(role))
    assert client.post(f"/datasets/{running.pk}/cancel/").status_code == 403
    running.refresh_from_db()
    assert not running.cancel_requested


def test_anonymous_is_sent_to_login(client, done):
    for url in [*_pages(done).values(), "/datasets/new/"]:
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_unknown_ids_are_404(client, ml_staff, done):
    client.force_login(ml_staff)
    missing = uuid.uuid4()
    for url in (f"/datasets/{missing}/", f"/datasets/{missing}/samples/", f"/datasets/{missing}/samples/0/"):
        assert client.get(url).status_code == 404, url
    assert client.post(f"/datasets/{missing}/cancel/").status_code == 404
    assert client.get(f"/datasets/{done.pk}/samples/{done.rows}/").status_code == 404  # past the last row
    assert client.get("/datasets/not-a-uuid/").status_code == 404


def test_samples_of_an_unfinished_build(client, ml_staff, running):
    client.force_login(ml_staff)
    response = client.get(f"/datasets/{running.pk}/samples/")
    assert response.status_code == 200 and "No samples yet" in response.content.decode()
    assert client.get(f"/datasets/{running.pk}/samples/0/").status_code == 404


def test_nav_link_for_roles_that_see_datasets(client, manager, reviewer):
    client.force_login(manager)
    assert 'href="/datasets/"' in client.get("/").content.decode()
    client.force_login(reviewer)
    assert 'href="/datasets/"' not in client.get("/").content.decode()


# --- compose -------------------------------------------------------------------------------------------------------


def _form(**over) -> dict:
    data = {"name": "demo", "build": "both", "seed": 0, "variants_per_sample": 2, "names": "train",
            "harness_pool_size": 8, "scenarios": ["compliance-traps"], "demo_manifests": ["skincare_v1"],
            "tiny_gold": 0, "tiny_gold_seed": 0, "max_samples": 10,
            "op_rename_tools": "on", "p_rename_tools": "0.7", "op_rename_skills": "on", "p_rename_skills": "0.5"}
    data.update(over)
    return data


def test_compose_launches_hsa_and_baseline(client, ml_staff, django_capture_on_commit_callbacks, queued_tasks):
    client.force_login(ml_staff)
    page = client.get("/datasets/new/").content.decode()
    assert "synthesise_hook_correction" in page and 'name="p_rename_tools"' in page
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/datasets/new/", _form())
    d = Dataset.objects.get(kind="hsa")
    assert response.status_code == 302 and response["Location"] == f"/datasets/{d.pk}/"
    assert [(o["name"], o["probability"]) for o in d.recipe["operators"]] == [("rename_skills", 0.5),
                                                                             ("rename_tools", 0.7)]
    assert d.recipe["variants_per_sample"] == 2 and d.sources["max_samples"] == 10
    assert d.baselines.get().kind == "fixed_harness"
    assert queued_tasks == [str(d.pk), str(d.baselines.get().pk)]


def test_compose_fixed_harness_only(client, ml_staff, queued_tasks):
    client.force_login(ml_staff)
    assert client.post("/datasets/new/", _form(build="fixed_harness")).status_code == 302
    assert list(Dataset.objects.values_list("kind", flat=True)) == ["fixed_harness"]


def test_compose_errors_land_on_their_fields_and_save_nothing(client, ml_staff, queued_tasks):
    client.force_login(ml_staff)
    response = client.post("/datasets/new/", _form(p_rename_tools="1.5", variants_per_sample="0",
                                                   scenarios=[], tiny_gold="0"))
    assert response.status_code == 400
    form = response.context["form"]
    assert "p_rename_tools" in form.errors and "variants_per_sample" in form.errors
    assert any("no samples" in e for e in form.non_field_errors())
    assert "recipe.operators[1].probability" in response.content.decode()
    assert not Dataset.objects.exists() and queued_tasks == []


def test_compose_recipe_json(client, ml_staff, queued_tasks):
    client.force_login(ml_staff)
    response = client.post("/datasets/new/", _form(recipe_json="{not json"))
    assert response.status_code == 400 and "recipe_json" in response.context["form"].errors
    response = client.post("/datasets/new/", _form(recipe_json='{"operators": [{"name": "nope"}]}'))
    assert response.status_code == 400
    assert any("recipe.operators[0]" in e for e in response.context["form"].errors["recipe_json"])
    assert not Dataset.objects.exists()
    ok = '{"name": "from-json", "variants_per_sample": 1, "operators": [{"name": "rename_tools", ' \
         '"probability": 1, "settings": {"share": 1.0}}]}'
    assert client.post("/datasets/new/", _form(recipe_json=ok, build="hsa")).status_code == 302
    assert Dataset.objects.get().recipe["operators"][0]["settings"] == {"share": 1.0}


# --- job page, list, cancel ----------------------------------------------------------------------------------------


def test_job_page_polls_while_running(client, ml_staff, running):
    client.force_login(ml_staff)
    page = client.get(f"/datasets/{running.pk}/").content.decode()
    assert 'hx-trigger="every 1s"' in page and 'data-testid="cancel"' in page and "5 / 16 rows" in page
    fragment = client.get(f"/datasets/{running.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.lstrip().startswith('<div id="job"') and "<html" not in fragment
    listing = client.get("/datasets/").content.decode()
    assert 'hx-trigger="every 2s"' in listing and "building rows" in listing


def test_finished_job_shows_statistics_and_stops_polling(client, manager, done):
    client.force_login(manager)
    page = main_part(client.get(f"/datasets/{done.pk}/").content.decode())
    assert "hx-trigger" not in page and 'data-testid="cancel"' not in page  # a manager cannot cancel anyway
    assert 'data-testid="operator-stats"' in page
    for name in ("rename_tools", "rename_skills", "change_prompt_layout"):
        assert f"<code>{name}</code>" in page
    assert "hx-trigger" not in main_part(client.get("/datasets/").content.decode())


def test_failed_job_shows_its_cause(client, ml_staff):
    d = Dataset.objects.create(name="f", created_by=ml_staff, status="failed", error="OSError: disk full")
    client.force_login(ml_staff)
    assert "OSError: disk full" in client.get(f"/datasets/{d.pk}/").content.decode()


def test_cancel_from_the_page(client, ml_staff, running, done):
    client.force_login(ml_staff)
    response = client.post(f"/datasets/{running.pk}/cancel/")
    assert response.status_code == 302
    running.refresh_from_db()
    assert running.cancel_requested and running.status == "cancelling"  # it stops at its next step
    response = client.post(f"/datasets/{done.pk}/cancel/")
    assert response.status_code == 409 and "only a queued or running build" in response.content.decode()
    assert client.get(f"/datasets/{running.pk}/cancel/").status_code == 405


# --- the sample browser ----------------------------------------------------------------------------------------------


def test_sample_list_pages_rows(client, manager, done):
    client.force_login(manager)
    response = client.get(f"/datasets/{done.pk}/samples/")
    assert response.status_code == 200
    rows = response.context["rows"]
    assert [r["index"] for r in rows] == list(range(min(25, done.rows)))
    assert {"sample_id", "variant", "operators", "harness_hash"} <= set(rows[0])


def test_sample_page_shows_diff_and_relabelled_target(client, manager, done, artifact):
    client.force_login(manager)
    from datasets import load_from_disk

    out, _result = artifact
    index = next(i for i, r in enumerate(load_from_disk(str(out / "dataset"))) if "rename_tools" in r["operators"])
    response = client.get(f"/datasets/{done.pk}/samples/{index}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="diff"' in html and 'data-component="tool"' in html  # the semantic diff partial
    ctx = response.context
    before = [s for s in ctx["before"] if s["kind"] == "tool"]
    after = [s for s in ctx["after"] if s["kind"] == "tool"]
    assert before and len(before) == len(after)
    assert [s["name"] for s in before] != [s["name"] for s in after]  # renamed by the rename map
    assert [s["kind"] for s in ctx["before"]] == [s["kind"] for s in ctx["after"] if s["kind"] != "retry"]
    assert ctx["base_yaml"] and ctx["augmented_yaml"] and ctx["base_yaml"] != ctx["augmented_yaml"]
    assert ctx["after"][-1]["kind"] == "reply"
