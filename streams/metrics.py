"""A vLLM server's Prometheus ``/metrics``, read and summarised for the console (plain Python, no Django).

What an operator watches per endpoint:

- time to first token: p50 and p95 estimated from the ``vllm:time_to_first_token_seconds`` histogram buckets
  (linear within a bucket, as Prometheus' ``histogram_quantile``) and the mean (sum / count), over the server's
  life and, when an earlier sample is given, over the requests since that sample;
- generation tokens per second: the rate of ``vllm:generation_tokens_total`` between two samples;
- queue length (``vllm:num_requests_waiting``), running requests (``vllm:num_requests_running``);
- KV-cache use, 0 to 1 (``vllm:kv_cache_usage_perc`` in vLLM 0.32; older versions said ``gpu_cache_usage_perc``
  or, on CPU, ``cpu_cache_usage_perc``);
- the LoRA adapters running and waiting (``vllm:lora_requests_info`` labels).

Series are summed over their labels (one server may hold several engines; adapters share the base model's
series). A :class:`Snapshot` keeps what the next reading needs for rates; the caller stores it.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from streams.vllm_admin import server_root

FETCH_TIMEOUT_S = 2.0
MAX_BODY_BYTES = 4_000_000  # a vLLM /metrics page is ~60 kB; refuse a runaway answer rather than parse it

TTFT = "vllm:time_to_first_token_seconds"
GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_CACHE_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc")
LORA_INFO = "vllm:lora_requests_info"
REQUESTS_DONE = "vllm:request_success_total"

Labels = dict[str, str]
Samples = dict[str, list[tuple[Labels, float]]]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LINE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


class MetricsError(RuntimeError):
    """The server could not be read (down, refused, timed out, or not a Prometheus page)."""


def _unescape(value: str) -> str:
    return value.replace("\\\\", "\x00").replace('\\"', '"').replace("\\n", "\n").replace("\x00", "\\")


def _labels(text: str) -> Labels:
    labels: Labels = {}
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None:
            if text[pos:].strip():
                raise ValueError(f"bad labels {text!r}")
            break
        labels[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return labels


def _value(text: str) -> float:
    low = text.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    return float(text)  # "NaN" parses to nan


def parse_prometheus(text: str) -> Samples:
    """Every sample of a Prometheus text page (format 0.0.4): ``{name: [(labels, value), ...]}``. Comments and
    blank lines are skipped; a line that is not a sample is skipped too (one odd line must not hide the rest)."""
    samples: Samples = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        try:
            labels = _labels(m.group(2) or "")
            value = _value(m.group(3))
        except ValueError:
            continue
        samples.setdefault(m.group(1), []).append((labels, value))
    return samples


def total(samples: Samples, name: str) -> float | None:
    """The sum of a series over its labels (None: the server has no such series)."""
    series = samples.get(name)
    if not series:
        return None
    return sum(v for _, v in series if not math.isnan(v))


def histogram(samples: Samples, name: str) -> dict[str, Any] | None:
    """A histogram summed over its labels: ``{"buckets": [(le, cumulative count), ...] (sorted, +Inf last),
    "count", "sum"}``; None when the server has none."""
    raw = samples.get(f"{name}_bucket")
    if not raw:
        return None
    buckets: dict[float, float] = {}
    for labels, value in raw:
        if "le" not in labels:
            continue
        le = _value(labels["le"])
        buckets[le] = buckets.get(le, 0.0) + value
    return {"buckets": sorted(buckets.items()), "count": total(samples, f"{name}_count") or 0.0,
            "sum": total(samples, f"{name}_sum") or 0.0}


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The q-quantile (0..1) of cumulative ``buckets`` [(upper bound, count)], linear within the bucket it falls
    in (the lowest bucket starts at 0), as Prometheus estimates it. None with no observations. A quantile in the
    +Inf bucket is reported as the highest finite bound (what is known: at least that)."""
    if not buckets or not 0 <= q <= 1:
        return None
    count = buckets[-1][1]
    if count <= 0:
        return None
    rank = q * count
    prev_bound, prev_count = 0.0, 0.0
    for bound, cumulative in buckets:
        if cumulative >= rank:
            if math.isinf(bound):
                return prev_bound
            in_bucket = cumulative - prev_count
            if in_bucket <= 0:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / in_bucket
        prev_bound, prev_count = bound, cumulative
    return prev_bound


def _minus(now: list[tuple[float, float]], before: list[tuple[float, float]]) -> list[tuple[float, float]] | None:
    """Bucket counts observed between two samples; None when the bounds differ or a count went down (the server
    restarted)."""
    if [b for b, _ in now] != [b for b, _ in before]:
        return None
    diff = [(b, c - p) for (b, c), (_, p) in zip(now, before)]
    return None if any(c < 0 for _, c in diff) else diff


