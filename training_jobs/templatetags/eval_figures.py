"""How the evaluation pages write their figures: fractions as percent, 95 % intervals, seconds, signed deltas.

``{% load eval_figures %}`` then ``{{ score|pct }}`` (a score dict ``{mean, ci_low, ci_high, n}`` or a number),
``{{ score|ci }}``, ``{{ seconds|secs }}``, ``{{ points|signed }}``. Missing figures read "—".
"""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()
DASH = "—"


def _mean(value: Any) -> float | None:
    if isinstance(value, dict):
        value = value.get("mean")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@register.filter
def pct(value: Any, digits: int = 1) -> str:
    """A fraction (0..1), or a score's mean, as a percentage without the sign: 0.8321 → "83.2"."""
    mean = _mean(value)
    return DASH if mean is None else f"{100 * mean:.{int(digits)}f}"


@register.filter
def ci(score: Any) -> str:
    """A score's 95 % interval in percent: "[79.1, 87.0]"; "" when it has none."""
    if not isinstance(score, dict) or score.get("ci_low") is None or score.get("ci_high") is None:
        return ""
    return f"[{100 * score['ci_low']:.1f}, {100 * score['ci_high']:.1f}]"


@register.filter
def secs(value: Any) -> str:
    mean = _mean(value)
    return DASH if mean is None else (f"{mean:.2f} s" if mean < 100 else f"{mean:.0f} s")


@register.filter
def num(value: Any, digits: int = 1) -> str:
    mean = _mean(value)
    return DASH if mean is None else f"{mean:.{int(digits)}f}"


@register.filter
def signed(value: Any, digits: int = 1) -> str:
    """A delta with its sign: +4.2, −1.0, ±0.0."""
    mean = _mean(value)
    if mean is None:
        return DASH
    text = f"{abs(mean):.{int(digits)}f}"
    if float(text) == 0:
        return f"±{text}"
    return ("+" if mean > 0 else "−") + text


@register.filter
def get(mapping: Any, key: Any) -> Any:
    """``mapping[key]`` in a template (dict keys that are not identifiers, e.g. a rule id with a dot)."""
    try:
        return mapping[key]
    except (KeyError, IndexError, TypeError):
        return None
