"""LoRA adapters for real: a tiny adapter of models/demo-tiny trained by the real SFT stage (peft, not merged) and
registered as an adapter of its base; loaded into the real vLLM-CPU (``vllm_server``) under a unique name, listed
in /v1/models, answering a chat completion, unloaded and gone; the service path with a real Celery worker on
``serve.<hostname>`` (the adapter directory is on that host's disk), every step on the audit timeline; refusals
with located errors and nothing queued; the pages and the API per role."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from unittest import mock

import httpx
import pytest
from django.conf import settings

from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from console.models import AuditEvent
from streams import adapter_tasks
from streams.services import adapters as adapter_services
from streams.vllm_admin import VllmAdminError, load_lora_adapter, served_models, unload_lora_adapter
from tests.conftest import start_worker, stop_worker

needs_shared_db = pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                     reason="a second process needs the PostgreSQL test database")
LORA = {"r": 8, "alpha": 16, "dropout": 0.0, "merge": False}
FAST = {"max_steps": 3, "per_device_batch_size": 2, "learning_rate": 5e-3, "save_steps": 3, "max_length": 1024,
        "threads": 2}


def _figure(key: str, value) -> None:
    """Figures for the closing note (bench-style, never asserted on): HAT_DATA_DIR/lora-figures.json."""
    path = Path(settings.ENV.data_dir) / "lora-figures.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.write_text(json.dumps(data, indent=2))


def _train(out: Path, lora: dict) -> Path:
    from training_jobs.hat.config import SFTStageConfig
    from training_jobs.hat.sft import run_sft
    from training_jobs.hsa.dataset import Recipe, build_to_disk
    from training_jobs.hsa.samples import tiny_model_samples
    from training_jobs.tiny_model.pipeline import DEMO_MODEL_DIR

    build_to_disk(tiny_model_samples(8, seed=5), Recipe(variants_per_sample=1, harness_pool_size=2), out / "ds")
    result = run_sft(SFTStageConfig(**FAST, lora=lora), model_dir=DEMO_MODEL_DIR, dataset_dir=out / "ds" / "dataset",
                     out_dir=out / "run")
    return result.final_dir


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory) -> Path:
    """A rank-8 adapter of the demo model from the real SFT stage (3 steps, a few seconds)."""
    return _train(tmp_path_factory.mktemp("lora"), LORA)


def _chat(vllm, model: str) -> dict:
    r = httpx.post(f"{vllm.openai_base_url}/chat/completions", timeout=120, json={
        "model": model, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "how much is #101?"}]})
    assert r.status_code == 200, r.text
    return r.json()


# --- the stage and the registry ------------------------------------------------------------------------------------


def test_the_sft_stage_keeps_the_adapter_apart(adapter_dir):
    names = {p.name for p in adapter_dir.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "chat_template.jinja"} <= names
    assert "model.safetensors" not in names and "config.json" not in names  # not merged
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    assert config["r"] == 8 and config["lora_alpha"] == 16 and config["peft_type"] == "LORA"
    assert sorted(config["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"]
    from safetensors.torch import load_file

    weights = load_file(str(adapter_dir / "adapter_model.safetensors"))
    assert weights and all("lora_A" in k or "lora_B" in k for k in weights)
    assert any(float(w.abs().sum()) > 0 for k, w in weights.items() if "lora_B" in k)  # trained (B starts at 0)
    _figure("adapter_bytes", (adapter_dir / "adapter_model.safetensors").stat().st_size)


def test_a_pipeline_keeps_only_its_last_stage_apart():
    from pydantic import ValidationError

    from training_jobs.hat.config import PipelineConfig

    PipelineConfig(sft={"lora": LORA}, distill=None, rl=None)
    PipelineConfig(sft={"lora": {"r": 8}}, distill=None, rl={"lora": LORA})
    with pytest.raises(ValidationError, match="sft.lora.merge: only the last stage"):
        PipelineConfig(sft={"lora": LORA}, rl=None)


@pytest.fixture
def cleanup(db):
    yield
    import shutil

    from training_jobs import services
    from training_jobs.models import Dataset, TrainingJob

    for d in Dataset.objects.all():
        shutil.rmtree(services.datasets_dir() / str(d.pk), ignore_errors=True)
    for j in TrainingJob.objects.all():
        shutil.rmtree(j.output_dir, ignore_errors=True)


@pytest.mark.django_db
def test_a_training_job_registers_an_adapter_of_its_base_that_loads_into_vllm(
        ml_staff, operator, client, cleanup, vllm_server, django_capture_on_commit_callbacks):
    from training_jobs import services, tasks
    from training_jobs.models import TrainedModel

    with mock.patch.object(tasks.dataset_build, "apply_async"):
        dataset = services.dataset_build_start(user=ml_staff, recipe={"variants_per_sample": 1, "harness_pool_size": 2},
                                               sources={"scenarios": [], "tiny_gold": 8, "tiny_gold_seed": 3})
    dataset = services.dataset_build_run(dataset_id=dataset.pk)
    base = services.demo_base_model()
    with django_capture_on_commit_callbacks(execute=False):
        job = services.training_job_start(user=ml_staff, kind="sft", config={**FAST, "lora": LORA},
                                          dataset_id=dataset.pk, base_model_id=base.pk)
    job = services.training_job_run(job_id=job.pk)
    assert job.status == "succeeded", job.error
    adapter = TrainedModel.objects.get(pk=job.result["model"])
    assert adapter.is_adapter and adapter.parent == base and adapter.lora_rank == 8
    assert "LoRA r=8 kept apart: the result is an adapter of" in job.log_tail
    assert [m.pk for m in adapter.lineage()] == [base.pk, adapter.pk]
    assert (adapter.directory / "adapter_model.safetensors").is_file()
    assert not (adapter.directory / "config.json").exists()
    assert f"--lora-modules hat-{adapter.pk}={adapter.path}" in adapter.vllm_command()
    assert f"--model {base.path}" in adapter.vllm_command() or base.path in adapter.vllm_command()
    assert "--host 127.0.0.1" in adapter.vllm_command()  # adapter loading has no authentication: loopback only

    # nothing trains from an adapter, and the local server (full models only) refuses it with the reason
    with pytest.raises(ValidationFailed) as exc:
        services.training_job_start(user=ml_staff, kind="sft", config=FAST, dataset_id=dataset.pk,
                                    base_model_id=adapter.pk)
    assert {"path": "base_model", "message": f"{adapter.name} is a LoRA adapter, not a model: train from its base "
                                             f"({base.name})"} in exc.value.errors
    with pytest.raises(InvalidTransition, match="is a LoRA adapter"):
        services.model_serve_start(user=ml_staff, model=adapter)

    # the model pages and the API say what it is
    client.force_login(ml_staff)
    page = client.get(f"/models/{adapter.pk}/").content.decode()
    assert 'data-testid="adapter-badge"' in page and 'data-testid="adapter-note"' in page
    assert "a LoRA adapter (rank 8)" in page and 'data-testid="serve"' not in page
    assert 'data-testid="adapter-badge"' in client.get("/models/").content.decode()
    body = client.get(f"/api/models/{adapter.pk}/").json()
    assert body["is_adapter"] is True and [m["is_adapter"] for m in body["lineage"]] == [False, True]

    # loaded into the real vLLM from where the job left it
    name = adapter_services.adapter_name(adapter)
    t0 = time.perf_counter()
    answer = load_lora_adapter(vllm_server.base_url, name, adapter.path)
    _figure("load_s", round(time.perf_counter() - t0, 3))
    try:
        assert "Success" in answer
        listed = {m["id"]: m for m in served_models(vllm_server.openai_base_url)}
        assert listed[name]["parent"] == vllm_server.model and listed[name]["root"] == adapter.path
        reply = _chat(vllm_server, name)
        assert reply["model"] == name and reply["usage"]["completion_tokens"] > 0
    finally:
        t0 = time.perf_counter()
        unload_lora_adapter(vllm_server.base_url, name)
        _figure("unload_s", round(time.perf_counter() - t0, 3))
    assert name not in {m["id"] for m in served_models(vllm_server.base_url)}
    with pytest.raises(VllmAdminError) as gone:
        unload_lora_adapter(vllm_server.base_url, name)
    assert gone.value.status == 404 and "cannot be found" in str(gone.value)
    r = httpx.post(f"{vllm_server.openai_base_url}/chat/completions", timeout=60,
                   json={"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert r.status_code == 404


def test_vllm_admin_errors_are_clear(vllm_server, tmp_path):
    with pytest.raises(VllmAdminError) as exc:
        load_lora_adapter(vllm_server.base_url, "nowhere-1", str(tmp_path / "no-such-adapter"))
    assert exc.value.status == 404 and "loading LoRA adapter 'nowhere-1'" in str(exc.value)
    assert "No adapter found" in str(exc.value)
    from training_jobs.tiny_model.serve import free_port

    closed = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    with pytest.raises(VllmAdminError) as exc:
        served_models(closed)
    assert exc.value.status is None and "cannot reach" in str(exc.value)
    with pytest.raises(VllmAdminError, match="cannot reach"):
        unload_lora_adapter(f"{closed}/v1", "x")


def test_vllm_refuses_an_adapter_past_its_max_lora_rank(vllm_server, tmp_path):
    """Why the service checks the rank first: the shared server (--max-lora-rank 16) refuses r=32."""
    big = _train(tmp_path, {**LORA, "r": 32, "alpha": 64})
    with pytest.raises(VllmAdminError) as exc:
        load_lora_adapter(vllm_server.base_url, "too-big-1", str(big))
    assert exc.value.status is not None and exc.value.status >= 400
    assert "too-big-1" not in {m["id"] for m in served_models(vllm_server.base_url)}
    _figure("rank_32_refusal", str(exc.value)[:300])


# --- the service: rows for a running server ------------------------------------------------------------------------


def _server_rows(vllm, *, host: str | None = None, spec: dict | None = None, status: str = "ready"):
    from streams.models import ModelEndpoint, ServeProfile, ServerInstance
    from training_jobs import services

    base = services.demo_base_model()
    profile = ServeProfile.objects.create(
        name=f"lora-cpu-{ServeProfile.objects.count()}",
        spec=spec if spec is not None else {"kind": "vllm", "enable_lora": True, "max_lora_rank": 16,
                                            "runtime_lora_updating": True})
    endpoint, _ = ModelEndpoint.objects.get_or_create(name="lora-vllm", defaults={
        "base_url": vllm.openai_base_url, "model": vllm.model, "kind": ModelEndpoint.Kind.VLLM})
    port = int(vllm.base_url.rsplit(":", 1)[1])
    instance = ServerInstance.objects.create(profile=profile, model=base, model_path=base.path, endpoint=endpoint,
                                             managed=False, status=status, host=host or socket.gethostname(),
                                             port=port)
    return instance, base


def _adapter_row(base, path, *, r: int = 8, name: str = "Tiny LoRA r8", is_adapter: bool = True):
    from training_jobs.models import TrainedModel

    return TrainedModel.objects.create(name=name, kind="sft", path=str(path), parent=base, is_adapter=is_adapter,
                                       config={"lora": {**LORA, "r": r}})


@pytest.mark.django_db
def test_refusals_are_located_and_queue_nothing(ml_staff, operator, outsider, vllm_server, tmp_path,
                                                django_capture_on_commit_callbacks):
    from training_jobs.models import TrainedModel

    instance, base = _server_rows(vllm_server)
    adapter = _adapter_row(base, tmp_path)
    other_base = TrainedModel.objects.create(name="another base", kind="base", path=str(tmp_path / "other"))
    foreign = _adapter_row(other_base, tmp_path, name="Foreign LoRA")
    wide = _adapter_row(base, tmp_path, r=32, name="Wide LoRA")
    full = _adapter_row(base, tmp_path, name="Full SFT", is_adapter=False)
    plain, _ = _server_rows(vllm_server, spec={"kind": "vllm"})
    starting, _ = _server_rows(vllm_server, status="starting")

    def refused(exc_type, **kw):
        with django_capture_on_commit_callbacks(execute=False) as queued, pytest.raises(exc_type) as exc:
            adapter_services.adapter_load(**{"user": ml_staff, "instance": instance, "adapter": adapter, **kw})
        assert queued == []
        return exc.value

    for user in (operator, outsider):
        assert "your role does not allow you to load LoRA adapters" in str(refused(NotAllowed, user=user))
    assert "starting, not ready" in str(refused(InvalidTransition, instance=starting))
    assert refused(ValidationFailed, instance=plain).errors[0]["path"] == "instance"
    assert refused(ValidationFailed, adapter=foreign).errors == [
        {"path": "adapter", "message": f"Foreign LoRA is an adapter of another base; this server serves {base.name}"}]
    assert refused(ValidationFailed, adapter=wide).errors == [
        {"path": "adapter", "message": "Wide LoRA has rank 32; this server loads adapters up to rank 16 "
                                       "(--max-lora-rank)"}]
    assert "is a full model" in refused(ValidationFailed, adapter=full).errors[0]["message"]
    with pytest.raises(adapter_services.AdapterNotLoaded):
        adapter_services.adapter_unload(user=ml_staff, instance=instance, name="nothing-here")
    with pytest.raises(NotAllowed):
        adapter_services.adapter_unload(user=operator, instance=instance, name="nothing-here")
    assert not AuditEvent.objects.filter(action__startswith="server.adapter").exists()

    # accepted: a unique name, audited as requested, sent to the server's host's own queue on commit
    sent = []
    with mock.patch.object(adapter_tasks.adapter_load, "apply_async", lambda **kw: sent.append(kw)):
        with django_capture_on_commit_callbacks(execute=True):
            first = adapter_services.adapter_load(user=ml_staff, instance=instance, adapter=adapter)
            second = adapter_services.adapter_load(user=ml_staff, instance=instance, adapter=adapter)
    assert first != second and all(n.startswith("tiny-lora-r8-") and len(n) == len("tiny-lora-r8-") + 8
                                   for n in (first, second))
    assert [s["queue"] for s in sent] == [f"serve.{instance.host}"] * 2
    assert sent[0]["args"] == (str(instance.pk), str(adapter.pk), first, ml_staff.pk)
    event = AuditEvent.objects.get(target=f"adapter:{first}")
    assert (event.action, event.scope, event.to_state, event.actor) == (
        "server.adapter_load", f"server:{instance.pk}", "requested", ml_staff)


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_load_and_unload_through_a_worker_on_the_servers_host(ml_staff, vllm_server, adapter_dir, tmp_path):
    from streams.models import ServerInstance

    instance, base = _server_rows(vllm_server)
    adapter = _adapter_row(base, adapter_dir)
    missing = _adapter_row(base, tmp_path / "gone", name="Missing LoRA")
    queue = adapter_services.serve_queue(socket.gethostname())
    proc, log = start_worker(queue, log_name="lora-serve-worker.log")
    loaded = None
    try:
        t0 = time.perf_counter()
        name = adapter_services.adapter_load(user=ml_staff, instance=instance, adapter=adapter)
        loaded = _wait(lambda: next((a for a in ServerInstance.objects.get(pk=instance.pk).adapters
                                     if a["name"] == name), None), log.name)
        _figure("service_load_s", round(time.perf_counter() - t0, 3))
        assert loaded["path"] == str(adapter_dir) and loaded["model_id"] == str(adapter.pk) and loaded["loaded_at"]
        assert name in {m["id"] for m in served_models(vllm_server.base_url)}
        assert _chat(vllm_server, name)["model"] == name
        steps = list(AuditEvent.objects.filter(target=f"adapter:{name}").order_by("id")
                     .values_list("action", "to_state", "actor__username"))
        assert steps == [("server.adapter_load", "requested", ml_staff.username),
                         ("server.adapter_load", "loaded", ml_staff.username)]

        # vLLM's refusal is recorded with its reason; nothing is added
        bad = adapter_services.adapter_load(user=ml_staff, instance=instance, adapter=missing)
        failed = _wait(lambda: AuditEvent.objects.filter(target=f"adapter:{bad}", to_state="failed").first(), log.name)
        assert "No adapter found" in failed.comment
        assert [a["name"] for a in ServerInstance.objects.get(pk=instance.pk).adapters] == [name]

        adapter_services.adapter_unload(user=ml_staff, instance=instance, name=name)
        _wait(lambda: not ServerInstance.objects.get(pk=instance.pk).adapters, log.name)
        loaded = None
        assert name not in {m["id"] for m in served_models(vllm_server.base_url)}
        assert AuditEvent.objects.filter(target=f"adapter:{name}", action="server.adapter_unload",
                                         to_state="unloaded").exists()
    finally:
        stop_worker(proc, log)
        if loaded is not None:  # the shared server keeps nothing of this test
            try:
                unload_lora_adapter(vllm_server.base_url, loaded["name"])
            except VllmAdminError:
                pass


def _wait(probe, log_name: str, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"not done within {timeout} s; worker log {log_name}:\n" + Path(log_name).read_text()[-3000:])


# --- pages and API per role ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_adapters_page_and_api_per_role(client, ml_staff, operator, outsider, vllm_server, tmp_path,
                                        django_capture_on_commit_callbacks):
    import uuid

    instance, base = _server_rows(vllm_server)
    adapter = _adapter_row(base, tmp_path)
    instance.adapters = [{"name": "tiny-lora-r8-0badc0de", "path": str(tmp_path), "model_id": str(adapter.pk),
                          "loaded_at": "2026-11-30T23:00:00+00:00"}]
    instance.save(update_fields=["adapters"])
    page_url = f"/serving/servers/{instance.pk}/adapters/"
    api_url = f"/api/serving/servers/{instance.pk}/adapters/"

    client.force_login(outsider)
    assert client.get(page_url).status_code == 403
    assert client.get(api_url).status_code == 403
    assert client.post(f"{page_url}load/", {"adapter": str(adapter.pk)}).status_code == 403

    client.force_login(operator)  # watches serving, manages nothing
    page = client.get(page_url)
    assert page.status_code == 200 and b"tiny-lora-r8-0badc0de" in page.content
    assert b'data-testid="load"' not in page.content and b'data-testid="unload"' not in page.content
    assert client.get(f"/serving/servers/{uuid.uuid4()}/adapters/").status_code == 404
    detail = client.get(f"/serving/servers/{instance.pk}/").content.decode()  # the server page loads the section
    assert f'hx-get="{page_url}"' in detail and 'data-testid="adapters-slot"' in detail
    assert 'data-testid="adapters-link">adapters (1)' in client.get("/serving/").content.decode()
    assert client.get(api_url).json()[0]["name"] == "tiny-lora-r8-0badc0de"
    assert client.post(api_url, {"adapter": str(adapter.pk)}, content_type="application/json").status_code == 403
    assert client.delete(f"{api_url}tiny-lora-r8-0badc0de").status_code == 403
    assert client.post(f"{page_url}tiny-lora-r8-0badc0de/unload/").status_code == 403

    client.force_login(ml_staff)
    page = client.get(page_url, HTTP_HX_REQUEST="true")
    assert page.status_code == 200 and b"<html" not in page.content and b'data-testid="load"' in page.content
    assert f'value="{adapter.pk}"'.encode() in page.content
    with mock.patch.object(adapter_tasks.adapter_load, "apply_async"), \
            django_capture_on_commit_callbacks(execute=True):
        r = client.post(api_url, {"adapter": str(adapter.pk)}, content_type="application/json")
        assert r.status_code == 202 and r.json()["status"] == "queued"
        assert r.json()["name"].startswith("tiny-lora-r8-")
        r = client.post(f"{page_url}load/", {"adapter": str(adapter.pk)})
        assert r.status_code == 302 and r["Location"] == page_url
    bad = client.post(api_url, {"adapter": "not-a-uuid"}, content_type="application/json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["path"] == "adapter"
    missing = client.post(api_url, {"adapter": str(uuid.uuid4())}, content_type="application/json")
    assert missing.status_code == 400 and missing.json()["errors"][0]["path"] == "adapter"
    refused = client.post(f"{page_url}load/", {"adapter": str(base.pk)})
    assert refused.status_code == 400 and b"is a full model, not a LoRA adapter" in refused.content
    assert client.delete(f"{api_url}no-such-adapter").status_code == 404
    assert client.delete(f"/api/serving/servers/{uuid.uuid4()}/adapters/x").status_code == 404
    with mock.patch.object(adapter_tasks.adapter_unload, "apply_async") as sent, \
            django_capture_on_commit_callbacks(execute=True):
        r = client.delete(f"{api_url}tiny-lora-r8-0badc0de")
    assert r.status_code == 202 and sent.call_args.kwargs["queue"] == f"serve.{instance.host}"
    steps = AuditEvent.objects.filter(scope=f"server:{instance.pk}").values_list("action", "to_state")
    assert sorted(steps) == [("server.adapter_load", "requested")] * 2 + [("server.adapter_unload", "requested")]
    client.logout()
    assert client.get(api_url).status_code == 401


@pytest.mark.django_db
def test_the_launch_form_keeps_the_adapter_apart_when_asked(client, ml_staff, tmp_path, monkeypatch):
    from tests.training_jobs.test_training_views import _form, _ready_dataset
    from training_jobs import services, tasks
    from training_jobs.models import TrainingJob

    monkeypatch.setattr(tasks.training_job, "apply_async", lambda **kw: None)
    hsa, base = _ready_dataset(ml_staff, tmp_path, "hsa", "hsa-ready"), services.demo_base_model()
    client.force_login(ml_staff)
    page = client.get("/training/new/").content.decode()
    assert 'name="lora_keep_adapter"' in page and "Only the last stage of a pipeline may keep it apart" in page
    assert client.post("/training/new/", _form(hsa, base, name="merged", lora="on", lora_r=8)).status_code == 302
    assert client.post("/training/new/", _form(hsa, base, name="apart", lora="on", lora_r=8,
                                               lora_keep_adapter="on")).status_code == 302
    configs = {j.name: j.config["lora"] for j in TrainingJob.objects.all()}
    assert configs["merged"]["merge"] is True and configs["apart"] == {**configs["merged"], "merge": False}
