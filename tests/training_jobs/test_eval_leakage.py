"""No evaluation case or prompt on record appears in training data on record: the shipped eval sets against a
dataset really built by the service and the distillation prompts of a training job's config, and planted leaks
of every kind are found (T1 comment in a dataset row, a T2 held-out name in a harness, a T4 prompt among the
general prompts)."""

from __future__ import annotations

import io
import json
import shutil
from unittest import mock

import pytest
from django.core.management import call_command

from training_jobs import services, tasks
from training_jobs.eval_leakage import dataset_row_texts, leakage_report, version_cases, versions_on_record
from training_jobs.eval_services import eval_sets_seed_demo
from training_jobs.models import Dataset, TrainingJob


@pytest.fixture
def shipped_sets(db):
    return {v.eval_set.name: v for v in eval_sets_seed_demo()}


@pytest.fixture
def built_dataset(ml_staff):
    with mock.patch.object(tasks.dataset_build, "apply_async"):  # built here, not by a session worker
        d = services.dataset_build_start(user=ml_staff, kind="hsa",
                                         recipe={"variants_per_sample": 2, "harness_pool_size": 2},
                                         sources={"scenarios": [], "tiny_gold": 24, "tiny_gold_seed": 5})
    d = services.dataset_build_run(dataset_id=d.pk)
    assert d.status == "succeeded", d.error
    yield d
    shutil.rmtree(d.artifact_path, ignore_errors=True)


def _first_case(version):
    return version_cases(version)[0]


def test_training_data_on_record_is_clean_of_the_shipped_sets(shipped_sets, built_dataset, ml_staff):
    base = services.demo_base_model()
    TrainingJob.objects.create(name="distil", kind=TrainingJob.Kind.DISTILL, config={"general_prompts": 300, "seed": 1},
                               base_model=base, created_by=ml_staff)
    report = leakage_report()
    assert set(report.sets) >= {"t1-live-stream-qa v1", "t2-harness-variant-qa v1", "t3-robustness v1",
                                "t4-ifeval v1"}
    assert report.training_sources == 2 and report.training_texts > 300
    assert report.clean, [leak.describe() for leak in report.leaks]


def test_planted_leaks_of_every_kind_are_found(shipped_sets):
    # a comment long enough to be a copy rather than a coincidence (short ones count only when exactly equal)
    t1 = next(c for c in version_cases(shipped_sets["t1-live-stream-qa"]) if len(c.comments[0].text.split()) >= 10)
    t4 = _first_case(shipped_sets["t4-ifeval"])
    t2_cases = version_cases(shipped_sets["t2-harness-variant-qa"])
    from training_jobs.evals.t2 import set_heldout_terms

    term = sorted(set_heldout_terms(t2_cases))[0]
    rows = [{"messages": [{"role": "user", "content": f"[viewer] {t1.comments[0].text}"},
                          {"role": "assistant", "content": "sure"}], "tools": "[]"}]
    sources = [("dataset 'planted'", list(dataset_row_texts(rows))),
               ("distillation prompts", ["Write a poem.", t4.prompt]),
               ("harnesses", [json.dumps({"tools": [{"name": term, "description": "x"}]})])]
    report = leakage_report(sources=sources)
    found = {(leak.eval_set.split()[0], leak.case_id) for leak in report.leaks}
    assert ("t1-live-stream-qa", t1.id) in found
    assert ("t4-ifeval", t4.id) in found
    assert any(leak.kind.startswith("heldout:") and leak.excerpt == term for leak in report.leaks)


def test_the_command_exits_1_on_a_leak_and_0_when_clean(shipped_sets, built_dataset, monkeypatch):
    out = io.StringIO()
    call_command("check_eval_leakage", stdout=out)
    assert "no leaks" in out.getvalue()
    t1 = _first_case(shipped_sets["t1-live-stream-qa"])  # exactly equal: a leak however short
    monkeypatch.setattr("training_jobs.eval_leakage.distillation_prompts_on_record",
                        lambda: iter([("distillation prompts of job 'x'", [t1.comments[0].text])]))
    out = io.StringIO()
    with pytest.raises(SystemExit) as exc:
        call_command("check_eval_leakage", "--json", stdout=out)
    assert exc.value.code == 1
    data = json.loads(out.getvalue())
    assert not data["clean"] and data["leaks"][0]["case_id"] == t1.id


def test_versions_on_record_are_latest_and_pinned(shipped_sets, ml_staff):
    from training_jobs.eval_services import eval_set_export, eval_set_import

    t1 = shipped_sets["t1-live-stream-qa"]
    lines = eval_set_export(version=t1).splitlines()[:5]
    v2, created = eval_set_import(user=ml_staff, name="t1-live-stream-qa", kind="t1", jsonl_text="\n".join(lines))
    assert created
    on_record = {(v.eval_set.name, v.number) for v in versions_on_record()}
    assert ("t1-live-stream-qa", 1) in on_record and ("t1-live-stream-qa", 2) in on_record  # pinned v1, latest v2
    assert Dataset.objects.count() == 0
