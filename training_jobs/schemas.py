"""Typed inputs of the dataset jobs: where the canonical samples come from (:class:`Sources`), and how a recipe
or a source selection is validated into located errors (``operators[2].probability``).

The recipe itself is :class:`training_jobs.hsa.dataset.Recipe`. Plain pydantic, no ORM: the console's services,
the API and ``manage.py build_hsa_dataset`` all use these.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness_editor.schemas import Manifest, pydantic_errors
from training_jobs.hsa.dataset import Recipe
from training_jobs.hsa.samples import DEMO_MANIFESTS, Sample, scenario_samples, tiny_model_samples

VERSION_REF_RE = r"^[-a-zA-Z0-9_]+@\d+$"


def demo_scenarios() -> dict[str, Any]:
    """The demo scenario files by id (file stem): ``{id: Path}``."""
    from streams.scenarios import demo_scenario_paths

    return {p.stem: p for p in demo_scenario_paths()}


class WrittenTurns(BaseModel):
    """Gold turns a team wrote for one approved harness version (:mod:`training_jobs.hsa.written`: comment, skill,
    tool calls answered by the tool's own binding, reply): how a harness the reference policy does not know (an
    order desk, a help desk) gets samples."""

    model_config = ConfigDict(extra="forbid")

    version: str = Field(description="The approved harness version ('slug@number') the turns are written for.")
    turns: list[dict[str, Any]] = Field(min_length=1, max_length=10_000,
                                        description="The written turns (see training_jobs.hsa.written).")

    @field_validator("version")
    @classmethod
    def _version_ref(cls, v: str) -> str:
        import re

        if not re.match(VERSION_REF_RE, v):
            raise ValueError(f"write the version as 'slug@number', not {v!r}")
        return v


class Sources(BaseModel):
    """Which gold turns become canonical samples.

    - every comment of the selected demo *scenarios*, answered by the reference policy under each selected demo
      manifest and each selected approved harness version (``slug@number``);
    - ``tiny_gold`` samples from the tiny model's seeded gold generator (the ``tiny_room`` harness);
    - the recorded turns of the selected ``preview_rooms`` (interactive previews and scenario runs, by id) under
      approved harness versions, each kept only when it is right (:mod:`training_jobs.hsa.recorded`);
    - ``written`` turns for approved harness versions (:class:`WrittenTurns`), each checked against its harness.

    ``max_samples`` keeps an evenly spaced subset (deterministic), for quick datasets."""

    model_config = ConfigDict(extra="forbid")

    scenarios: list[str] = Field(default_factory=lambda: sorted(demo_scenarios()),
                                 description="Demo scenario ids (streams/scenarios/*.yaml); [] = none.")
    demo_manifests: list[str] = Field(default_factory=lambda: ["skincare_v1", "skincare_v2", "skincare_v3"],
                                      description=f"Demo manifests the scenarios are answered under: "
                                                  f"{', '.join(DEMO_MANIFESTS)}.")
    versions: list[str] = Field(default_factory=list, description="Approved harness versions ('slug@number') "
                                "the scenarios are also answered under.")
    tiny_gold: int = Field(0, ge=0, le=1_000_000, description="Samples from the tiny model's gold generator.")
    tiny_gold_seed: int = Field(0, ge=0, le=2**32 - 1, description="Seed of the tiny gold generator.")
    preview_rooms: list[str] = Field(default_factory=list, description="Preview rooms and scenario runs (ids) "
                                     "whose recorded turns become samples when the reference policy agrees.")
    written: list[WrittenTurns] = Field(default_factory=list, max_length=100,
                                        description="Gold turns written for approved harness versions.")
    max_samples: int | None = Field(None, ge=1, le=10_000_000, description="Keep at most this many samples "
                                                                          "(evenly spaced).")

    @field_validator("scenarios")
    @classmethod
    def _known_scenarios(cls, v: list[str]) -> list[str]:
        known = demo_scenarios()
        unknown = [s for s in v if s not in known]
        if unknown:
            raise ValueError(f"unknown scenarios {unknown}; known: {', '.join(sorted(known))}")
        return list(dict.fromkeys(v))

    @field_validator("demo_manifests")
    @classmethod
    def _known_manifests(cls, v: list[str]) -> list[str]:
        unknown = [m for m in v if m not in DEMO_MANIFESTS]
        if unknown:
            raise ValueError(f"unknown demo manifests {unknown}; known: {', '.join(DEMO_MANIFESTS)}")
        return list(dict.fromkeys(v))

    @field_validator("versions")
    @classmethod
    def _version_refs(cls, v: list[str]) -> list[str]:
        import re

        bad = [r for r in v if not re.match(VERSION_REF_RE, r)]
        if bad:
            raise ValueError(f"write versions as 'slug@number', not {bad}")
        return list(dict.fromkeys(v))

    @field_validator("preview_rooms")
    @classmethod
    def _room_ids(cls, v: list[str]) -> list[str]:
        bad = [r for r in v if not isinstance(r, str) or not is_uuid(r)]
        if bad:
            raise ValueError(f"preview rooms are named by their id (a UUID), not {bad}")
        return list(dict.fromkeys(str(uuid.UUID(r)) for r in v))

    @model_validator(mode="after")
    def _something(self) -> Sources:
        scenario_part = self.scenarios and (self.demo_manifests or self.versions)
        if not scenario_part and not self.tiny_gold and not self.preview_rooms and not self.written:
            raise ValueError("no samples: pick scenarios and a harness to answer them under, tiny gold samples, "
                             "recorded preview rooms or written turns")
        return self

    def collect(self, versions: Mapping[str, Manifest] | None = None, recorded: Sequence[Sample] = (),
                written: Sequence[Sample] = ()) -> list[Sample]:
        """The canonical samples, in a fixed order. ``versions``: the manifest of each ``versions`` entry;
        ``recorded``: the samples of the ``preview_rooms``' recorded turns
        (:func:`training_jobs.hsa.recorded.recorded_samples`); ``written``: the samples of the ``written`` turns
        (:func:`training_jobs.services.datasets.written_source_samples`)."""
        versions = versions or {}
        samples: list[Sample] = []
        harnesses: list[str | tuple[str, Manifest]] = [*self.demo_manifests]
        harnesses += [(ref, versions[ref]) for ref in self.versions]
        if self.scenarios and harnesses:
            paths = demo_scenarios()
            samples += scenario_samples(harnesses, [paths[s] for s in self.scenarios])
        if self.tiny_gold:
            samples += tiny_model_samples(self.tiny_gold, seed=self.tiny_gold_seed)
        samples += recorded
        samples += written
        if self.max_samples and len(samples) > self.max_samples:
            step = len(samples) / self.max_samples
            samples = [samples[math.floor(i * step)] for i in range(self.max_samples)]
        return samples


def is_uuid(value: Any) -> bool:
    """Whether ``value`` reads as a UUID (ids of rooms, datasets, models)."""
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def located_errors(exc: ValidationError, prefix: str = "") -> list[dict[str, str]]:
    """Pydantic's errors as ``[{"path", "message"}]`` with ``prefix`` before each path (``recipe.seed``)."""
    out = []
    for e in pydantic_errors(exc):
        path = e.path
        if prefix:
            path = f"{prefix}.{path}" if path and not path.startswith("[") else f"{prefix}{path}"
        out.append({"path": path, "message": e.message})
    return out


def parse_recipe(data: Any) -> Recipe:
    """A recipe from JSON data; raises ValidationError."""
    if isinstance(data, Recipe):
        return data
    if not isinstance(data, Mapping):
        raise TypeError("a recipe is a JSON object")
    return Recipe.model_validate(dict(data))


def parse_sources(data: Any) -> Sources:
    if isinstance(data, Sources):
        return data
    if not isinstance(data, Mapping):
        raise TypeError("sources is a JSON object")
    return Sources.model_validate(dict(data))


__all__ = ["Recipe", "Sources", "WrittenTurns", "located_errors", "parse_recipe", "parse_sources"]
