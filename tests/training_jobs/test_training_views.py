"""Training pages and the model registry: who may see and do what (403 for every role without the permission, the
login page for anonymous visitors, 404 for unknown ids), the launch form (a queued job on the gpu queue; located
errors on their boxes and nothing saved), the job page (curves, latest numbers, log, polling only while active),
cancel and resume (409 when the status does not allow it), the registry with lineage, the nav links, the curve
function, seed_demo's base model and the admin.

Finished jobs are rows made here (progress points included): no training runs in these tests."""

from __future__ import annotations

import math
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from tests.conftest import main_part
from training_jobs import services, tasks
from training_jobs.models import Dataset, TrainedModel, TrainingJob
from training_jobs.selectors import duration_text, latest_numbers, metric_curve, model_lineages

pytestmark = pytest.mark.django_db

CONFIG = {"max_steps": 6, "per_device_batch_size": 2, "learning_rate": 5e-3, "save_steps": 3, "max_length": 1024}


def _points(steps: int, *, upto: int | None = None) -> list[dict]:
    """Progress points as the reporter stores them, and the trainer's summary point (no loss) at the end."""
    out = [{"step": s, "max_steps": steps, "loss": round(2.5 / s, 4), "learning_rate": 5e-3 * (1 - s / (steps + 1)),
            "grad_norm": 1.5, "num_tokens": 300.0 * s, "tokens_per_s": 420.0, "samples_per_s": 1.25,
            "eta_s": 4.0 * (steps - s), "t": 1700000000 + s} for s in range(1, (upto or steps) + 1)]
    if upto is None:
        out.append({"step": steps, "max_steps": steps, "train_loss": 1.1, "train_runtime": 24.0,
                    "t": 1700000000 + steps + 1})
    return out


@pytest.fixture
def queued_jobs(monkeypatch):
    sent = []
    monkeypatch.setattr(tasks.training_job, "apply_async", lambda args, queue, task_id: sent.append((args, queue)))
    return sent


@pytest.fixture
def base(db):
    return services.demo_base_model()


def _ready_dataset(user, tmp_path, kind: str, name: str) -> Dataset:
    """A succeeded dataset row whose artifact folder exists: what the launch form and the service accept."""
    folder = tmp_path / name
    folder.mkdir()
    return Dataset.objects.create(name=name, kind=kind, created_by=user, status="succeeded", artifact_path=str(folder),
                                  row_counts={"train": 32}, progress_done=32, progress_total=32)


@pytest.fixture
def hsa(ml_staff, tmp_path):
    return _ready_dataset(ml_staff, tmp_path, "hsa", "hsa-ready")


@pytest.fixture
def fixed(ml_staff, tmp_path):
    return _ready_dataset(ml_staff, tmp_path, "fixed_harness", "fixed-ready")


@pytest.fixture
def finished(ml_staff, hsa, base):
    """A succeeded HSA-SFT job and the model it registered."""
    job = TrainingJob.objects.create(
        name="sft-done", kind="sft", status="succeeded", config=CONFIG, dataset=hsa, base_model=base,
        created_by=ml_staff, progress_done=6, progress_total=6, metrics=_points(6), worker_host="gpu-host-1",
        log_tail="06:00:01 training from step 0 to 6\n06:00:30 done", output_dir="/tmp/runs/x")
    model = TrainedModel.objects.create(name="sft-done", kind="sft", path="/tmp/runs/x/sft/final", parent=base,
                                        job=job, dataset=hsa, config=CONFIG, metrics={"train_loss": 1.1},
                                        created_by=ml_staff)
    job.result = {"steps": 6, "model": str(model.pk)}
    job.save(update_fields=["result"])
    return job


@pytest.fixture
def running(ml_staff, hsa, base):
    return TrainingJob.objects.create(name="sft-running", kind="sft", status="running", config=CONFIG, dataset=hsa,
                                      base_model=base, created_by=ml_staff, progress_done=3, progress_total=6,
                                      metrics=_points(6, upto=3), stage="training", worker_host="gpu-host-2")


