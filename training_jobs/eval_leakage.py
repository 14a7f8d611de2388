"""Leakage between the training data on record and the evaluation sets on record (reads only).

Training data on record: the rows of every finished dataset build (what SFT and RL train on) and the general
prompts of every distillation stage recorded in a training job's config (stage 2 draws them deterministically
from ``general_prompts`` and ``seed``). Evaluation sets on record: the latest version of every eval set, and every
pinned version.

Two checks, both from the plain-Python core:

- text overlap (:func:`training_jobs.evals.leakage.find_leaks`): a T1 / T3 case's comments or gold reply, or a
  T4 prompt, found exactly, contained, or sharing a long n-gram with a training text;
- held-out names (:func:`training_jobs.evals.t2.t2_leaks`): a name, phrasing or setting that T2's held-out harness
  states use, found in a training text (T2 measures harnesses the model never saw).

:func:`leakage_report` is run by ``manage.py check_eval_leakage`` (exit 1 on any leak) and by the test suite on the
demo data; :func:`dataset_leaks` checks one dataset's rows before the build that wrote them is accepted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from training_jobs.eval_models import EvalSet, EvalSetVersion
from training_jobs.evals.cases import EvalCase, case_texts, parse_case
from training_jobs.evals.leakage import training_row_text
from training_jobs.models import Dataset, TrainingJob

MAX_REPORTED = 50


@dataclass(frozen=True)
class LeakRecord:
    eval_set: str  # "t1-live-stream-qa v2"
    case_id: str
    training: str  # "dataset <name> row 17" / "distillation prompts of job <name> #3"
    kind: str  # exact / contained / ngram / heldout:<kind>
    excerpt: str

    def describe(self) -> str:
        return f"{self.eval_set} case {self.case_id} in {self.training} ({self.kind}): {self.excerpt[:120]!r}"


@dataclass
class LeakageReport:
    sets: list[str] = field(default_factory=list)
    training_sources: int = 0
    training_texts: int = 0
    leaks: list[LeakRecord] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.leaks


def versions_on_record() -> list[EvalSetVersion]:
    """The latest version of every set, and every pinned version (the gate's evidence), once each."""
    out: dict[int, EvalSetVersion] = {}
    for eval_set in EvalSet.objects.select_related("pinned").order_by("name"):
        latest = eval_set.versions.order_by("-number").first()
        for v in (latest, eval_set.pinned):
            if v is not None:
                out[v.pk] = v
    return list(out.values())


def version_cases(version: EvalSetVersion) -> list[EvalCase]:
    return [parse_case(json.loads(raw)) for raw in
            version.cases.order_by("position").values_list("case_json", flat=True)]


def dataset_row_texts(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """One training text per row: its messages' contents and its tools as the model saw them."""
    for row in rows:
        yield training_row_text(row)


def training_sources() -> Iterator[tuple[str, list[str]]]:
    """(label, texts) of every training source on record."""
    from training_jobs.services.datasets import _read_rows

    for dataset in Dataset.objects.filter(status=Dataset.Status.SUCCEEDED).order_by("created_at"):
        if dataset.is_ready and (dataset.artifact_dir / "dataset").is_dir():
            yield f"dataset {dataset.name!r}", list(dataset_row_texts(_read_rows(dataset.artifact_dir / "dataset")))
    for label, prompts in distillation_prompts_on_record():
        yield label, prompts


def distillation_prompts_on_record() -> Iterator[tuple[str, list[str]]]:
    from training_jobs.hat.general_prompts import general_prompts

    for job in TrainingJob.objects.filter(kind__in=(TrainingJob.Kind.DISTILL, TrainingJob.Kind.PIPELINE)):
        config = job.config.get("distill", job.config) if isinstance(job.config, dict) else {}
        n, seed = config.get("general_prompts"), config.get("seed", 0)
        if isinstance(n, int) and n > 0 and isinstance(seed, int):
            yield f"distillation prompts of training job {job.name!r}", general_prompts(n, seed)


def _text_leaks(label: str, version: EvalSetVersion, cases: Sequence[EvalCase], texts: Sequence[str],
                source: str) -> list[LeakRecord]:
    from training_jobs.evals.leakage import find_leaks

    owners: list[str] = []
    eval_texts: list[str] = []
    for case in cases:
        for text in case_texts(case):
            owners.append(case.id)
            eval_texts.append(text)
    return [LeakRecord(label, owners[leak.eval_index], f"{source} text {leak.training_index}", leak.kind,
                       eval_texts[leak.eval_index])
            for leak in find_leaks(texts, eval_texts)]


def _heldout_leaks(label: str, cases: Sequence[EvalCase], texts: Sequence[str], source: str) -> list[LeakRecord]:
    from training_jobs.evals.t2 import t2_leaks

    return [LeakRecord(label, leak.cases[0] if leak.cases else "?", f"{source} text {leak.text_index}",
                       f"heldout:{leak.kind}", leak.term)
            for leak in t2_leaks(cases, texts)]


def leakage_report(*, sources: Iterable[tuple[str, list[str]]] | None = None,
                   versions: Sequence[EvalSetVersion] | None = None) -> LeakageReport:
    """Every leak between the training sources (default: all on record) and the eval set versions (default: all
    on record), at most ``MAX_REPORTED``."""
    versions = versions_on_record() if versions is None else list(versions)
    loaded = [(f"{v.eval_set.name} v{v.number}", v, version_cases(v)) for v in versions]
    report = LeakageReport(sets=[label for label, _, _ in loaded])
    for source, texts in (training_sources() if sources is None else sources):
        report.training_sources += 1
        report.training_texts += len(texts)
        for label, version, cases in loaded:
            if version.eval_set.kind == "t2":
                report.leaks += _heldout_leaks(label, cases, texts, source)
            report.leaks += _text_leaks(label, version, cases, texts, source)
            if len(report.leaks) >= MAX_REPORTED:
                report.leaks = report.leaks[:MAX_REPORTED]
                return report
    return report


def dataset_leaks(rows: Iterable[dict[str, Any]], *, name: str = "this build") -> list[LeakRecord]:
    """The leaks of one dataset's rows into the eval sets on record (empty: the build may be kept)."""
    return leakage_report(sources=[(f"dataset {name!r}", list(dataset_row_texts(rows)))]).leaks
