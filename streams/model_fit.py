"""Whether the model behind an endpoint was trained on a harness, said before anyone sends a comment (the Try page,
the preview room).

A small model tends to memorise the harness it was trained on (DESIGN §1): on another one it calls tools by the names
it learnt, fails the hooks and, once the retries run out, speaks the fallback line. What a model was trained on comes
from training through :func:`streams.model_artefacts.model_trained_harnesses` (the runtime imports nothing from
training); what such turns did here comes from the preview rooms' stored turns of this harness on this model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streams.model_artefacts import model_trained_harnesses
from streams.models import ModelEndpoint, PreviewEvent, PreviewRoom

RECENT_ROOMS = 20  # the evidence: the replies of this harness on this model in the latest rooms


@dataclass(frozen=True)
class ModelFit:
    """``level``: "warning" (never trained on this harness), "info" (trained on another version of it).
    ``evidence``: recorded turns of this harness on this model ({"turns", "fallbacks", "min_s", "max_s"}) or None."""

    level: str
    model: str
    harness: str
    headline: str
    message: str
    trained_on: tuple[str, ...] = ()
    expectation: str = ""
    evidence: dict[str, Any] | None = field(default=None)
    # other endpoints whose model was trained on this harness ({"id", "name", "model", "exact"}): where to try it
    better: tuple[dict[str, Any], ...] = ()
    version_id: Any = None


def _seconds(ms: float) -> str:
    return f"{ms / 1000:.0f}" if ms >= 9500 else f"{ms / 1000:.1f}"


def recorded_turns(*, harness_id: int, model: str) -> dict[str, Any] | None:
    """The replies of this harness's versions on endpoints serving ``model``, in the latest preview rooms: how many,
    how many fell back, and how long those took (the turn's total, from its ``timings``)."""
    rooms = list(PreviewRoom.objects.filter(harness_version__harness_id=harness_id, endpoint__model=model)
                 .order_by("-created_at").values_list("pk", flat=True)[:RECENT_ROOMS])
    if not rooms:
        return None
    replies = {turn: p.get("fallback") for turn, p in PreviewEvent.objects.filter(
        room_id__in=rooms, type="reply").values_list("turn_id", "payload")}
    if not replies:
        return None
    fell_back = [t for t, fallback in replies.items() if fallback]
    totals = [p.get("total_ms") for p in PreviewEvent.objects.filter(
        room_id__in=rooms, type="timings", turn_id__in=fell_back).values_list("payload", flat=True)]
    totals = [float(t) for t in totals if isinstance(t, (int, float))]
    return {"turns": len(replies), "fallbacks": len(fell_back),
            "min_s": _seconds(min(totals)) if totals else None, "max_s": _seconds(max(totals)) if totals else None}


def _evidence_sentence(slug: str, ev: dict[str, Any]) -> str:
    if not ev["fallbacks"]:
        return f"Of the last {ev['turns']} recorded turns of {slug} on this model, none fell back."
    took = ""
    if ev["min_s"] is not None:
        took = f", after {ev['min_s']} s" if ev["min_s"] == ev["max_s"] else f", after {ev['min_s']}–{ev['max_s']} s"
    every = "every one" if ev["fallbacks"] == ev["turns"] else str(ev["fallbacks"])
    return (f"Of the last {ev['turns']} recorded turn{'s' if ev['turns'] != 1 else ''} of {slug} on this model, "
            f"{every} fell back to the fallback line{took}.")


def _versions_here(hashes) -> str:
    """The versions of this console's harnesses whose manifests the model saw (``tiny-room v1``), at most a few."""
    from harness_editor.models import HarnessVersion

    rows = (HarnessVersion.objects.filter(content_hash__in=list(hashes)).order_by("harness__slug", "number")
            .values_list("harness__slug", "number")[:6]) if hashes else []
    return ", ".join(f"{slug} v{number}" for slug, number in rows)


def endpoints_trained_on(version, *, exclude: ModelEndpoint | None = None) -> list[dict[str, Any]]:
    """The endpoints whose model was trained on ``version``'s harness, exact version first (``exact``: on this very
    manifest), with the name of the model: where a harness that the default model never saw can be tried."""
    hashes = set(version.harness.versions.values_list("content_hash", flat=True))
    out = []
    for endpoint in ModelEndpoint.objects.exclude(pk=exclude.pk if exclude else None).order_by("name"):
        trained = model_trained_harnesses(endpoint_id=endpoint.pk, served_model=endpoint.model)
        if trained is None:
            continue
        if version.content_hash in trained.manifest_hashes or hashes & trained.manifest_hashes \
                or version.harness.slug in trained.slugs:
            out.append({"id": endpoint.pk, "name": endpoint.name, "model": trained.model_name,
                        "exact": version.content_hash in trained.manifest_hashes})
    return sorted(out, key=lambda e: not e["exact"])


def model_fit(*, endpoint: ModelEndpoint, version) -> ModelFit | None:
    """The notice for ``version`` played on ``endpoint``, or None: its model was trained on this very manifest, or
    the registry does not know the model (nothing to say)."""
    from streams.engine.hooks import retry_policy

    trained = model_trained_harnesses(endpoint_id=endpoint.pk, served_model=endpoint.model)
    if trained is None or version.content_hash in trained.manifest_hashes:
        return None
    harness = version.harness
    seen = sorted(n for n, h in harness.versions.values_list("number", "content_hash")
                  if h in trained.manifest_hashes)
    evidence = recorded_turns(harness_id=harness.pk, model=endpoint.model)
    if seen or harness.slug in trained.slugs:
        what = f"v{', v'.join(map(str, seen))} of {harness.slug}" if seen else f"a version of {harness.slug}"
        return ModelFit(level="info", model=trained.model_name, harness=harness.slug, trained_on=trained.described,
                        headline=f"{trained.model_name} was trained on {what}, not on v{version.number}.",
                        message="Renamed tools or skills, or a reworded prompt, may throw it off.",
                        expectation=_evidence_sentence(harness.slug, evidence) if evidence else "",
                        evidence=evidence, version_id=version.pk)
    max_retries, fallback_line, _hook = retry_policy(version.manifest)
    here = _versions_here(trained.manifest_hashes)
    if trained.described:
        message = f"It was trained only on {'; '.join(trained.described)}{f' (here: {here})' if here else ''}."
    else:
        message = "No training on any harness is recorded for it."
    if evidence:
        expectation = _evidence_sentence(harness.slug, evidence)
    else:
        expectation = (f"Expect its turns to fall back: on a harness it never saw, a small model calls the wrong "
                       f"tools and fails the hooks until its {max_retries} retr{'y' if max_retries == 1 else 'ies'} "
                       f"run out (within the turn deadline of "
                       f"{version.manifest.constraints.turn_deadline_s:g} s), then says “{fallback_line}”.")
    return ModelFit(level="warning", model=trained.model_name, harness=harness.slug, message=message,
                    headline=f"{trained.model_name} was not trained on {harness.slug}.",
                    trained_on=trained.described, expectation=expectation, evidence=evidence,
                    better=tuple(endpoints_trained_on(version, exclude=endpoint)), version_id=version.pk)


@dataclass(frozen=True)
class EndpointModel:
    """One row of "which model knows which harness": an endpoint, the model behind it as training registered it,
    what that model was trained on (``trained_on``; empty: nothing recorded, ``known`` False: the registry does not
    know the model) and what was measured of it in a room (``measured``)."""

    id: int
    name: str
    model: str
    known: bool
    trained_on: tuple[str, ...] = ()
    here: str = ""
    measured: tuple[str, ...] = ()


def endpoint_model(endpoint: ModelEndpoint) -> EndpointModel:
    from streams.labels import model_short_name

    trained = model_trained_harnesses(endpoint_id=endpoint.pk, served_model=endpoint.model)
    if trained is None:
        return EndpointModel(id=endpoint.pk, name=endpoint.name, model=model_short_name(endpoint.model) or "",
                             known=False)
    return EndpointModel(id=endpoint.pk, name=endpoint.name, model=trained.model_name, known=True,
                         trained_on=trained.described, here=_versions_here(trained.manifest_hashes),
                         measured=trained.measured)


def endpoint_models() -> list[EndpointModel]:
    """Every endpoint with the model behind it and the harnesses it was trained on, by name: said on the page where
    a preview room is opened, before anyone picks an endpoint."""
    return [endpoint_model(e) for e in ModelEndpoint.objects.order_by("name")]