@pytest.fixture
def failed(ml_staff, hsa, base):
    return TrainingJob.objects.create(name="sft-failed", kind="sft", status="failed", config=CONFIG, dataset=hsa,
                                      base_model=base, created_by=ml_staff, progress_done=2, progress_total=6,
                                      metrics=_points(6, upto=2), error="FileNotFoundError: dataset gone")


def _model(finished) -> TrainedModel:
    return TrainedModel.objects.get(job=finished)


# --- who may do what -----------------------------------------------------------------------------------------------

ROLES = ["ml_staff", "manager", "reviewer", "operator", "outsider"]


def _training_pages(job) -> list[str]:
    return ["/training/", f"/training/{job.pk}/", "/training/new/"]


def _model_pages(model) -> list[str]:
    return ["/models/", f"/models/{model.pk}/"]


@pytest.mark.parametrize("role, training, models", [("ml_staff", 200, 200), ("manager", 403, 200),
                                                    ("reviewer", 403, 200), ("operator", 403, 403),
                                                    ("outsider", 403, 403)])
def test_pages_by_role(request, client, finished, role, training, models):
    client.force_login(request.getfixturevalue(role))
    for url in _training_pages(finished):
        assert client.get(url).status_code == training, url
    for url in _model_pages(_model(finished)):
        assert client.get(url).status_code == models, url


@pytest.mark.parametrize("role", ["manager", "reviewer", "operator", "outsider"])
def test_launch_cancel_and_resume_are_refused_without_the_run_permission(request, client, running, failed, hsa, base,
                                                                         role, queued_jobs):
    client.force_login(request.getfixturevalue(role))
    before = TrainingJob.objects.count()
    assert client.post("/training/new/", _form(hsa, base)).status_code == 403
    assert client.post(f"/training/{running.pk}/cancel/").status_code == 403
    assert client.post(f"/training/{failed.pk}/resume/").status_code == 403
    assert TrainingJob.objects.count() == before and queued_jobs == []
    assert {j.status for j in TrainingJob.objects.all()} == {"running", "failed"}


def test_anonymous_is_sent_to_login(client, finished):
    for url in [*_training_pages(finished), *_model_pages(_model(finished))]:
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], url
    response = client.post(f"/training/{finished.pk}/resume/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_unknown_ids_are_404(client, ml_staff):
    client.force_login(ml_staff)
    missing = uuid.uuid4()
    for url in (f"/training/{missing}/", f"/models/{missing}/", "/training/not-a-uuid/"):
        assert client.get(url).status_code == 404, url
    for url in (f"/training/{missing}/cancel/", f"/training/{missing}/resume/"):
        assert client.post(url).status_code == 404, url


def test_nav_links_follow_the_roles(client, ml_staff, manager, reviewer, operator):
    expected = {ml_staff: (True, True), manager: (False, True), reviewer: (False, True), operator: (False, False)}
    for user, (training, models) in expected.items():
        client.force_login(user)
        html = client.get("/").content.decode()
        assert ('href="/training/"' in html) == training, user
        assert ('href="/models/"' in html) == models, user


# --- launching --------------------------------------------------------------------------------------------------------


def _form(ds, model, **over) -> dict:
    data = {"kind": "sft", "dataset": str(ds.pk), "base_model": str(model.pk), "name": "", "max_steps": 6,
            "per_device_batch_size": 2, "learning_rate": "0.005", "lr_scheduler": "cosine", "warmup_ratio": "0.05",
            "save_steps": 3, "max_length": 1024, "device": "cpu", "threads": 2, "seed": 0,
            "lora_r": 16, "lora_alpha": 32, "lora_dropout": "0.05", "config_json": ""}
    data.update(over)
    return data


def test_launch_form_lists_ready_datasets_of_the_stage_and_the_registry(client, ml_staff, hsa, fixed, base):
    Dataset.objects.create(name="still-building", kind="hsa", created_by=ml_staff, status="running")
    client.force_login(ml_staff)
    response = client.get("/training/new/")
    assert [k for k, _ in response.context["form"].fields["kind"].choices] == ["sft", "baseline_sft", "distill", "rl",
                                                                            "pipeline"]
    page = response.content.decode()
    assert 'name="max_steps"' in page and "Optimizer steps of this stage." in page  # the field's description
    assert 'value="40"' in page  # SFTStageConfig's default
    assert "hsa-ready" in page and "fixed-ready" not in page and "still-building" not in page
    assert f'value="{base.pk}"' in page
    # preselected: the newest ready dataset of the stage and the newest base model
    assert f'<option value="{hsa.pk}" selected>' in page and f'<option value="{base.pk}" selected>' in page
    baseline = client.get("/training/new/?kind=baseline_sft").content.decode()
    assert "fixed-ready" in baseline and "hsa-ready" not in baseline
    assert f'<option value="{fixed.pk}" selected>' in baseline
    # the stage radios swap the dataset select and the config in with htmx
    fragment = client.get("/training/new/?kind=baseline_sft", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.lstrip().startswith('<div class="split" id="form-body"') and "fixed-ready" in fragment
    assert "<html" not in fragment and 'name="max_steps"' in fragment


def test_launch_queues_a_job_on_the_gpu_queue(client, ml_staff, hsa, base, queued_jobs,
                                              django_capture_on_commit_callbacks):
    client.force_login(ml_staff)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/training/new/", _form(hsa, base, name="first", lora="on", lora_r=8,
                                                       config_json='{"gradient_accumulation_steps": 2}'))
    job = TrainingJob.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/training/{job.pk}/"
    assert queued_jobs == [((str(job.pk),), "gpu")]
    assert (job.name, job.kind, job.status, job.dataset, job.base_model) == ("first", "sft", "queued", hsa, base)
    assert job.config["max_steps"] == 6 and job.config["learning_rate"] == 0.005
    assert job.config["gradient_accumulation_steps"] == 2 and job.config["lora"]["r"] == 8


