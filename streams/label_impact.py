"""Where a harness label is served, for the registry's confirmation pages (``settings.HAT_LABEL_IMPACT``; the
registry imports nothing from here, it calls this by name): the deployments whose revision in force serves the
label, their live sessions (the next turn of each uses the label's new version) and the rooms those run in; a
``room:<id>`` label also names its room when one has that slug."""

from __future__ import annotations

from django.urls import reverse

from harness_editor.label_impact import LabelImpact, Served
from streams.live_models import Deployment, LiveSession
from streams.models import LiveRoom


def label_impact(harness, name: str) -> LabelImpact:
    deployments = list(Deployment.objects.filter(harness=harness, current_revision__label=name)
                       .select_related("current_revision").order_by("name"))
    sessions = list(LiveSession.objects.filter(deployment__in=deployments, status=LiveSession.Status.LIVE)
                    .select_related("room", "deployment").order_by("started_at"))
    rooms: dict[str, Served] = {}
    for s in sessions:
        rooms.setdefault(s.room.slug, Served(name=s.room.title or s.room.slug, detail=f"live: {s.title}"))
    if name.startswith("room:"):
        room = LiveRoom.objects.filter(slug=name.partition(":")[2]).first()
        if room is not None and room.slug not in rooms:
            rooms[room.slug] = Served(name=room.title or room.slug, detail=f"named by the label {name}")
    served = [Served(name=d.name, detail=f"r{d.current_revision.number}" + (f" · {d.title}" if d.title else ""),
                     link=reverse("deployment:detail", args=[d.name])) for d in deployments]
    live = [Served(name=s.title, detail=f"{s.deployment.name} in {s.room.slug} (its next turn uses the new version)",
                   link=reverse("live:session", args=[s.pk])) for s in sessions]
    note = "" if deployments else f"No deployment serves '{name}' of {harness.slug} now."
    return LabelImpact(deployments=tuple(served), sessions=tuple(live), rooms=tuple(rooms.values()), note=note)