@dataclass
class Snapshot:
    """What the next reading of the same endpoint needs: when, the token counter and the TTFT buckets."""

    t: float
    generation_tokens: float | None
    ttft_buckets: list[tuple[float, float]] = field(default_factory=list)
    ttft_count: float = 0.0
    ttft_sum: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ttft_buckets"] = [[_finite(b), c] for b, c in self.ttft_buckets]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Snapshot | None:
        if not isinstance(d, dict):
            return None
        try:
            return cls(t=float(d["t"]), generation_tokens=d.get("generation_tokens"),
                       ttft_buckets=[(math.inf if b is None else float(b), float(c)) for b, c in d["ttft_buckets"]],
                       ttft_count=float(d.get("ttft_count", 0)), ttft_sum=float(d.get("ttft_sum", 0)))
        except (KeyError, TypeError, ValueError):
            return None


def _finite(x: float) -> float | None:
    return None if math.isinf(x) else x  # JSON (the cache, the API) has no infinity


def _ttft(buckets: list[tuple[float, float]], count: float, total_s: float) -> dict[str, Any]:
    return {"requests": int(count), "p50_s": histogram_quantile(0.5, buckets),
            "p95_s": histogram_quantile(0.95, buckets), "mean_s": (total_s / count) if count > 0 else None}


def summarise(samples: Samples, *, now: float, previous: Snapshot | None = None
              ) -> tuple[dict[str, Any], Snapshot]:
    """The console's figures from one reading (and the one before, for rates), and the snapshot to keep."""
    hist = histogram(samples, TTFT)
    gen = total(samples, GENERATION_TOKENS)
    kv_name = next((n for n in KV_CACHE_NAMES if n in samples), None)
    snapshot = Snapshot(t=now, generation_tokens=gen, ttft_buckets=hist["buckets"] if hist else [],
                        ttft_count=hist["count"] if hist else 0.0, ttft_sum=hist["sum"] if hist else 0.0)
    figures: dict[str, Any] = {
        "ttft": _ttft(hist["buckets"], hist["count"], hist["sum"]) if hist else None,
        "ttft_recent": None,
        "generation_tokens_total": gen,
        "prompt_tokens_total": total(samples, PROMPT_TOKENS),
        "requests_done": total(samples, REQUESTS_DONE),
        "generation_tokens_per_s": None,
        "rate_window_s": None,
        "queue_length": total(samples, WAITING),
        "running": total(samples, RUNNING),
        "kv_cache_usage": total(samples, kv_name) if kv_name else None,
        "kv_cache_metric": kv_name,
        "lora": _lora(samples),
    }
    if previous is not None and now > previous.t:
        window = now - previous.t
        figures["rate_window_s"] = round(window, 3)
        if gen is not None and previous.generation_tokens is not None and gen >= previous.generation_tokens:
            figures["generation_tokens_per_s"] = (gen - previous.generation_tokens) / window
        if hist and previous.ttft_buckets:
            recent = _minus(hist["buckets"], previous.ttft_buckets)
            count = hist["count"] - previous.ttft_count
            if recent is not None and count > 0:
                figures["ttft_recent"] = _ttft(recent, count, hist["sum"] - previous.ttft_sum)
    return figures, snapshot


def _lora(samples: Samples) -> dict[str, Any] | None:
    """The newest ``vllm:lora_requests_info`` (its value is the time it was set): adapters running and waiting."""
    series = samples.get(LORA_INFO)
    if not series:
        return None
    labels, _ = max(series, key=lambda s: s[1])

    def names(key: str) -> list[str]:
        return [n for n in (labels.get(key) or "").split(",") if n]

    return {"running": names("running_lora_adapters"), "waiting": names("waiting_lora_adapters"),
            "max_loras": int(labels["max_lora"]) if labels.get("max_lora", "").isdigit() else None}


def metrics_url(base_url: str) -> str:
    """``/metrics`` of a server from its root or OpenAI base URL (Prometheus lives beside /v1, not under it)."""
    return f"{server_root(base_url)}/metrics"


def fetch_metrics(base_url: str, *, timeout: float = FETCH_TIMEOUT_S) -> str:
    """The text of a server's /metrics; MetricsError (with the reason) when it cannot be read in ``timeout``."""
    url = metrics_url(base_url)
    try:
        with httpx.Client(timeout=timeout) as client, client.stream("GET", url) as response:
            if response.status_code != 200:
                raise MetricsError(f"{url} answered {response.status_code}")
            body = b""
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    raise MetricsError(f"{url} sent more than {MAX_BODY_BYTES} bytes")
    except httpx.TimeoutException:
        raise MetricsError(f"{url} did not answer within {timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise MetricsError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from None
    return body.decode("utf-8", errors="replace")


def read_metrics(base_url: str, *, previous: Snapshot | None = None, timeout: float = FETCH_TIMEOUT_S,
                 now: float | None = None) -> tuple[dict[str, Any], Snapshot]:
    """Fetch, parse and summarise one server's metrics. MetricsError when it cannot be read or has no vLLM
    series at all (not a vLLM server)."""
    samples = parse_prometheus(fetch_metrics(base_url, timeout=timeout))
    if not any(name.startswith("vllm:") for name in samples):
        raise MetricsError(f"{metrics_url(base_url)} has no vllm: series (not a vLLM server?)")
    return summarise(samples, now=time.time() if now is None else now, previous=previous)