def test_launch_baseline(client, ml_staff, fixed, base, queued_jobs):
    client.force_login(ml_staff)
    response = client.post("/training/new/", _form(fixed, base, kind="baseline_sft"))
    assert response.status_code == 302
    job = TrainingJob.objects.get()
    assert job.kind == "baseline_sft" and job.name == "Fixed-harness SFT (baseline) on fixed-ready"


def test_launch_the_pipeline_with_its_json_config(client, ml_staff, hsa, fixed, base, queued_jobs):
    client.force_login(ml_staff)
    page = client.get("/training/new/?kind=pipeline").content.decode()
    assert 'data-testid="config-json"' in page and 'name="max_steps"' not in page  # the whole config as JSON
    assert "&quot;distill&quot;" in page and "&quot;num_generations&quot;" in page  # prefilled with the defaults
    assert "hsa-ready" in page and "fixed-ready" not in page
    bad = client.post("/training/new/", {"kind": "pipeline", "dataset": str(hsa.pk), "base_model": str(base.pk),
                                         "config_json": '{"rl": {"num_generations": 1}}'})
    assert bad.status_code == 400 and "config.rl.num_generations" in bad.content.decode()
    assert not TrainingJob.objects.exists()
    ok = client.post("/training/new/", {"kind": "pipeline", "dataset": str(hsa.pk), "base_model": str(base.pk),
                                        "config_json": '{"sft": {"max_steps": 5}, "distill": null}'})
    job = TrainingJob.objects.get()
    assert ok.status_code == 302 and job.kind == "pipeline" and job.config["distill"] is None
    assert job.config["sft"]["max_steps"] == 5 and job.progress_total == 5 + job.config["rl"]["max_steps"]
    rl_page = client.get("/training/new/?kind=rl").content.decode()
    assert "hsa-ready" in rl_page and "fixed-ready" in rl_page  # RL rolls out over either dataset's samples


