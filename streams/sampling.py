"""The sampling settings a run of turns may set (an evaluation run, a latency replay, a session replay): which keys,
within which bounds, checked once for all of them. The turn engine passes them to the model endpoint
(:mod:`streams.engine.breaker`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.errors import ValidationFailed

MAX_TOKENS_LIMIT = 4096
SAMPLING_LIMITS = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "max_tokens": (1, MAX_TOKENS_LIMIT)}


def validate_sampling(sampling: Any) -> dict[str, Any]:
    """Sampling settings as stored: only known keys, numbers within bounds; ValidationFailed otherwise."""
    if sampling in (None, ""):
        return {}
    if not isinstance(sampling, Mapping):
        raise ValidationFailed("sampling must be an object", errors=[{"path": "sampling",
                                                                      "message": "an object, e.g. {\"temperature\": 0.7}"}])
    errors, out = [], {}
    for key, value in sampling.items():
        if key not in SAMPLING_LIMITS:
            errors.append({"path": f"sampling.{key}", "message": f"unknown setting; use {', '.join(SAMPLING_LIMITS)}"})
            continue
        lo, hi = SAMPLING_LIMITS[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (lo <= value <= hi):
            errors.append({"path": f"sampling.{key}", "message": f"a number from {lo} to {hi}"})
            continue
        out[key] = int(value) if key == "max_tokens" else float(value)
    if errors:
        raise ValidationFailed("the sampling settings are not valid", errors=errors)
    return out
