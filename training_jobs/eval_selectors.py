"""Reads of eval sets, their versions and cases (the browser's filters), and of the turn a case is saved from."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, OuterRef, QuerySet, Subquery

from training_jobs.eval_models import EvalCase, EvalSet, EvalSetVersion

# The kind-specific fields the case table filters on, per set kind: (facet key, label). Each is a value a case
# lists (training_jobs.eval_services.case_facets); the choices are the values the version holds.
FACETS: dict[str, list[tuple[str, str]]] = {
    "t1": [("intent", "Intent"), ("tool", "Expected tool"), ("skill", "Expected skill"),
           ("claim", "Forbidden claim"), ("harness", "Harness")],
    "t2": [("intent", "Intent"), ("tool", "Expected tool"), ("operator", "Held-out operator"),
           ("claim", "Forbidden claim"), ("harness", "Harness")],
    "t3": [("level", "Perturbation level"), ("fault", "Tool fault"), ("tool", "Expected tool"),
           ("claim", "Forbidden claim"), ("harness", "Harness")],
    "t4": [("instruction_group", "Instruction group"), ("instruction", "Instruction")],
}
FACET_KEYS: frozenset[str] = frozenset(k for specs in FACETS.values() for k, _ in specs)


def eval_set_list(*, kind: str | None = None) -> QuerySet[EvalSet]:
    """Every set, with its latest version (``latest_number``, ``latest_hash``, ``latest_cases``) and its pin."""
    latest = EvalSetVersion.objects.filter(eval_set=OuterRef("pk")).order_by("-number")
    qs = (EvalSet.objects.select_related("pinned", "created_by")
          .annotate(latest_number=Subquery(latest.values("number")[:1]),
                    latest_hash=Subquery(latest.values("content_hash")[:1]),
                    latest_cases=Subquery(latest.values("case_count")[:1]),
                    version_count=Count("versions")))
    if kind:
        qs = qs.filter(kind=kind)
    return qs


def eval_set_get(*, name: str) -> EvalSet:
    return EvalSet.objects.select_related("pinned", "created_by").get(name=name)


def eval_set_versions(*, eval_set: EvalSet) -> QuerySet[EvalSetVersion]:
    return eval_set.versions.select_related("author", "parent").order_by("-number")


def eval_set_latest(*, eval_set: EvalSet) -> EvalSetVersion | None:
    return eval_set.versions.order_by("-number").first()


def eval_set_version_get(*, eval_set: EvalSet, number: int) -> EvalSetVersion:
    return EvalSetVersion.objects.select_related("eval_set", "author", "parent").get(eval_set=eval_set,
                                                                                      number=number)


def _bar(value: str) -> str:
    return str(value).replace("|", "").strip()


def eval_case_list(*, version: EvalSetVersion, tag: str | None = None, q: str | None = None,
                   facets: dict[str, str] | None = None) -> QuerySet[EvalCase]:
    """The cases of a version in file order, filtered: ``tag`` (one tag, exact), ``q`` (text anywhere in the case:
    comments, gold reply, prompt, claims, id; case-insensitive), ``facets`` (``{"tool": "catalog.stock"}``: cases
    listing that value, see :data:`FACETS`)."""
    qs = EvalCase.objects.filter(version=version).order_by("position")
    if tag:
        qs = qs.filter(tags_text__contains=f"|{_bar(tag)}|")
    if q and q.strip():
        qs = qs.filter(search_text__contains=q.strip().casefold())
    for key, value in (facets or {}).items():
        if key in FACET_KEYS and value:
            qs = qs.filter(facets_text__contains=f"|{key}={_bar(value)}|")
    return qs


def eval_case_get(*, version: EvalSetVersion, case_id: str) -> EvalCase:
    return EvalCase.objects.select_related("version__eval_set").get(version=version, case_id=case_id)


def eval_case_rows(*, version: EvalSetVersion) -> list[dict[str, Any]]:
    """What a new version copies from this one: each case's stored line and filter fields, in order."""
    return list(EvalCase.objects.filter(version=version).order_by("position")
                .values("case_id", "tags", "tags_text", "facets_text", "search_text", "case_json"))


def facet_choices(version: EvalSetVersion) -> list[dict[str, Any]]:
    """The filters the case table offers for this version's kind, with the values its cases hold (and counts)."""
    counts = version.facet_counts or {}
    out = []
    for key, label in FACETS.get(version.eval_set.kind, []):
        values = counts.get(key) or {}
        if values:
            out.append({"key": key, "label": label, "values": sorted(values.items())})
    return out


def preview_turn(*, room_id, turn_id: str) -> dict[str, Any] | None:
    """One folded turn of a preview room or scenario run (as the transcript shows it), or None."""
    from streams import selectors as stream_selectors

    return next((t for t in stream_selectors.preview_transcript(room_id=room_id) if t["turn_id"] == turn_id), None)


def saveable_sets() -> QuerySet[EvalSet]:
    """The sets a recorded turn can be saved into: T1 (a turn is a live-stream QA case under its own harness)."""
    return EvalSet.objects.filter(kind=EvalSet.Kind.T1).order_by("name")