def test_launch_errors_land_on_their_fields_and_save_nothing(client, ml_staff, hsa, fixed, base, queued_jobs):
    client.force_login(ml_staff)
    response = client.post("/training/new/", _form(fixed, base, max_steps=0, lora="on", lora_dropout="1.5"))
    assert response.status_code == 400
    form = response.context["form"]
    assert set(form.errors) == {"max_steps", "dataset", "lora_dropout"}
    assert "HSA-SFT trains on" in form.errors["dataset"][0]
    html = response.content.decode()
    assert "config.max_steps" in html and 'data-testid="dataset-error"' in html
    # a rule across fields (bf16 needs a GPU) goes on the form; a key from the JSON box back onto the JSON box
    response = client.post("/training/new/", _form(hsa, base, bf16="on"))
    assert response.status_code == 400 and set(response.context["form"].errors) == {"__all__"}
    assert "bf16 needs device 'cuda'" in response.context["form"].non_field_errors()[0]
    response = client.post("/training/new/", _form(hsa, base, config_json='{"max_grad_norm": -1, "max_steps": 0}'))
    errors = response.context["form"].errors
    assert response.status_code == 400 and set(errors) == {"config_json"} and len(errors["config_json"]) == 2
    assert sorted(e.split(":")[0] for e in errors["config_json"]) == ["config.max_grad_norm", "config.max_steps"]
    # unknown ids reach the service and come back on their selects
    response = client.post("/training/new/", _form(hsa, base, dataset=str(uuid.uuid4()), base_model="nope"))
    assert set(response.context["form"].errors) == {"dataset", "base_model"}
    # what the form itself parses
    response = client.post("/training/new/", _form(hsa, base, max_steps="many", config_json="[1]"))
    assert response.status_code == 400 and set(response.context["form"].errors) == {"max_steps", "config_json"}
    assert not TrainingJob.objects.exists() and queued_jobs == []


# --- the job page --------------------------------------------------------------------------------------------------


