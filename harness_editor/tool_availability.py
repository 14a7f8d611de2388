"""Which of a manifest's tools answer with a fault on this host (unbound, or an endpoint or MCP server not on its
allow-list, a secret not set), for the version page: the same check Try and the preview room show. The runtime owns
the allow-lists and the registry must not import it (DESIGN §3, ``.importlinter``), so, as for the label impact, the
answer comes from the function named in ``settings.HAT_TOOL_AVAILABILITY`` (by default
``streams.services.tool_runtime.tool_bindings_available``), taking a manifest and answering located
:class:`~harness_editor.schemas.FieldError` s. No setting: no warnings are shown."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from harness_editor.schemas import FieldError, Manifest


def tool_warnings(manifest: Manifest) -> list[FieldError]:
    """The provider's warnings for ``manifest`` ([] without one). A provider that is named but cannot be imported
    is a configuration error, never a silent "all tools available"."""
    name = getattr(settings, "HAT_TOOL_AVAILABILITY", "") or ""
    if not name:
        return []
    return list(import_string(name)(manifest))
