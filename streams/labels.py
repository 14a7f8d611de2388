"""How a model endpoint is named on the console's pages (issue 14).

An endpoint's ``model`` is what its server calls the model, and for a local or vLLM server that is often the
absolute path of the weights' directory (``/work/main/models/demo-tiny``): it says nothing to the people picking
an endpoint and shows where files lie on a host. Pages show the endpoint's name, with the model's last path
component where it helps; the full path is for administrators only (the admin, the serving page's server detail).
Plain Python: no Django, so any layer may use it.
"""

from __future__ import annotations

from typing import Protocol


class _Endpoint(Protocol):
    name: str
    model: str


def model_short_name(model: str | None) -> str:
    """The model's last path component: ``/work/main/models/demo-tiny`` → ``demo-tiny``, ``gpt-4o-mini`` as is."""
    text = (model or "").strip().rstrip("/\\")
    return text.replace("\\", "/").rsplit("/", 1)[-1]


def endpoint_label(endpoint: _Endpoint, *, with_model: bool = False, default: bool = False) -> str:
    """The endpoint as pages show it: its name; ``with_model`` adds the short model name (when it says more than
    the name), ``default`` adds ``· default`` for the default endpoint."""
    parts = [endpoint.name]
    if with_model:
        short = model_short_name(endpoint.model)
        if short and short != endpoint.name:
            parts.append(short)
    if default and getattr(endpoint, "is_default", False):
        parts.append("default")
    return " · ".join(parts)