def test_running_job_page_polls_and_shows_progress(client, ml_staff, running):
    client.force_login(ml_staff)
    html = client.get(f"/training/{running.pk}/").content.decode()
    # redrawn when the job's WebSocket says progress was stored, polled slowly as a fallback
    assert 'hx-trigger="job-progress from:body, every 2s"' in html and f'data-live-ws="/ws/training/{running.pk}/"' in html
    assert 'data-testid="cancel"' in html and 'data-testid="resume"' not in html
    assert "step 3 / 6" in html and "about 12 s left" in html and "gpu-host-2" in html
    assert '<svg viewBox="0 0 480 180"' in html and 'data-testid="loss-curve"' in html
    assert 'data-testid="lr-curve"' in html and "<polyline" in html
    assert 'data-testid="number-loss"' in html and "0.8333" in html  # 2.5 / 3
    fragment = client.get(f"/training/{running.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.lstrip().startswith('<div id="job"') and "<html" not in fragment
    assert 'hx-trigger="job-progress from:body, every 2s"' in fragment
    listing = client.get("/training/").content.decode()
    assert 'hx-trigger="every 2s"' in listing and "sft-running" in listing


def test_finished_job_page_stops_polling_and_links_the_model(client, ml_staff, finished):
    client.force_login(ml_staff)
    html = client.get(f"/training/{finished.pk}/").content.decode()
    model = _model(finished)
    assert "hx-trigger" not in main_part(html) and 'data-testid="cancel"' not in html and 'data-testid="resume"' not in html
    assert f'href="/models/{model.pk}/"' in html and 'data-testid="model-link"' in html
    assert f'href="/datasets/{finished.dataset.pk}/"' in html
    assert "training from step 0 to 6" in html and "gpu-host-1" in html and "&quot;max_length&quot;: 1024" in html
    assert "left" not in html.split('data-testid="progress-text"')[1].split("</p>")[0]  # no ETA once done
    assert client.get(f"/training/{finished.pk}/", HTTP_HX_REQUEST="true").content.decode().count("hx-trigger") == 0
    assert "hx-trigger" not in main_part(client.get("/training/").content.decode())
    assert "0.4167" in html  # the last loss (2.5 / 6), not the summary point's train_loss


def test_failed_job_shows_its_cause_and_a_resume_button(client, ml_staff, failed):
    client.force_login(ml_staff)
    html = client.get(f"/training/{failed.pk}/").content.decode()
    assert "FileNotFoundError: dataset gone" in html and 'data-testid="resume"' in html
    assert "hx-trigger" not in main_part(html)


def test_cancel_and_resume_from_the_page(client, ml_staff, running, failed, finished, queued_jobs):
    client.force_login(ml_staff)
    response = client.post(f"/training/{running.pk}/cancel/")
    assert response.status_code == 302 and response["Location"] == f"/training/{running.pk}/"
    running.refresh_from_db()
    assert running.status == "cancelling" and running.cancel_requested
    assert "Cancelling…" in client.get(f"/training/{running.pk}/").content.decode()
    response = client.post(f"/training/{failed.pk}/resume/")
    assert response.status_code == 302
    failed.refresh_from_db()
    assert (failed.status, failed.resumes, failed.error) == ("queued", 1, "")
    response = client.post(f"/training/{finished.pk}/cancel/")
    assert response.status_code == 409 and "only a queued or running job can be cancelled" in response.content.decode()
    response = client.post(f"/training/{finished.pk}/resume/")
    assert response.status_code == 409 and "only a cancelled or failed job can be resumed" in response.content.decode()
    assert client.get(f"/training/{running.pk}/cancel/").status_code == 405


def test_a_manager_sees_the_model_but_not_the_job(client, manager, finished):
    client.force_login(manager)
    html = client.get(f"/models/{_model(finished).pk}/").content.decode()
    assert "sft-done" in html and f'href="/training/{finished.pk}/"' not in html  # the job page would be a 403
    assert f'href="/datasets/{finished.dataset.pk}/"' in html  # managers see datasets


# --- the registry --------------------------------------------------------------------------------------------------


def test_registry_lists_every_model_with_its_lineage(client, reviewer, finished, base, ml_staff):
    sft = _model(finished)
    rl = TrainedModel.objects.create(name="rl-on-top", kind="rl", path="/tmp/runs/y", parent=sft, created_by=ml_staff)
    client.force_login(reviewer)
    response = client.get("/models/")
    rows = {r["model"].pk: [m.pk for m in r["lineage"]] for r in response.context["rows"]}
    assert rows == {base.pk: [base.pk], sft.pk: [base.pk, sft.pk], rl.pk: [base.pk, sft.pk, rl.pk]}
    html = response.content.decode()
    assert html.count('data-testid="model-row"') == 3 and f'href="/models/{base.pk}/"' in html
    assert f'href="/datasets/{finished.dataset.pk}/"' not in html  # reviewers do not see datasets
    from streams.models import ModelEndpoint

    rl.endpoint = ModelEndpoint.objects.create(name="model-rl", base_url="http://127.0.0.1:8123/v1", model="rl")
    rl.save(update_fields=["endpoint"])
    detail = client.get(f"/models/{rl.pk}/")
    assert [m.pk for m in detail.context["lineage"]] == [base.pk, sft.pk, rl.pk]
    assert 'data-testid="endpoint">model-rl<' in detail.content.decode()
    page = client.get(f"/models/{sft.pk}/").content.decode()
    assert "/tmp/runs/x/sft/final" in page and "train_loss" in page and "rl-on-top" in page
    assert "vllm.entrypoints.openai.api_server --model /tmp/runs/x/sft/final" in page and 'data-testid="endpoint"' not in page


def test_model_lineages_cost_one_query_per_generation(django_assert_num_queries, base, ml_staff):
    a = TrainedModel.objects.create(name="a", kind="sft", path="/a", parent=base)
    b = TrainedModel.objects.create(name="b", kind="rl", path="/b", parent=a)
    c = TrainedModel.objects.create(name="c", kind="rl", path="/c", parent=b)
    page = list(TrainedModel.objects.filter(pk__in=[c.pk]))
    with django_assert_num_queries(3):  # b, then a, then base
        lineages = model_lineages(page)
    assert [m.name for m in lineages[c.pk]] == [base.name, "a", "b", "c"]


# --- the curve and the numbers (pure) -----------------------------------------------------------------------------


def test_metric_curve_maps_points_into_the_box():
    points = [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0}, {"step": 4, "loss": 1.0},
              {"step": 4, "train_loss": 9.0}]  # the summary point has no loss
    curve = metric_curve(points, "loss", width=200, height=100, pad=(10, 10, 10, 10))
    assert curve.count == 3 and curve.x_max == 4 and (curve.y_min, curve.y_max) == (1.0, 3.0)
    # x: 10 + step/4 * 180; y: 10 + (1 - (v - 1) / 2) * 80 (y grows downwards)
    assert curve.points == "55,10 100,50 190,90"
    assert (curve.last_x, curve.last_y, curve.last_value, curve.last_label) == (190, 90, 1.0, "1")
    # the schedule's length keeps room for the steps to come
    assert metric_curve(points, "loss", x_max=8, width=200, height=100, pad=(10, 10, 10, 10)).points \
        == "32.5,10 55,50 100,90"


