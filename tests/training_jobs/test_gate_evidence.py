"""The approval gate's evidence from evaluation runs (training_jobs.gate): which policy applies, which runs count
(finished, every case, the pinned set version, the policy's endpoint, k and seed), each rule (run present,
minimums, regressions against production on the paired per-case change, optionally on its interval), flipped
cases, T4 without a harness; starting the missing runs (service and page, per role); the policy in the admin,
audited; runs played for real through the scripted endpoint unlock approval; the demo seed gates glow-gadget v3.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from console.errors import InvalidTransition, NotAllowed
from console.models import AuditEvent
from harness_editor import services as harness_services
from harness_editor.gate import GateFailed
from harness_editor.models import HarnessVersion, Label
from streams.models import ModelEndpoint
from tests.harness_editor.gate_helpers import compliance_lead  # noqa: F401  (fixture)
from tests.streams.preview_helpers import GOOD, price_script, scripted_model  # noqa: F401  (fixtures)
from tests.streams.scripted_endpoint import reply, scripted_endpoint  # noqa: F401  (fixture)
from tests.training_jobs.eval_helpers import t1_case, t4_case
from training_jobs import eval_run_services
from training_jobs import gate as G
from training_jobs.eval_models import EvalSet
from training_jobs.eval_run_models import EvalResult, EvalRun
from training_jobs.eval_services import eval_set_import
from training_jobs.gate_models import GatePolicy, GateRequirement
from training_jobs.gate_services import gate_policy_seed_demo, gate_runs_start

pytestmark = pytest.mark.django_db

SUCCEEDED = EvalRun.Status.SUCCEEDED


def _import(user, name: str, kind: str, cases: list[dict], *, pin: bool = True):
    version, _ = eval_set_import(user=user, name=name, kind=kind, jsonl_text="\n".join(json.dumps(c) for c in cases))
    if pin:
        EvalSet.objects.filter(pk=version.eval_set_id).update(pinned=version)
    return version


@pytest.fixture
def h(harness_with_history):
    return harness_with_history


@pytest.fixture
def t1(ml_staff):
    return _import(ml_staff, "t1-gate", "t1", [t1_case(i) for i in range(4)])


@pytest.fixture
def endpoint(db):
    return ModelEndpoint.objects.create(name="prod-model", base_url="http://127.0.0.1:9/v1", model="prod",
                                        kind="vllm")


def _policy(harness, endpoint, eval_set_version, rules=(("accuracy", None, None),), **fields) -> GatePolicy:
    policy = GatePolicy.objects.create(harness=harness, endpoint=endpoint, **fields)
    for metric, minimum, max_drop in rules:
        GateRequirement.objects.create(policy=policy, eval_set=eval_set_version.eval_set, metric=metric,
                                       minimum=minimum, max_drop=max_drop)
    return policy


def _run(user, set_version, harness_version, endpoint, verdicts: dict[str, list[bool]], *, status=SUCCEEDED,
         k: int | None = None, seed: int = 0, max_cases: int | None = None) -> EvalRun:
    """A run with one result row per (case, sample): solved samples are accurate and effective, the others are
    neither; the summary is what the real service computes from those rows."""
    k = k or max(len(v) for v in verdicts.values())
    run = EvalRun.objects.create(name=f"run of {harness_version}", eval_set_version=set_version,
                                 harness_version=harness_version, endpoint=endpoint, k=k, seed=seed,
                                 max_cases=max_cases, created_by=user, status=status,
                                 finished_at=timezone.now() if status in EvalRun.FINISHED else None)
    for position, (case_id, samples) in enumerate(verdicts.items()):
        for sample, ok in enumerate(samples):
            EvalResult.objects.create(run=run, case_id=case_id, position=position, sample=sample, solved=ok,
                                      accuracy=float(ok), effectiveness=float(ok), reply="r")
    run.summary = eval_run_services.eval_run_summary(run)
    run.save(update_fields=["summary"])
    return run


def _cases(*solved: bool) -> dict[str, list[bool]]:
    return {f"t1-{i:03d}": [ok] for i, ok in enumerate(solved)}


def _rule(evidence, fragment: str):
    matches = [r for r in evidence.rules if fragment in r.name]
    assert len(matches) == 1, [r.name for r in evidence.rules]
    return matches[0]


# --- which policy ----------------------------------------------------------------------------------------------

def test_no_policy_switched_off_and_default_policies(h, t1, endpoint):
    v2 = h["v2"]
    assert G.approval_evidence(v2).summary == G.NO_POLICY
    default = _policy(None, endpoint, t1)
    evidence = G.approval_evidence(v2)
    assert evidence.enabled and not evidence.passed  # the default applies to a harness without its own
    assert "the default for every harness" in evidence.policy[0]
    own = _policy(h["harness"], endpoint, t1, enabled=False)
    evidence = G.approval_evidence(v2)  # the harness's own policy wins, even switched off
    assert not evidence.enabled and evidence.passed and evidence.summary == G.SWITCHED_OFF
    assert G.policy_for(h["harness"]) == own and default.pk != own.pk


def test_one_policy_per_harness_and_one_default(h, t1, endpoint):
    from django.db import IntegrityError, transaction

    _policy(None, endpoint, t1)
    with pytest.raises(IntegrityError), transaction.atomic():
        GatePolicy.objects.create(harness=None, endpoint=endpoint)
    _policy(h["harness"], endpoint, t1)
    with pytest.raises(IntegrityError), transaction.atomic():
        GatePolicy.objects.create(harness=h["harness"], endpoint=endpoint)


def test_a_policy_without_required_sets_fails_closed(h, endpoint):
    GatePolicy.objects.create(harness=h["harness"], endpoint=endpoint)
    evidence = G.approval_evidence(h["v2"])
    assert not evidence.passed and [r.name for r in evidence.failing] == ["policy: required eval sets"]


def test_an_unpinned_set_fails_with_a_link_to_the_set(h, ml_staff, endpoint):
    version = _import(ml_staff, "t1-unpinned", "t1", [t1_case(1)], pin=False)
    _policy(h["harness"], endpoint, version)
    rule = _rule(G.approval_evidence(h["v2"]), "pinned version")
    assert not rule.passed and "ML lead pins" in rule.detail and rule.link == "/eval-sets/t1-unpinned/"


# --- which runs count ---------------------------------------------------------------------------------------------

def test_missing_run_fails_and_says_what_to_start(h, t1, endpoint, ml_staff):
    _policy(h["harness"], endpoint, t1, rules=[("accuracy", 50.0, 5.0)], k=2, seed=3)
    evidence = G.approval_evidence(h["v2"])
    assert not evidence.passed and evidence.baseline == "production → v1"
    run_rule = _rule(evidence, "finished run")
    assert run_rule.name == "t1-gate v1: finished run"
    assert run_rule.detail == ("no finished run of v2 on t1-gate v1 (all 4 cases) against endpoint prod-model, k=2, "
                               "seed 3")
    assert _rule(evidence, "≥ 50").detail == "no finished run to score"
    assert "no finished run of v2 to compare" in _rule(evidence, "drops at most").detail
    assert evidence.missing_runs == ("t1-gate v1 · glow-gadget v2", "t1-gate v1 · glow-gadget v1")
    assert evidence.start_url == "/gate/glow-gadget/v2/start-runs/"
    assert "Runs must use k=2, seed 3" in evidence.policy
    # a run in progress is said, and not offered again
    _run(ml_staff, t1, h["v2"], endpoint, _cases(True), status=EvalRun.Status.RUNNING, k=2, seed=3)
    evidence = G.approval_evidence(h["v2"])
    assert "one is running" in _rule(evidence, "finished run").detail
    assert evidence.missing_runs[0].endswith("(in progress: running)")


@pytest.mark.parametrize("mismatch", ["failed", "other endpoint", "partial", "other k", "other seed", "other version",
                                      "other set version"])
def test_runs_that_are_not_evidence(h, t1, endpoint, ml_staff, mismatch):
    _policy(h["harness"], endpoint, t1, k=1, seed=0)
    kwargs: dict = {}
    set_version, harness_version, ep = t1, h["v2"], endpoint
    if mismatch == "failed":
        kwargs["status"] = EvalRun.Status.FAILED
    elif mismatch == "other endpoint":
        ep = ModelEndpoint.objects.create(name="other", base_url="http://127.0.0.1:9/v1", model="o", kind="vllm")
    elif mismatch == "partial":
        kwargs["max_cases"] = 2
    elif mismatch == "other k":
        kwargs["k"] = 2
    elif mismatch == "other seed":
        kwargs["seed"] = 5
    elif mismatch == "other version":
        harness_version = h["v1"]
    else:
        set_version = _import(ml_staff, "t1-gate", "t1", [t1_case(i) for i in range(5)], pin=False)
    verdicts = {f"t1-{i:03d}": [True] * (kwargs.get("k") or 1) for i in range(4)}
    _run(ml_staff, set_version, harness_version, ep, verdicts, **kwargs)
    assert not _rule(G.approval_evidence(h["v2"]), "finished run").passed
    # and the one run that is evidence
    _run(ml_staff, t1, h["v2"], endpoint, _cases(True, True, True, True))
    rule = _rule(G.approval_evidence(h["v2"]), "finished run")
    assert rule.passed and "(k=1, seed 0)" in rule.detail


# --- minimums and regressions --------------------------------------------------------------------------------------

def test_minimum_and_regression_rules_with_scores_deltas_and_flipped_cases(h, t1, endpoint, ml_staff):
    _policy(h["harness"], endpoint, t1, rules=[("accuracy", 70.0, 10.0), ("effectiveness", None, 30.0)])
    base = _run(ml_staff, t1, h["v1"], endpoint, _cases(True, True, True, False))
    cand = _run(ml_staff, t1, h["v2"], endpoint, _cases(True, False, True, True))
    evidence = G.approval_evidence(h["v2"])
    minimum = _rule(evidence, "Accuracy ≥ 70")
    assert minimum.passed and minimum.detail.startswith("75.0 (95 % CI ")
    acc = _rule(evidence, "Accuracy drops at most 10 points")
    eff = _rule(evidence, "Effectiveness drops at most 30 points")
    assert acc.passed and acc.detail.startswith("change +0.0 points") and eff.passed
    s, = evidence.sets
    assert s.run_id == str(cand.pk) and s.baseline_run_id == str(base.pk)
    assert [c.case_id for c in s.regressions] == ["t1-001"] and [c.case_id for c in s.fixes] == ["t1-003"]
    assert s.note == "1 case(s) solved by production v1 and not by this version; 1 the other way"
    accuracy = next(m for m in s.metrics if m.metric == "accuracy")
    assert accuracy.candidate.mean == 75.0 and accuracy.baseline.mean == 75.0 and accuracy.delta == 0.0
    assert accuracy.delta_ci_low < 0 < accuracy.delta_ci_high
    assert [m.metric for m in s.metrics] == ["accuracy", "effectiveness", "pass_k"]
    assert evidence.passed and evidence.missing_runs == () and evidence.start_url == ""


def test_failing_minimum_and_regression(h, t1, endpoint, ml_staff):
    _policy(h["harness"], endpoint, t1, rules=[("accuracy", 80.0, 20.0)])
    _run(ml_staff, t1, h["v1"], endpoint, _cases(True, True, True, True))
    _run(ml_staff, t1, h["v2"], endpoint, _cases(True, False, False, True))
    evidence = G.approval_evidence(h["v2"])
    assert _rule(evidence, "≥ 80").detail.startswith("50.0 (95 % CI ") and _rule(evidence, "≥ 80").detail.endswith(
        "< 80")
    regression = _rule(evidence, "drops at most 20")
    assert not regression.passed and regression.detail.startswith("change -50.0 points")
    assert "more than the allowed 20" in regression.detail
    assert evidence.summary == "The evaluation gate fails: 2 of 3 rules do not hold."
    assert [c.case_id for c in evidence.sets[0].regressions] == ["t1-001", "t1-002"]


def test_regression_judged_on_the_interval_is_stricter(h, t1, endpoint, ml_staff):
    policy = _policy(h["harness"], endpoint, t1, rules=[("accuracy", None, 30.0)])
    _run(ml_staff, t1, h["v1"], endpoint, _cases(True, True, True, True))
    _run(ml_staff, t1, h["v2"], endpoint, _cases(True, False, True, True))  # -25 on the mean, interval to -50
    assert _rule(G.approval_evidence(h["v2"]), "drops at most").passed
    policy.regression_needs_ci = True
    policy.save()
    rule = _rule(G.approval_evidence(h["v2"]), "drops at most")
    assert not rule.passed and "does not exclude a drop of more than 30" in rule.detail


def test_missing_baseline_run_fails_the_regression_rule(h, t1, endpoint, ml_staff):
    _policy(h["harness"], endpoint, t1, rules=[("accuracy", None, 5.0)])
    _run(ml_staff, t1, h["v2"], endpoint, _cases(True, True, True, True))
    evidence = G.approval_evidence(h["v2"])
    rule = _rule(evidence, "drops at most")
    assert not rule.passed and "no finished run of production v1" in rule.detail
    assert evidence.missing_runs == ("t1-gate v1 · glow-gadget v1",)


def test_nothing_to_compare_without_production_or_when_this_is_production(h, t1, endpoint, ml_staff):
    _policy(h["harness"], endpoint, t1, rules=[("accuracy", None, 5.0)])
    _run(ml_staff, t1, h["v2"], endpoint, _cases(True, True, True, True))
    Label.objects.filter(harness=h["harness"], name="production").delete()
    evidence = G.approval_evidence(h["v2"])
    rule = _rule(evidence, "drops at most")
    assert rule.passed and rule.detail == "nothing to compare: no version carries the production label"
    assert evidence.baseline == "no production version" and evidence.passed
    _run(ml_staff, t1, h["v1"], endpoint, _cases(True, True, True, True))
    Label.objects.create(harness=h["harness"], name="production", version=h["v1"], moved_by=ml_staff)
    evidence = G.approval_evidence(h["v1"])
    assert evidence.baseline == "v1 is the production version" and _rule(evidence, "drops at most").passed


def test_ifeval_set_needs_a_run_of_the_production_model_without_harness(h, endpoint, ml_staff):
    t4 = _import(ml_staff, "t4-gate", "t4", [t4_case(1), t4_case(2)])
    with pytest.raises(ValidationError):
        GateRequirement(policy=GatePolicy(endpoint=endpoint), eval_set=t4.eval_set, metric="prompt_strict",
                        max_drop=1.0).full_clean(exclude=["policy"])
    with pytest.raises(ValidationError):
        GateRequirement(policy=GatePolicy(endpoint=endpoint), eval_set=t4.eval_set,
                        metric="accuracy").full_clean(exclude=["policy"])
    _policy(h["harness"], endpoint, t4, rules=[("prompt_strict", 60.0, None)])
    assert G.approval_evidence(h["v2"]).missing_runs == ("t4-gate v1 · no harness (IFEval)",)
    run = _run(ml_staff, t4, None, endpoint, {"ifeval-1": [True], "ifeval-2": [False]})
    run.summary = {**run.summary, "ifeval": {"0": {"prompt_strict": 50.0, "instruction_strict": 50.0, "prompts": 2}}}
    run.save()
    evidence = G.approval_evidence(h["v2"])
    assert _rule(evidence, "finished run").passed and "evidence about the production model" in _rule(
        evidence, "finished run").detail
    rule = _rule(evidence, "IFEval prompt-level strict ≥ 60")
    assert not rule.passed and rule.detail == "50.0 < 60"
    assert [m.metric for m in evidence.sets[0].metrics] == ["prompt_strict", "instruction_strict"]


# --- starting the missing runs -----------------------------------------------------------------------------------

def test_gate_runs_start_queues_what_is_missing_with_the_policy_settings(h, t1, endpoint, ml_staff, reviewer,
                                                                         django_capture_on_commit_callbacks,
                                                                         monkeypatch):
    sent = []
    monkeypatch.setattr("training_jobs.tasks.eval_run.apply_async", lambda **kw: sent.append(kw))
    with pytest.raises(InvalidTransition, match="no evaluation gate applies"):
        gate_runs_start(user=ml_staff, version=h["v2"])
    _policy(h["harness"], endpoint, t1, rules=[("accuracy", None, 5.0)], k=2, seed=4)
    with pytest.raises(NotAllowed):
        gate_runs_start(user=reviewer, version=h["v2"])
    with django_capture_on_commit_callbacks(execute=True):
        runs = gate_runs_start(user=ml_staff, version=h["v2"])
    assert [(r.harness_version_id, r.eval_set_version_id, r.endpoint_id, r.k, r.seed) for r in runs] == [
        (h["v2"].pk, t1.pk, endpoint.pk, 2, 4), (h["v1"].pk, t1.pk, endpoint.pk, 2, 4)]
    assert len(sent) == 2 and all(s["queue"] == "gpu" for s in sent)
    with pytest.raises(InvalidTransition, match="finished or in progress"):
        gate_runs_start(user=ml_staff, version=h["v2"])


@pytest.mark.parametrize("role, expected", [("ml_staff", 302), ("ml_lead", 302), ("reviewer", 403),
                                            ("manager", 403), ("operator", 403), ("outsider", 403),
                                            ("anonymous", 302)])
def test_start_runs_page_action_per_role(request, client, h, t1, endpoint, role, expected, monkeypatch):
    monkeypatch.setattr("training_jobs.tasks.eval_run.apply_async", lambda **kw: None)
    _policy(h["harness"], endpoint, t1)
    if role != "anonymous":
        client.force_login(request.getfixturevalue(role))
    response = client.post("/gate/glow-gadget/v2/start-runs/")
    assert response.status_code == expected
    started = EvalRun.objects.filter(harness_version=h["v2"]).count()
    if role in ("ml_staff", "ml_lead"):
        assert response["Location"] == "/harnesses/glow-gadget/v2/" and started == 1
    else:
        assert started == 0
        if role == "anonymous":
            assert "/accounts/login/" in response["Location"]


def test_start_runs_page_404_and_nothing_to_start(client, h, t1, endpoint, ml_staff):
    client.force_login(ml_staff)
    assert client.post("/gate/glow-gadget/v99/start-runs/").status_code == 404
    assert client.get("/gate/glow-gadget/v2/start-runs/").status_code == 405
    response = client.post("/gate/glow-gadget/v2/start-runs/", follow=True)  # no policy
    assert "Nothing started: no evaluation gate applies" in response.content.decode()


def test_version_page_offers_the_start_button_to_ml_staff_only(client, h, t1, endpoint, ml_staff, reviewer):
    _policy(h["harness"], endpoint, t1)
    client.force_login(reviewer)
    body = client.get("/harnesses/glow-gadget/v2/").content.decode()
    assert 'data-testid="gate-missing"' in body and 'data-testid="gate-start-runs"' not in body
    client.force_login(ml_staff)
    body = client.get("/harnesses/glow-gadget/v2/").content.decode()
    assert 'data-testid="gate-start-runs"' in body and "/gate/glow-gadget/v2/start-runs/" in body


# --- end to end: runs played through the one turn engine unlock approval -------------------------------------

def test_runs_played_for_real_unlock_approval(h, ml_staff, reviewer, scripted_model, scripted_endpoint):
    t1 = _import(ml_staff, "t1-real", "t1", [t1_case(i) for i in range(3)])
    _policy(h["harness"], scripted_model, t1, rules=[("accuracy", 60.0, 40.0), ("effectiveness", None, 40.0)])
    with pytest.raises(GateFailed) as exc:
        harness_services.version_approve(user=reviewer, version=h["v2"])
    assert [e["path"] for e in exc.value.errors][0] == "gate.t1-real v1: finished run"
    for hv, wrong_last in ((h["v1"], False), (h["v2"], True)):
        run = eval_run_services.eval_run_start(user=ml_staff, eval_set_version=t1, endpoint=scripted_model,
                                               harness_version=hv, enqueue=False)
        for _ in range(2):
            price_script(scripted_endpoint)
        if wrong_last:  # the last case: a figure attributed to the wrong product, retried and still wrong
            price_script(scripted_endpoint, text="The HydraGlow serum is $34 right now.")
            for _ in range(4):
                scripted_endpoint.add(reply("The HydraGlow serum is $34 right now."))
        else:
            price_script(scripted_endpoint)
        assert eval_run_services.eval_run_execute(run_id=run.pk).status == SUCCEEDED
    evidence = G.approval_evidence(h["v2"])
    s, = evidence.sets
    assert [c.case_id for c in s.regressions] == ["t1-002"] and s.fixes == ()
    assert evidence.passed, [(r.name, r.detail) for r in evidence.failing]
    v2 = harness_services.version_approve(user=reviewer, version=h["v2"], comment="evidence attached")
    gate_data = AuditEvent.objects.filter(action="version.approved", target="version:2").latest("id").data["gate"]
    assert v2.status == "approved" and gate_data["passed"] and gate_data["runs"] == [s.run_id]
    assert gate_data["baseline_runs"] == [s.baseline_run_id]


def test_gate_api_shows_the_real_evidence(h, t1, endpoint, ml_staff, reviewer):
    _policy(h["harness"], endpoint, t1, rules=[("accuracy", 50.0, 10.0)])
    base = _run(ml_staff, t1, h["v1"], endpoint, _cases(True, True, True, True))
    cand = _run(ml_staff, t1, h["v2"], endpoint, _cases(True, True, True, False))
    client = APIClient()
    client.force_login(reviewer)
    body = client.get("/api/harnesses/glow-gadget/versions/2/gate").json()
    assert body["enabled"] and not body["passed"] and body["failing"] == [
        "t1-gate v1: Accuracy drops at most 10 points against production"]
    s = body["sets"][0]
    assert s["regressions"] == [{"case_id": "t1-003", "candidate_link": f"/evals/runs/{cand.pk}/cases/t1-003/",
                                 "baseline_link": f"/evals/runs/{base.pk}/cases/t1-003/"}]
    assert s["run_link"] == f"/evals/runs/{cand.pk}/"
    assert s["compare_link"] == f"/evals/runs/compare/?runs={base.pk},{cand.pk}"
    accuracy = s["metrics"][0]
    assert accuracy["candidate"]["mean"] == 75.0 and accuracy["baseline"]["mean"] == 100.0
    assert accuracy["delta"] == -25.0
    response = client.post("/api/harnesses/glow-gadget/versions/2/approve", {}, format="json")
    assert response.status_code == 409 and response.json()["errors"][0]["path"] == body["rules"][-1]["name"].join(
        ["gate.", ""])


# --- the admin and the demo --------------------------------------------------------------------------------------

def test_policy_admin_saves_and_audits(client, h, t1, endpoint, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "root@example.test", "pw-not-used-1234")
    client.force_login(admin)
    assert client.get("/admin/training_jobs/gatepolicy/add/").status_code == 200
    form = {"harness": h["harness"].pk, "enabled": "on", "endpoint": endpoint.pk, "k": "", "seed": "", "note": "x",
            "requirements-TOTAL_FORMS": "2", "requirements-INITIAL_FORMS": "0",
            "requirements-MIN_NUM_FORMS": "0", "requirements-MAX_NUM_FORMS": "1000",
            "requirements-0-eval_set": t1.eval_set_id, "requirements-0-metric": "accuracy",
            "requirements-0-minimum": "70", "requirements-0-max_drop": "3",
            "requirements-1-eval_set": t1.eval_set_id, "requirements-1-metric": "prompt_strict",
            "requirements-1-minimum": "", "requirements-1-max_drop": ""}
    response = client.post("/admin/training_jobs/gatepolicy/add/", form)
    assert response.status_code == 200 and "is not a metric of T1 Live-Stream QA sets" in response.content.decode()
    assert not GatePolicy.objects.exists()
    form["requirements-TOTAL_FORMS"] = "1"
    response = client.post("/admin/training_jobs/gatepolicy/add/", form)
    assert response.status_code == 302
    policy = GatePolicy.objects.get()
    assert policy.updated_by == admin and policy.requirements.get().minimum == 70.0
    event = AuditEvent.objects.get(action="gate_policy.created")
    assert event.scope == "harness:glow-gadget" and event.data["after"]["requirements"] == [
        {"eval_set": "t1-gate", "metric": "accuracy", "minimum": 70.0, "max_drop": 3.0}]
    assert client.get("/admin/training_jobs/gatepolicy/").status_code == 200


def test_seed_demo_gates_glow_gadget_v3(capsys):
    call_command("seed_demo", password="pw-for-tests-123")
    assert "Approval gate for 'glow-gadget'" in capsys.readouterr().out
    User = get_user_model()
    carol, grace = User.objects.get(username="carol"), User.objects.get(username="grace")
    v3 = HarnessVersion.objects.get(harness__slug="glow-gadget", number=3)
    policy = GatePolicy.objects.get(harness=v3.harness)
    assert policy.endpoint.name == "local" and policy.enabled
    assert {r.eval_set.name for r in policy.requirements.all()} == {"t1-live-stream-qa"}
    evidence = G.approval_evidence(v3)
    assert evidence.enabled and not evidence.passed
    assert _rule(evidence, "finished run").detail.startswith("no finished run of v3 on t1-live-stream-qa v1")
    with pytest.raises(GateFailed):
        harness_services.version_approve(user=carol, version=v3)
    assert not G.approval_evidence(HarnessVersion.objects.get(harness__slug="tiny-room", number=1)).enabled
    call_command("seed_demo", password="pw-for-tests-123")  # idempotent
    assert GatePolicy.objects.count() == 1 and gate_policy_seed_demo(harness_slug="glow-gadget") is None
    v3 = harness_services.version_approve(user=grace, version=v3, override_reason="demo: accepted without evidence")
    assert v3.status == "approved"
