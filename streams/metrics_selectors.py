"""Reads of the serving metrics: every vLLM endpoint's ``/metrics`` now (streams.metrics), with the previous reading
of each endpoint kept in the Django cache (Redis in production) so tokens per second and the recent TTFT are rates
between two readings, whichever web process served the previous one.

An endpoint that cannot be read within its 2 s shows as down with the reason; nothing here raises for a server.
"""

from __future__ import annotations

import hashlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.core.cache import cache
from django.db.models import Q

from streams.metrics import FETCH_TIMEOUT_S, MetricsError, Snapshot, read_metrics
from streams.models import ModelEndpoint

logger = logging.getLogger(__name__)

PREVIOUS_TTL_S = 600
MIN_RATE_WINDOW_S = 1.0  # a reading this close to the kept one does not replace it (several pages polling at once)
MAX_PARALLEL = 8


def metrics_endpoints() -> list[ModelEndpoint]:
    """The endpoints that have vLLM metrics: kind vLLM, and those of servers the console runs or registered."""
    from streams.live_models import ServerInstance

    served = ServerInstance.objects.filter(status__in=ServerInstance.LIVE, endpoint__isnull=False).values("endpoint_id")
    return list(ModelEndpoint.objects.filter(Q(kind=ModelEndpoint.Kind.VLLM) | Q(pk__in=served)).order_by("name"))


def metrics_endpoint_get(*, name: str) -> ModelEndpoint:
    """One endpoint with metrics by name; ModelEndpoint.DoesNotExist otherwise."""
    for endpoint in metrics_endpoints():
        if endpoint.name == name:
            return endpoint
    raise ModelEndpoint.DoesNotExist(name)


def _cache_key(endpoint: ModelEndpoint) -> str:
    digest = hashlib.sha256(f"{endpoint.name}\n{endpoint.base_url}".encode()).hexdigest()[:24]
    return f"serving:metrics:prev:{digest}"


def _cache_get(key: str) -> Any:
    try:
        return cache.get(key)
    except Exception:  # the cache (Redis) is down: no rates this time, the page still shows the rest
        logger.warning("reading %s from the cache failed", key, exc_info=True)
        return None


def _cache_set(key: str, value: Any) -> None:
    try:
        cache.set(key, value, PREVIOUS_TTL_S)
    except Exception:
        logger.warning("writing %s to the cache failed", key, exc_info=True)


def endpoint_metrics(endpoint: ModelEndpoint, *, timeout: float = FETCH_TIMEOUT_S) -> dict[str, Any]:
    """``{"endpoint", "model", "base_url", "up", "error", "read_at", "figures"}`` for one endpoint."""
    row: dict[str, Any] = {"endpoint": endpoint.name, "model": endpoint.model, "base_url": endpoint.base_url,
                           "kind": endpoint.kind, "up": False, "error": "", "read_at": time.time(), "figures": None}
    try:
        endpoint.check_usable()  # the outbound allow-list: the console calls no host it may not call
    except Exception as exc:
        row["error"] = str(exc)
        return row
    key = _cache_key(endpoint)
    kept = Snapshot.from_dict(_cache_get(key))
    try:
        figures, snapshot = read_metrics(endpoint.base_url, previous=kept, timeout=timeout)
    except MetricsError as exc:
        row["error"] = str(exc)
        return row
    except Exception as exc:  # anything else a server's answer provokes is still "down", never a 500
        logger.warning("reading the metrics of %s failed", endpoint.name, exc_info=True)
        row["error"] = f"{type(exc).__name__}: {exc}"
        return row
    if kept is None or snapshot.t - kept.t >= MIN_RATE_WINDOW_S or snapshot.t < kept.t:
        _cache_set(key, snapshot.to_dict())
    row.update(up=True, figures=figures, read_at=snapshot.t)
    return row


def endpoints_metrics(endpoints: list[ModelEndpoint] | None = None) -> list[dict[str, Any]]:
    """Every metrics endpoint read at once (in parallel: the page waits at most about one timeout)."""
    endpoints = metrics_endpoints() if endpoints is None else endpoints
    if not endpoints:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(endpoints))) as pool:
        return list(pool.map(endpoint_metrics, endpoints))