def test_metric_curve_edge_cases():
    assert metric_curve([], "loss") is None
    assert metric_curve([{"step": 1, "train_loss": 2.0}], "loss") is None
    bad = [{"step": 1, "loss": math.nan}, {"step": 2, "loss": math.inf}, {"step": "3", "loss": 1.0},
           {"step": 4, "loss": True}]
    assert metric_curve(bad, "loss") is None
    # one point, a flat line: centred vertically
    one = metric_curve([{"step": 0, "loss": 2.0}], "loss", width=100, height=100, pad=(0, 0, 0, 0))
    assert one.points == "0,50" and (one.y_min, one.y_max) == (1.8, 2.2)
    zero = metric_curve([{"step": 5, "lr": 0.0}, {"step": 6, "lr": 0.0}], "lr", width=100, height=100,
                        pad=(0, 0, 0, 0))
    assert zero.points == "83.3,100 100,100" and (zero.y_min, zero.y_max) == (0.0, 1.0)  # warm-up starts at 0
    negative = metric_curve([{"step": 1, "reward": -2.0}], "reward", width=100, height=100, pad=(0, 0, 0, 0))
    assert negative.points == "100,50" and (negative.y_min, negative.y_max) == (-2.2, -1.8)
    # a resumed job logs steps after its checkpoint again: the later value wins, in step order
    resumed = [{"step": 1, "loss": 4.0}, {"step": 2, "loss": 3.0}, {"step": 3, "loss": 9.0}, {"step": 3, "loss": 2.0},
               {"step": 4, "loss": 1.0}]
    curve = metric_curve(resumed, "loss", width=100, height=100, pad=(0, 0, 0, 0))
    assert curve.count == 4 and curve.y_max == 4.0 and curve.points.split()[2] == "75,66.7"
    assert metric_curve([{"step": 1, "learning_rate": 4.5e-05}], "learning_rate").last_label == "4.5e-05"


def test_latest_numbers_and_durations():
    numbers = {n["key"]: n for n in latest_numbers(_points(4))}
    assert numbers["loss"]["text"] == "0.6250" and numbers["loss"]["step"] == 4  # not the summary point
    assert numbers["learning_rate"]["text"] == "0.001" and numbers["tokens_per_s"]["text"] == "420"
    assert numbers["samples_per_s"]["text"] == "1.25" and numbers["grad_norm"]["text"] == "1.500"
    assert latest_numbers([{"step": 1, "loss": 2.0}]) == [{"key": "loss", "label": "Loss", "value": 2.0,
                                                            "text": "2.0000", "step": 1}]
    assert [duration_text(s) for s in (None, 0, 12.4, 95, 3725)] == ["", "0 s", "12 s", "1 min 35 s", "1 h 2 min"]


# --- seed_demo and the admin ---------------------------------------------------------------------------------------


def test_seed_demo_registers_the_demo_base_model_once(capsys):
    call_command("seed_demo", password="pw-for-tests-123")
    call_command("seed_demo", password="pw-for-tests-123")
    base = TrainedModel.objects.get(name__startswith="demo-tiny")
    assert base.kind == "base" and base.parent is None and (base.directory / "config.json").is_file()
    assert "Base model for training jobs: demo-tiny" in capsys.readouterr().out
    # the SmolLM2 base (built by make install) too, registered before demo-tiny: the tiny model stays the newest base
    # (the training form's default); the glow-gadget adapter of SmolLM2 is an adapter, not a base
    assert list(TrainedModel.objects.filter(is_adapter=False).order_by("-created_at").values_list(
        "name", flat=True)) == [base.name, "smollm2-135m (SmolLM2-135M-Instruct, built at install)"]
    assert list(TrainedModel.objects.filter(is_adapter=True).values_list("parent__name", flat=True)) == [
        "smollm2-135m (SmolLM2-135M-Instruct, built at install)"]


