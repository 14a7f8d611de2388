"""The harness and version a page's address names, or 404: every page under /harnesses/<slug>/v<n>/ (the registry's,
and the pages other apps serve there: MCP import, Try this draft) looks them up the same way."""

from __future__ import annotations

from django.http import Http404

from harness_editor import selectors
from harness_editor.models import Harness, HarnessVersion


def harness_or_404(slug: str) -> Harness:
    try:
        return selectors.harness_get(slug=slug)
    except Harness.DoesNotExist:
        raise Http404(f"no harness '{slug}'") from None


def harness_version_or_404(harness: Harness, number: int) -> HarnessVersion:
    try:
        return selectors.version_get(harness=harness, number=number)
    except HarnessVersion.DoesNotExist:
        raise Http404(f"{harness.slug} has no version {number}") from None


def version_or_404(slug: str, number: int) -> HarnessVersion:
    return harness_version_or_404(harness_or_404(slug), number)
