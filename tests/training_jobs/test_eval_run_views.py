"""Evaluation-run pages: who may see and do what (every role on every page: 200 / 403, the login page for anonymous
visitors, 404 for unknown runs and cases), the launch form (defaults: the pinned set version, what production points
at, the default endpoint; located errors on their boxes, nothing saved; a registered model's endpoint), the run page
(scores with intervals, pass^k, latency, problems by rule, the per-case table and its filters, live only while
active), cancel and resume (owner or ML lead; 409 when finished), a case's drill-down (the case, each sample's
verdict and problems, its turn in the preview transcript's event view; T4 instructions), the compare page (deltas,
flipped cases linked to both turns, the robustness grid by perturbation level, the lineage) and the model page's
latest scores.

Runs are played for real through the turn engine against the scripted endpoint (tests/training_jobs/
eval_run_fixtures.py); the T3 run of the robustness grid has results written by the test."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.conftest import main_part
from tests.training_jobs.eval_helpers import t1_case
from tests.training_jobs.eval_run_fixtures import (  # noqa: F401  (fixtures)
    BAD,
    bad_run,
    good,
    good_run,
    import_set,
    judged_run,
    lineage_models,
    play,
    queued_run,
    scripted_endpoint,
    scripted_model,
    start,
    t1_set,
    t3_run_with,
    t3_set,
    t4_run,
    t4_set,
    v1,
)
from training_jobs import eval_run_services as S
from training_jobs import tasks
from training_jobs.eval_run_models import EvalRun

pytestmark = pytest.mark.django_db

ROLES_VIEW = ["ml_staff", "ml_lead", "manager", "reviewer", "operator"]


def _pages(run, case_id: str) -> list[str]:
    return ["/evals/runs/", f"/evals/runs/{run.pk}/", f"/evals/runs/{run.pk}/cases/{case_id}/"]


@pytest.fixture
def sent(monkeypatch):
    calls = []
    monkeypatch.setattr(tasks.eval_run, "apply_async", lambda **kw: calls.append(kw))
    return calls


# --- who may do what ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES_VIEW)
def test_every_role_reads_runs(request, client, role, good_run, bad_run):
    client.force_login(request.getfixturevalue(role))
    for url in _pages(good_run, "t1-000") + [f"/evals/runs/compare/?runs={good_run.pk},{bad_run.pk}"]:
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize("role, launch", [("ml_staff", 200), ("ml_lead", 200), ("manager", 403), ("reviewer", 403),
                                          ("operator", 403), ("outsider", 403)])
def test_launch_form_by_role(request, client, role, launch, t1_set):
    client.force_login(request.getfixturevalue(role))
    assert client.get("/evals/runs/new/").status_code == launch
    assert client.post("/evals/runs/new/", {}).status_code == (400 if launch == 200 else 403)


def test_outsider_and_anonymous_are_refused_everywhere(client, outsider, good_run, bad_run):
    urls = _pages(good_run, "t1-000") + [f"/evals/runs/compare/?runs={good_run.pk},{bad_run.pk}"]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], url
    for url in (f"/evals/runs/{good_run.pk}/cancel/", f"/evals/runs/{good_run.pk}/resume/"):
        assert client.post(url).status_code == 302
    client.force_login(outsider)
    for url in urls:
        assert client.get(url).status_code == 403, url
    for url in (f"/evals/runs/{good_run.pk}/cancel/", f"/evals/runs/{good_run.pk}/resume/"):
        assert client.post(url).status_code == 403


@pytest.mark.parametrize("role", ["manager", "reviewer", "operator", "outsider"])
def test_roles_without_run_eval_may_not_cancel_or_resume(request, client, role, queued_run):
    client.force_login(request.getfixturevalue(role))
    for action in ("cancel", "resume"):
        assert client.post(f"/evals/runs/{queued_run.pk}/{action}/").status_code == 403
    queued_run.refresh_from_db()
    assert queued_run.status == EvalRun.Status.QUEUED


def test_unknown_runs_and_cases_are_404(client, reviewer, ml_staff, good_run):
    client.force_login(ml_staff)
    for action in ("cancel", "resume"):
        assert client.post(f"/evals/runs/{uuid.uuid4()}/{action}/").status_code == 404
        assert client.get(f"/evals/runs/{good_run.pk}/{action}/").status_code == 405
    client.force_login(reviewer)
    missing = uuid.uuid4()
    assert client.get(f"/evals/runs/{missing}/").status_code == 404
    assert client.get(f"/evals/runs/{missing}/cases/t1-000/").status_code == 404
    assert client.get(f"/evals/runs/{good_run.pk}/cases/no-such-case/").status_code == 404
    assert client.get(f"/evals/runs/compare/?runs={good_run.pk},{missing}").status_code == 404
    assert client.get("/evals/runs/not-a-uuid/").status_code == 404


# --- the list ----------------------------------------------------------------------------------------------------


def test_list_shows_scores_with_intervals_and_filters(client, reviewer, good_run, bad_run, t4_run):
    client.force_login(reviewer)
    html = client.get("/evals/runs/").content.decode()
    assert html.count('data-testid="run-row"') == 3
    assert "100.0" in html and "[100.0, 100.0]" in html  # all good: accuracy 100 with its interval
    acc = bad_run.summary["accuracy"]
    assert f"{100 * acc['mean']:.1f}" in html and f"[{100 * acc['ci_low']:.1f}, {100 * acc['ci_high']:.1f}]" in html
    assert 'data-testid="ifeval-figures"' in html  # the T4 run shows its IFEval figures instead
    assert "Launch an evaluation run" not in html  # a reviewer reads, does not launch
    html = client.get("/evals/runs/?eval_set=t4-mini").content.decode()
    assert html.count('data-testid="run-row"') == 1 and "ifeval mini" in html
    html = client.get("/evals/runs/?status=running").content.decode()
    assert html.count('data-testid="run-row"') == 0
    html = client.get("/evals/runs/?harness=glow-gadget&endpoint=scripted").content.decode()
    assert html.count('data-testid="run-row"') == 2
    # an unknown value is dropped, never a 500
    html = client.get("/evals/runs/?status=nonsense&model=xyz").content.decode()
    assert html.count('data-testid="run-row"') == 3


def test_list_refreshes_only_while_a_run_is_active(client, ml_staff, good_run, queued_run):
    client.force_login(ml_staff)
    html = client.get("/evals/runs/").content.decode()
    assert 'hx-trigger="every' in html and "Launch an evaluation run" in html
    EvalRun.objects.filter(pk=queued_run.pk).delete()
    assert 'hx-trigger="every' not in main_part(client.get("/evals/runs/").content.decode())


# --- the launch form ---------------------------------------------------------------------------------------------


def test_launch_form_defaults_to_pinned_set_production_harness_and_default_endpoint(client, ml_staff, ml_lead, t1_set,
                                                                                    v1, scripted_model):
    from training_jobs.eval_services import eval_set_pin

    newer = import_set(ml_staff, "t1-mini", "t1", [t1_case(9)])
    assert newer.number == 2
    eval_set_pin(user=ml_lead, eval_set=t1_set.eval_set, version=t1_set)
    scripted_model.is_default = True
    scripted_model.save()
    client.force_login(ml_staff)
    html = client.get("/evals/runs/new/").content.decode()
    assert re.search(r'<option value="t1-mini@1" selected>t1-mini v1 · T1 · 3 cases · pinned', html)
    assert re.search(r'<option value="glow-gadget@1" selected>glow-gadget v1 \(approved\) · production', html)
    assert re.search(r'<option value="scripted" selected>', html)
    assert 'value="glow-gadget@3"' in html  # drafts can be evaluated (before approval)
    # from a set version's page: that version
    version_page = client.get("/eval-sets/t1-mini/v2/").content.decode()
    assert '/evals/runs/new/?version=t1-mini@2' in version_page and "/evals/runs/?eval_set=t1-mini" in version_page
    html = client.get("/evals/runs/new/?version=t1-mini@2").content.decode()
    assert re.search(r'<option value="t1-mini@2" selected>', html)
    assert 'data-testid="runs-link"' in client.get("/eval-sets/").content.decode()


def test_launch_queues_a_run_on_the_gpu_queue(client, ml_staff, t1_set, v1, scripted_model, sent,
                                              django_capture_on_commit_callbacks):
    client.force_login(ml_staff)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/evals/runs/new/", {
            "eval_set_version": "t1-mini@1", "harness_version": "glow-gadget@1", "endpoint": "scripted", "k": 2,
            "seed": 5, "max_cases": 2, "temperature": "0.7", "top_p": "0.9", "max_tokens": "256",
            "deadline_s": "30", "name": "from the form"})
    run = EvalRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/evals/runs/{run.pk}/"
    assert (run.name, run.k, run.seed, run.max_cases, run.deadline_s) == ("from the form", 2, 5, 2, 30.0)
    assert run.sampling == {"temperature": 0.7, "top_p": 0.9, "max_tokens": 256}
    assert run.harness_version == v1 and run.endpoint == scripted_model and run.progress_total == 4
    assert sent and sent[0]["queue"] == "gpu"


def test_launch_errors_land_on_their_boxes_and_nothing_is_saved(client, ml_staff, t1_set, t4_set, v1, scripted_model):
    client.force_login(ml_staff)
    response = client.post("/evals/runs/new/", {"eval_set_version": "t1-mini@1", "harness_version": "",
                                                "endpoint": "scripted", "k": 0, "seed": 0, "max_cases": 99,
                                                "temperature": 9, "top_p": "0.5", "deadline_s": "9000"})
    assert response.status_code == 400
    html = response.content.decode()
    for field in ("harness_version", "k", "max_cases", "temperature", "deadline_s"):
        assert f'data-testid="error-{field}"' in html, field
    assert 'data-testid="error-top_p"' not in html
    response = client.post("/evals/runs/new/", {"eval_set_version": "t4-mini@1", "harness_version": "glow-gadget@1",
                                                "endpoint": "scripted", "k": 1, "seed": 0})
    assert response.status_code == 400 and 'data-testid="error-harness_version"' in response.content.decode()
    # neither an endpoint nor a model; an unknown choice; not a number
    response = client.post("/evals/runs/new/", {"eval_set_version": "nope@1", "k": "x", "seed": 0})
    html = response.content.decode()
    assert response.status_code == 400
    for field in ("eval_set_version", "k", "endpoint"):
        assert f'data-testid="error-{field}"' in html, field
    assert not EvalRun.objects.exists()


def test_launch_with_a_registered_model_uses_its_endpoint(client, ml_staff, t1_set, v1, scripted_model, sent,
                                                          lineage_models):
    sft = lineage_models["sft"]
    client.force_login(ml_staff)
    data = {"eval_set_version": "t1-mini@1", "harness_version": "glow-gadget@1", "model": str(sft.pk), "k": 1,
            "seed": 0}
    response = client.post("/evals/runs/new/", data)
    assert response.status_code == 400 and 'data-testid="error-model"' in response.content.decode()  # not served
    sft.endpoint = scripted_model
    sft.save()
    assert 'selected' in client.get(f"/evals/runs/new/?model={sft.pk}").content.decode()
    response = client.post("/evals/runs/new/", data)
    run = EvalRun.objects.get()
    assert response.status_code == 302 and run.model == sft and run.endpoint == scripted_model


def test_a_refused_endpoint_is_an_error_on_its_box(client, ml_staff, t1_set, v1, settings):
    from streams.models import ModelEndpoint

    ModelEndpoint.objects.create(name="far", base_url="http://evil.example.com/v1", model="m")
    client.force_login(ml_staff)
    response = client.post("/evals/runs/new/", {"eval_set_version": "t1-mini@1", "harness_version": "glow-gadget@1",
                                                "endpoint": "far", "k": 1, "seed": 0})
    assert response.status_code == 400 and 'data-testid="error-endpoint"' in response.content.decode()
    assert not EvalRun.objects.exists()


# --- a run's page ------------------------------------------------------------------------------------------------


def test_run_page_shows_scores_latency_problems_and_cases(client, reviewer, bad_run):
    client.force_login(reviewer)
    html = client.get(f"/evals/runs/{bad_run.pk}/").content.decode()
    s = bad_run.summary
    assert 'data-testid="score-accuracy"' in html and 'data-testid="score-pass_k"' in html
    assert f"{100 * s['accuracy']['mean']:.1f}" in html
    assert f"[{100 * s['accuracy']['ci_low']:.1f}, {100 * s['accuracy']['ci_high']:.1f}]" in html
    assert 'data-testid="score-chart"' in html and html.count('data-testid="bar"') >= 3
    assert 'data-testid="latency-p50"' in html and " s</td>" in html
    assert s["problems"] and all(f"<code>{rule}</code>" in html for rule in s["problems"])
    assert html.count('data-testid="case-row"') == 3
    assert "data-live-ws" not in html and 'data-testid="cancel"' not in html  # finished; a reviewer
    assert 'data-testid="resume"' not in html


def test_case_table_filters(client, ml_staff, bad_run):
    client.force_login(ml_staff)
    url = f"/evals/runs/{bad_run.pk}/"
    html = client.get(url + "?failed=on").content.decode()
    assert re.findall(r'data-testid="case-row" data-case="([^"]+)"', html) == ["t1-001"]
    rule = next(iter(bad_run.summary["problems"]))
    html = client.get(url + f"?rule={rule}").content.decode()
    assert re.findall(r'data-testid="case-row" data-case="([^"]+)"', html) == ["t1-001"]
    html = client.get(url + "?tag=slang").content.decode()
    assert re.findall(r'data-testid="case-row" data-case="([^"]+)"', html) == ["t1-002"]
    html = client.get(url + "?rule=nope&tag=nope").content.decode()  # unknown values are dropped
    assert html.count('data-testid="case-row"') == 3
    # the htmx fragment: only the table
    fragment = client.get(url + "?failed=on", headers={"HX-Request": "true", "HX-Target": "cases"}).content.decode()
    assert fragment.lstrip().startswith('<section id="cases"') and "<html" not in fragment


def test_an_active_run_is_live_and_its_owner_or_a_lead_may_cancel(client, ml_staff, ml_staff2, ml_lead, manager,
                                                                  queued_run):
    client.force_login(ml_staff)
    html = client.get(f"/evals/runs/{queued_run.pk}/").content.decode()
    assert f'data-live-ws="/ws/evals/{queued_run.pk}/"' in html and 'data-testid="cancel"' in html
    assert 'data-testid="so-far"' in html and "0 / 6 samples" in html
    fragment = client.get(f"/evals/runs/{queued_run.pk}/", headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<div id="run"')
    client.force_login(ml_staff2)
    html = client.get(f"/evals/runs/{queued_run.pk}/").content.decode()
    assert 'data-testid="not-yours"' in html and 'data-testid="cancel"' not in html
    response = client.post(f"/evals/runs/{queued_run.pk}/cancel/")
    assert response.status_code == 403 and 'data-testid="action-error"' in response.content.decode()
    client.force_login(manager)
    assert client.post(f"/evals/runs/{queued_run.pk}/cancel/").status_code == 403
    client.force_login(ml_lead)
    response = client.post(f"/evals/runs/{queued_run.pk}/cancel/")
    assert response.status_code == 302
    queued_run.refresh_from_db()
    assert queued_run.status == EvalRun.Status.CANCELLED
    response = client.post(f"/evals/runs/{queued_run.pk}/cancel/")
    assert response.status_code == 409


def test_resume_a_cancelled_run(client, ml_staff, queued_run, sent, django_capture_on_commit_callbacks):
    S.eval_run_cancel(user=ml_staff, run=queued_run)
    client.force_login(ml_staff)
    html = client.get(f"/evals/runs/{queued_run.pk}/").content.decode()
    assert 'data-testid="resume"' in html
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(f"/evals/runs/{queued_run.pk}/resume/").status_code == 302
    queued_run.refresh_from_db()
    assert queued_run.status == EvalRun.Status.QUEUED and queued_run.resumes == 1 and sent
    assert client.post(f"/evals/runs/{queued_run.pk}/resume/").status_code == 409


def test_a_run_that_failed_without_aggregates_shows_those_of_its_samples(client, reviewer, bad_run):
    EvalRun.objects.filter(pk=bad_run.pk).update(status=EvalRun.Status.FAILED, summary={},
                                                 error="WorkerLost: the worker stopped beating")
    client.force_login(reviewer)
    html = client.get(f"/evals/runs/{bad_run.pk}/").content.decode()
    assert "WorkerLost" in html and 'data-testid="score-accuracy"' in html


def test_t4_run_page_shows_the_four_ifeval_figures_and_categories(client, reviewer, t4_run):
    client.force_login(reviewer)
    html = client.get(f"/evals/runs/{t4_run.pk}/").content.decode()
    figures = t4_run.summary["ifeval"]["0"]
    for key in ("prompt_strict", "instruction_strict", "prompt_loose", "instruction_loose"):
        assert f'data-testid="ifeval-{key}"' in html
        assert f"{figures[key]:.2f}" in html
    assert 'data-testid="ifeval-categories"' in html and "<code>change_case</code>" in html
    assert "<code>change_case:english_lowercase</code>" in html  # the case table: the instruction not followed


# --- a case's drill-down -----------------------------------------------------------------------------------------


def test_case_drill_down_shows_the_case_each_sample_and_its_turn(client, reviewer, bad_run):
    client.force_login(reviewer)
    html = client.get(f"/evals/runs/{bad_run.pk}/cases/t1-001/").content.decode()
    assert 'data-testid="case-comment"' in html and "how much is the serum?? (1)" in html
    assert 'data-testid="gold-facts"' in html and "catalog.product_info" in html
    assert 'data-testid="expected-skills"' in html and "price_stock_qa" in html
    assert 'data-testid="forbidden-claims"' in html and "heals acne" in html
    assert 'data-testid="case-room"' in html
    assert html.count('data-testid="sample"') == 1 and "not solved" in html
    assert 'data-testid="sample-problems"' in html
    # the turn, in the preview transcript's event view: the skill, the tool call and its result, hooks, the reply
    assert 'data-testid="transcript-turn"' in html and "skill price_stock_qa" in html
    assert "lookup_product" in html and 'data-testid="tool-result"' in html
    assert 'data-testid="transcript-reply"' in html
    assert 'data-testid="save-as-case"' not in html  # that button belongs to rooms
    assert f'/evals/runs/{bad_run.pk}/cases/t1-000/' in html and f'/evals/runs/{bad_run.pk}/cases/t1-002/' in html
    html = client.get(f"/evals/runs/{bad_run.pk}/cases/t1-000/").content.decode()
    assert "solved 1/1" in html and "$24.9" in html


def test_t4_drill_down_shows_which_instructions_failed(client, reviewer, t4_run):
    client.force_login(reviewer)
    html = client.get(f"/evals/runs/{t4_run.pk}/cases/ifeval-2/").content.decode()
    assert 'data-testid="prompt"' in html and 'data-testid="instructions"' in html
    assert "change_case:english_lowercase" in html and "not followed" in html
    assert 'data-testid="sample-turn"' not in html


def test_a_case_the_run_did_not_play_says_so(client, ml_staff, t1_set, v1, scripted_model, scripted_endpoint):
    run = play(start(ml_staff, t1_set, scripted_model, v1, max_cases=1), scripted_endpoint, [good])
    client.force_login(ml_staff)
    html = client.get(f"/evals/runs/{run.pk}/cases/t1-002/").content.decode()
    assert 'data-testid="no-samples"' in html and "first 1 cases" in html


# --- compare -----------------------------------------------------------------------------------------------------


def test_compare_shows_deltas_and_flipped_cases_linked_to_both_turns(client, reviewer, good_run, bad_run):
    client.force_login(reviewer)
    html = client.get(f"/evals/runs/compare/?runs={good_run.pk},{bad_run.pk}").content.decode()
    assert html.count('data-testid="compared-run"') == 2 and 'data-testid="baseline"' in html
    delta = 100 * (bad_run.summary["pass_k"]["mean"] - good_run.summary["pass_k"]["mean"])
    assert delta < 0 and f"Δ −{abs(delta):.1f}" in html
    flipped = re.findall(r'data-testid="flipped-case" data-kind="(\w+)" data-case="([^"]+)"', html)
    assert flipped == [("regression", "t1-001")]
    assert f"/evals/runs/{good_run.pk}/cases/t1-001/" in html and f"/evals/runs/{bad_run.pk}/cases/t1-001/" in html
    assert 'data-testid="heatmap"' in html and 'data-testid="compare-chart"' in html
    assert 'data-testid="no-lineage"' in html
    # the other way round: a fix; ticks from the list put the oldest first
    html = client.get(f"/evals/runs/compare/?runs={bad_run.pk},{good_run.pk}").content.decode()
    assert re.findall(r'data-testid="flipped-case" data-kind="(\w+)"', html) == ["fix"]
    html = client.get(f"/evals/runs/compare/?tick={bad_run.pk}&tick={good_run.pk}").content.decode()
    assert re.findall(r'data-testid="flipped-case" data-kind="(\w+)"', html) == ["regression"]


@pytest.mark.parametrize("query", ["", "?runs=", "?runs=abc,def", "?tick=", "?runs={one}",
                                   "?runs=" + ",".join(str(uuid.uuid4()) for _ in range(9))])
def test_compare_needs_two_to_eight_runs(client, reviewer, good_run, query):
    client.force_login(reviewer)
    response = client.get("/evals/runs/compare/" + query.format(one=good_run.pk))
    assert response.status_code == 400 and 'data-testid="compare-error"' in response.content.decode()


def test_robustness_grid_by_perturbation_level_and_fault(client, reviewer, ml_staff, t3_set, v1, scripted_model):
    # model A survives every level; model B breaks on heavy and union perturbations and on timeouts
    a = t3_run_with(ml_staff, t3_set, scripted_model, v1, lambda level, faults: 1, name="robust")
    b = t3_run_with(ml_staff, t3_set, scripted_model, v1,
                    lambda level, faults: 0 if level in ("heavy", "union") or "timeout" in faults else 1,
                    name="brittle")
    client.force_login(reviewer)
    html = client.get(f"/evals/runs/compare/?runs={a.pk},{b.pk}").content.decode()
    columns = re.findall(r'<text class="col"[^>]*>([^<]+)</text>', html)
    assert columns == ["all", "clean", "slight", "medium", "heavy", "union", "fault timeout", "fault malformed",
                       "fault permission_denied", "fault slow"]
    cells = re.findall(r'data-column="([^"]+)"><rect[^>]*><title>([^<]+)</title>', html)
    brittle = {col: title for col, title in cells[len(columns):]}
    assert "0 %" in brittle["heavy"] and "0 %" in brittle["union"] and "0 %" in brittle["fault timeout"]
    assert "100 %" in brittle["clean"] and "100 %" in brittle["fault slow"]
    html = client.get(f"/evals/runs/compare/?runs={a.pk},{b.pk}&metric=solved").content.decode()
    assert "mean solved per case" in html


def test_lineage_beside_the_fixed_harness_baseline(client, reviewer, ml_staff, t3_set, v1, scripted_model,
                                                   lineage_models):
    m = lineage_models
    sft = t3_run_with(ml_staff, t3_set, scripted_model, v1, lambda level, faults: level != "heavy", name="sft",
                      model=m["sft"])
    rl = t3_run_with(ml_staff, t3_set, scripted_model, v1, lambda level, faults: 1, name="rl", model=m["rl"])
    t3_run_with(ml_staff, t3_set, scripted_model, v1, lambda level, faults: level == "clean", name="fixed",
                model=m["baseline"])
    client.force_login(reviewer)
    html = client.get(f"/evals/runs/compare/?runs={sft.pk},{rl.pk}").content.decode()
    steps = re.findall(r'data-testid="lineage-step" data-kind="(\w+)"', html)
    assert steps == ["base", "sft", "distill", "rl"]
    assert html.count('data-testid="lineage-baseline"') == 1 and "tiny-fixed" in html
    assert "not evaluated here" in html  # base and distill have no run on this set
    assert 'data-testid="lineage-chart"' in html


# --- the model page ----------------------------------------------------------------------------------------------


def test_model_page_shows_its_latest_scores_per_set(client, manager, ml_staff, t3_set, t1_set, v1, scripted_model,
                                                    lineage_models):
    m = lineage_models["rl"]
    t3_run_with(ml_staff, t3_set, scripted_model, v1, lambda level, faults: 0, name="older", model=m)
    newer = t3_run_with(ml_staff, t3_set, scripted_model, v1, lambda level, faults: 1, name="newer", model=m)
    client.force_login(manager)
    html = client.get(f"/models/{m.pk}/").content.decode()
    assert html.count('data-testid="eval-score-row"') == 1 and f"/evals/runs/{newer.pk}/" in html
    assert "100.0" in html and 'data-testid="evaluate"' not in html  # a manager reads, does not launch
    client.force_login(ml_staff)
    html = client.get(f"/models/{lineage_models['base'].pk}/").content.decode()
    assert 'data-testid="no-eval-scores"' in html and 'data-testid="evaluate"' in html


# --- judge models ------------------------------------------------------------------------------------------------


def test_launch_with_judge_models(client, ml_staff, t1_set, t4_set, v1, scripted_model, sent):
    client.force_login(ml_staff)
    base = {"harness_version": "glow-gadget@1", "endpoint": "scripted", "k": 1, "seed": 0}
    response = client.post("/evals/runs/new/", {**base, "eval_set_version": "t4-mini@1", "harness_version": "",
                                                "judges": ["scripted"]})
    assert response.status_code == 400 and 'data-testid="error-judges"' in response.content.decode()
    response = client.post("/evals/runs/new/", {**base, "eval_set_version": "t1-mini@1", "judges": ["nope"]})
    assert response.status_code == 400 and 'data-testid="error-judges"' in response.content.decode()  # not a choice
    assert not EvalRun.objects.exists()
    response = client.post("/evals/runs/new/", {**base, "eval_set_version": "t1-mini@1", "judges": ["scripted"]})
    assert response.status_code == 302 and EvalRun.objects.get().judges == ["scripted"]


def test_judges_beside_the_rules_on_the_run_and_case_pages(client, reviewer, judged_run):
    client.force_login(reviewer)
    html = client.get(f"/evals/runs/{judged_run.pk}/").content.decode()
    assert 'data-testid="judges"' in html
    rows = re.findall(r'data-testid="judge-row" data-judge="([^"]+)"', html)
    assert rows == ["scripted", "vote"]
    assert "66.7" in html  # the judge agrees with the rules' accuracy on two samples of three
    assert 'data-testid="agreement-link"' in html and 'data-testid="label-link"' in html  # reviewers label
    html = client.get(f"/evals/runs/{judged_run.pk}/cases/t1-001/").content.decode()
    assert 'data-testid="sample-judges"' in html and "the price looks invented" in html
    assert html.count("≠ rules") == 2  # accuracy 0 against 1, effectiveness 0.5 against 1
    html = client.get(f"/evals/runs/{judged_run.pk}/cases/t1-000/").content.decode()
    assert "backed by the lookup" in html and "≠ rules" not in html
