"""What a label move would affect where the label is served: the deployments serving it, their live sessions and
the rooms those run in. The registry owns the confirmation pages but not the runtime, which it must not import
(DESIGN §3, ``.importlinter``); so, as for the approval gate, the answer comes through one function the project
names in ``settings.HAT_LABEL_IMPACT`` (by default ``streams.label_impact.label_impact``), taking (harness, label
name) and answering a :class:`LabelImpact` of the plain dataclasses below. No setting: nothing is known to be
served, and the page says so."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.utils.module_loading import import_string

NO_PROVIDER = "This console reports nothing about where labels are served."


@dataclass(frozen=True)
class Served:
    """One thing a label move reaches: a deployment, a live session or a room; ``detail`` says how."""

    name: str
    detail: str = ""
    link: str = ""


@dataclass(frozen=True)
class LabelImpact:
    deployments: tuple[Served, ...] = ()
    sessions: tuple[Served, ...] = ()
    rooms: tuple[Served, ...] = ()
    note: str = ""

    @property
    def is_empty(self) -> bool:
        return not (self.deployments or self.sessions or self.rooms)


def label_impact(harness, name: str) -> LabelImpact:
    """Where ``name`` of ``harness`` is served now (empty when no provider is named). A provider that is named but
    cannot be imported is a configuration error, never a silent "nothing affected"."""
    provider_name = getattr(settings, "HAT_LABEL_IMPACT", "") or ""
    if not provider_name:
        return LabelImpact(note=NO_PROVIDER)
    impact = import_string(provider_name)(harness, name)
    if not isinstance(impact, LabelImpact):
        raise TypeError(f"{provider_name} returned {type(impact).__name__}, not LabelImpact")
    return impact