def test_admin_shows_jobs_and_models_read_only(client, finished):
    call_command("seed_demo")
    client.force_login(get_user_model().objects.get(username="admin"))
    admin = "/admin/training_jobs"
    for url in (f"{admin}/trainingjob/", f"{admin}/trainingjob/{finished.pk}/change/", f"{admin}/trainedmodel/",
                f"{admin}/trainedmodel/{_model(finished).pk}/change/"):
        assert client.get(url).status_code == 200, url
    response = client.post(f"/admin/training_jobs/trainingjob/{finished.pk}/change/", {"name": "renamed"})
    assert response.status_code == 403
    assert client.get("/admin/training_jobs/trainedmodel/add/").status_code == 403


@pytest.mark.django_db
def test_serve_and_stop_buttons_queue_the_worker_tasks(client, ml_staff, manager, monkeypatch,
                                                       django_capture_on_commit_callbacks):
    """Serve launches the default CPU serve profile on the serve queue; Stop goes to the queue of the host that
    runs the server (streams.services.serving)."""
    from streams import serving_tasks
    from streams.models import ModelEndpoint, ServerInstance
    from training_jobs import services

    sent = []
    monkeypatch.setattr(serving_tasks.server_run, "apply_async",
                        lambda args, queue: sent.append(("serve", args, queue)))
    monkeypatch.setattr(serving_tasks.server_stop, "apply_async",
                        lambda args, queue: sent.append(("stop", args, queue)))
    model = services.demo_base_model()
    client.force_login(manager)  # sees the registry, may not serve
    page = client.get(f"/models/{model.pk}/").content.decode()
    assert 'data-testid="serve"' not in page
    assert client.post(f"/models/{model.pk}/serve/").status_code == 403
    client.force_login(ml_staff)
    assert 'data-testid="serve"' in client.get(f"/models/{model.pk}/").content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/models/{model.pk}/serve/", follow=True)
    assert response.redirect_chain == [(f"/models/{model.pk}/", 302)]  # a reload does not serve it again
    assert "Starting a local server" in response.content.decode()
    instance = ServerInstance.objects.get(model=model)
    assert instance.profile.name == "cpu-default" and instance.profile.spec["kind"] == "vllm"
    # a serve worker on host-b started it and registered its endpoint (streams.services.serving.server_run)
    endpoint = ModelEndpoint.objects.create(name="cpu-default-x", base_url="http://127.0.0.1:9/v1", model="m")
    ServerInstance.objects.filter(pk=instance.pk).update(status="ready", host="host-b", pid=1, endpoint=endpoint)
    model.endpoint, model.serve_host = endpoint, "host-b"
    model.save(update_fields=["endpoint", "serve_host"])
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/models/{model.pk}/serve/", {"stop": "1"}, follow=True)
    assert response.redirect_chain == [(f"/models/{model.pk}/", 302)]
    assert "Stopping its server" in response.content.decode()
    assert sent == [("serve", (str(instance.pk),), "serve"), ("stop", (str(instance.pk),), "serve.host-b")]
    assert ServerInstance.objects.get(pk=instance.pk).status == "stopping"  # stopped once host-b ended it
    assert client.post("/models/0b5b4a47-2f0e-4a39-9d8b-3c4f5c1d2e3f/serve/").status_code == 404


def test_rl_jobs_draw_their_reward_curves(client, ml_staff, base):
    points = [{"step": i, "loss": 0.1, "learning_rate": 1e-3, "reward": 0.2 * i, "rewards/accuracy/mean": 0.5,
               "rewards/tool_rationality/mean": 0.1 * i, "t": float(i)} for i in range(1, 4)]
    job = TrainingJob.objects.create(name="rl", kind="rl", config={}, base_model=base, created_by=ml_staff,
                                     status="running", progress_done=3, progress_total=5, metrics=points)
    client.force_login(ml_staff)
    html = client.get(f"/training/{job.pk}/").content.decode()
    assert 'data-testid="reward-curve-reward"' in html and 'data-testid="reward-curve-accuracy"' in html
    assert 'data-testid="reward-curve-tool_rationality"' in html
    assert 'data-testid="reward-curve-effectiveness"' not in html  # never logged: no empty chart


# --- comparing jobs ----------------------------------------------------------------------------------------------


def test_compare_draws_the_jobs_on_shared_axes_with_their_numbers(client, ml_staff, finished, running, failed):
    client.force_login(ml_staff)
    listing = client.get("/training/").content.decode()
    assert listing.count('data-testid="compare-pick"') == 3 and 'form="compare-form"' in listing
    response = client.get("/training/compare/", {"jobs": [str(finished.pk), str(running.pk)]})
    assert response.status_code == 200
    page = response.content.decode()
    rows = response.context["rows"]
    assert [r["job"].pk for r in rows] == [finished.pk, running.pk]  # in the order asked
    assert rows[0]["loss"] == round(2.5 / 6, 4) and rows[0]["model"] == _model(finished)
    assert rows[1]["loss"] == round(2.5 / 3, 4) and rows[1]["model"] is None
    assert rows[0]["loss_stage"] == ""  # the points of a one-stage job name no stage
    loss = next(c for c in response.context["charts"] if c["key"] == "loss")
    first, second = (s["curve"] for s in loss["series"])
    # one box: the same y range for both, x to the longest schedule
    assert (first.y_min, first.y_max, first.x_max) == (second.y_min, second.y_max, second.x_max) == (round(2.5 / 6, 4), 2.5, 6)
    assert page.count('class="line series-') == 2 * len(response.context["charts"])
    assert [c["key"] for c in response.context["charts"]] == ["loss", "learning_rate"]  # no RL reward points here


def test_compare_refuses_too_few_or_malformed_ids_and_404s_unknown_jobs(client, ml_staff, finished, running):
    client.force_login(ml_staff)
    for params in ({}, {"jobs": [str(finished.pk)]}, {"jobs": [str(finished.pk), "nope"]},
                   {"jobs": [str(finished.pk), str(finished.pk)]},  # the same job twice is one job
                   {"jobs": [str(uuid.uuid4()) for _ in range(7)]}):
        response = client.get("/training/compare/", params)
        assert response.status_code == 400, params
        assert "Pick 2 to 6 jobs" in response.content.decode()
    missing = str(uuid.uuid4())
    assert client.get("/training/compare/", {"jobs": [str(finished.pk), missing]}).status_code == 404


@pytest.mark.parametrize("role, status", [("manager", 403), ("reviewer", 403), ("operator", 403), ("outsider", 403)])
def test_compare_needs_the_training_view_permission(request, client, finished, running, role, status):
    client.force_login(request.getfixturevalue(role))
    assert client.get("/training/compare/", {"jobs": [str(finished.pk), str(running.pk)]}).status_code == status


def test_compare_sends_anonymous_users_to_login(client, finished, running):
    response = client.get("/training/compare/", {"jobs": [str(finished.pk), str(running.pk)]})
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_compare_says_which_stage_a_pipeline_s_last_loss_is_from(client, ml_staff, finished, base):
    points = [{"step": 1, "loss": 2.0, "stage": "sft"}, {"step": 2, "loss": 1.0, "stage": "sft"},
              {"step": 3, "loss": -0.02, "reward": 0.75, "stage": "rl"}]
    pipeline = TrainingJob.objects.create(name="pipe", kind="pipeline", config={}, base_model=base,
                                          created_by=ml_staff, status="succeeded", progress_done=3, progress_total=3,
                                          metrics=points)
    client.force_login(ml_staff)
    response = client.get("/training/compare/", {"jobs": [str(finished.pk), str(pipeline.pk)]})
    rows = response.context["rows"]
    assert (rows[1]["loss"], rows[1]["loss_stage"], rows[1]["reward"]) == (-0.02, "rl", 0.75)
    page = response.content.decode()
    assert '<span class="small muted">(rl)</span>' in page and 'data-testid="compare-reward"' in page
    reward = next(c for c in response.context["charts"] if c["key"] == "reward")
    assert [s["job"].pk for s in reward["series"]] == [pipeline.pk]  # the SFT job has no reward line
