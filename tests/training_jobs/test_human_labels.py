"""Human labels (training_jobs.label_*): the service (values, one label per reviewer and sample, samples that cannot
be labelled, roles), the seeded blind sample, agreement with the rules / judges / the vote / other reviewers, the pages
(every role 200/403/404, blind until submitted, strict CSP) and the API (list, create with the verdicts revealed, the
blind sample, agreement JSON; malformed input 4xx)."""

from __future__ import annotations

import json
import re
from html import escape

import pytest
from rest_framework.test import APIClient

from console import roles
from console.errors import NotAllowed, ValidationFailed
from streams.models import ModelEndpoint
from tests.conftest import PASSWORD, _make_user
from tests.streams.scripted_endpoint import ScriptedEndpoint, reply
from tests.training_jobs.eval_run_fixtures import (  # noqa: F401  (fixtures)
    BAD, bad, bad_run, good, good_run, play, scripted_endpoint, scripted_model, start, t1_set, t4_run, t4_set, v1)
from training_jobs import label_selectors as selectors
from training_jobs import label_services as services
from training_jobs.eval_run_models import EvalResult
from training_jobs.evals.agreement import accuracy_agreement, effectiveness_agreement
from training_jobs.label_models import HumanLabel

pytestmark = pytest.mark.django_db


@pytest.fixture
def compliance_lead(db, django_user_model):
    return _make_user(django_user_model, "cl_henry", roles.COMPLIANCE_LEAD)


@pytest.fixture
def judge_server():
    ep = ScriptedEndpoint()
    yield ep
    ep.close()


def _verdict(acc, eff, reason):
    return reply(json.dumps({"accuracy": acc, "effectiveness": eff, "reason": reason}))


@pytest.fixture
def judged_run(ml_staff, t1_set, v1, scripted_model, scripted_endpoint, judge_server):
    """t1-mini under two judges: t1-000 good (both 1/1), t1-001 the list price said as the price (judge-a 0/1, judge-b
    1/1: a tie), t1-002 good (judge-a 1/0.5, judge-b abstains)."""
    for x in "ab":
        ModelEndpoint.objects.create(name=f"judge-{x}", base_url=judge_server.base_url, model=f"judge-{x}",
                                     kind="vllm", timeout_s=5.0, connect_timeout_s=1.0)
    judge_server.add(_verdict(1, 1, "states the sale price"), _verdict(1, 1, "fine"),
                     _verdict(0, 1, "SECRET-REASON: the $34 is the list price"), _verdict(1, 1, "fine"),
                     _verdict(1, 0.5, "vague"), reply("I would rather not say."))
    run = play(start(ml_staff, t1_set, scripted_model, v1, name="judged", judges=["judge-a", "judge-b"]),
               scripted_endpoint, [good, bad, good])
    assert run.status == run.Status.SUCCEEDED, run.error
    return run


def _results(run) -> dict[str, EvalResult]:
    return {r.case_id: r for r in run.results.all()}


# --- the service ---------------------------------------------------------------------------------------------------


def test_label_create_and_one_label_per_reviewer_and_sample(reviewer, ml_staff, compliance_lead, good_run):
    r = _results(good_run)["t1-000"]
    label = services.human_label_create(user=reviewer, result=r, accuracy=1, effectiveness="0.5", note=" fine ")
    assert (label.accuracy, label.effectiveness, label.note, label.reviewer) == (1, 0.5, "fine", reviewer)
    with pytest.raises(services.AlreadyLabelled):
        services.human_label_create(user=reviewer, result=r, accuracy=0, effectiveness=0)
    services.human_label_create(user=ml_staff, result=r, accuracy=0, effectiveness=1.0)
    services.human_label_create(user=compliance_lead, result=r, accuracy="1", effectiveness=0)
    assert HumanLabel.objects.filter(result=r).count() == 3
    assert HumanLabel.objects.get(reviewer=reviewer).accuracy == 1  # never changed


def test_label_values_are_validated_with_paths_and_nothing_saved(reviewer, good_run):
    r = _results(good_run)["t1-000"]
    for acc, eff, note, paths in [(2, 0.7, "x" * 2001, {"accuracy", "effectiveness", "note"}),
                                  (True, False, None, {"accuracy", "effectiveness"}),
                                  ("yes", "half", 5, {"accuracy", "effectiveness", "note"}),
                                  (0.5, float("nan"), "a\x00b", {"accuracy", "effectiveness", "note"})]:
        with pytest.raises(ValidationFailed) as exc:
            services.human_label_create(user=reviewer, result=r, accuracy=acc, effectiveness=eff, note=note)
        assert {e["path"] for e in exc.value.errors} == paths
    assert not HumanLabel.objects.exists()


def test_samples_that_cannot_be_labelled(reviewer, good_run, t4_run):
    with pytest.raises(ValidationFailed) as exc:
        services.human_label_create(user=reviewer, result=t4_run.results.first(), accuracy=1, effectiveness=1)
    assert [e["path"] for e in exc.value.errors] == ["result"]
    r = _results(good_run)["t1-001"]
    EvalResult.objects.filter(pk=r.pk).update(error="RuntimeError: boom")
    r.refresh_from_db()
    with pytest.raises(ValidationFailed):
        services.human_label_create(user=reviewer, result=r, accuracy=1, effectiveness=1)
    assert selectors.label_sample(t4_run, n=5) == []
    assert r.pk not in {x.pk for x in selectors.label_sample(good_run, n=10)}


@pytest.mark.parametrize("role", ["manager", "operator", "outsider"])
def test_roles_that_may_not_label(request, role, good_run):
    with pytest.raises(NotAllowed):
        services.human_label_create(user=request.getfixturevalue(role), result=good_run.results.first(), accuracy=1,
                                    effectiveness=1)


def test_the_sample_is_seeded_and_the_same_for_everyone(ml_staff, t1_set, v1, scripted_model, scripted_endpoint):
    run = play(start(ml_staff, t1_set, scripted_model, v1, k=4), scripted_endpoint, [good] * 12)
    a = [r.pk for r in selectors.label_sample(run, n=5, seed=3)]
    assert a == [r.pk for r in selectors.label_sample(run, n=5, seed=3)] and len(set(a)) == 5
    others = {tuple(r.pk for r in selectors.label_sample(run, n=5, seed=s)) for s in range(6)}
    assert len(others) > 1  # another seed, another draw
    assert len(selectors.label_sample(run, n=50, seed=0)) == 12  # all of them when there are fewer


# --- agreement -----------------------------------------------------------------------------------------------------


def test_agreement_with_rules_judges_vote_and_other_reviewers(reviewer, ml_staff, judged_run):
    res = _results(judged_run)
    rules = {cid: (int(r.accuracy), r.effectiveness) for cid, r in res.items()}
    # the reviewer agrees with the rules everywhere; ML staff calls t1-000 half effective and t1-001 accurate
    mine = {cid: rules[cid] for cid in res}
    theirs = {"t1-000": (1, 0.5), "t1-001": (1, 1.0), "t1-002": rules["t1-002"]}
    for user, labels in ((reviewer, mine), (ml_staff, theirs)):
        for cid, (acc, eff) in labels.items():
            services.human_label_create(user=user, result=res[cid], accuracy=acc, effectiveness=eff)
    a = selectors.run_agreement(judged_run)
    assert (a["labels"], a["results"], a["reviewers"]) == (6, 3, 2)
    order = [(user_labels, cid) for user_labels in (mine, theirs) for cid in sorted(res)]
    human_acc = [labels[cid][0] for labels, cid in order]
    human_eff = [labels[cid][1] for labels, cid in order]
    expected = accuracy_agreement(human_acc, [rules[cid][0] for _, cid in order])
    assert a["rules"]["accuracy"]["matrix"] == [list(row) for row in expected.matrix]
    assert a["rules"]["accuracy"]["n"] == 6
    assert a["rules"]["accuracy"]["observed"] == pytest.approx(expected.observed, abs=1e-6)
    eff = effectiveness_agreement(human_eff, [rules[cid][1] for _, cid in order])
    assert a["rules"]["effectiveness"]["linear"]["matrix"] == [list(row) for row in eff["linear"].matrix]
    if eff["linear"].kappa is None:
        assert a["rules"]["effectiveness"]["linear"]["kappa"] is None
    else:
        assert a["rules"]["effectiveness"]["linear"]["kappa"] == pytest.approx(eff["linear"].kappa, abs=1e-6)
    # judge-a said (1,1), (0,1), (1,0.5); judge-b (1,1), (1,1), abstained
    ja = {"t1-000": (1, 1.0), "t1-001": (0, 1.0), "t1-002": (1, 0.5)}
    exp_a = accuracy_agreement(human_acc, [ja[cid][0] for _, cid in order])
    assert a["judges"]["judge-a"]["accuracy"]["matrix"] == [list(row) for row in exp_a.matrix]
    assert a["judges"]["judge-b"]["accuracy"]["n"] == 4 and a["judges"]["judge-b"]["accuracy"]["dropped"] == 2
    assert a["vote"]["accuracy"]["n"] + a["vote"]["accuracy"]["dropped"] == 6
    # two reviewers on three samples: three pairs of labels
    humans = a["humans"]["accuracy"]
    assert humans["n"] == 3
    assert humans["observed"] == pytest.approx(sum(mine[c][0] == theirs[c][0] for c in res) / 3, abs=1e-6)
    s = selectors.set_agreement(judged_run.eval_set_version.eval_set)
    assert s["labels"] == 6 and s["runs"] == [judged_run]


def test_agreement_without_labels_or_judges(good_run):
    a = selectors.run_agreement(good_run)
    assert a["labels"] == 0 and a["judges"] == {} and a["vote"] is None and a["humans"] is None
    assert a["rules"]["accuracy"]["kappa"] is None


# --- pages ---------------------------------------------------------------------------------------------------------

LABELLERS = ["reviewer", "ml_staff", "ml_lead", "compliance_lead"]
NOT_LABELLERS = ["manager", "operator", "outsider"]


def _as(client, request, role):
    client.force_login(request.getfixturevalue(role))
    return client


def _no_inline_code(html: str) -> None:
    """Strict CSP: no inline script or style."""
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline script"
    assert "<style" not in html and not re.search(r"\sstyle=", html), "inline style"
    assert not re.search(r"\son[a-z]+=", html), "inline event handler"


@pytest.mark.parametrize("role", LABELLERS)
def test_labellers_get_the_label_pages(client, request, role, good_run):
    c = _as(client, request, role)
    r = _results(good_run)["t1-000"]
    page = c.get(f"/evals/runs/{good_run.pk}/labels/?n=2&seed=1")
    assert page.status_code == 200
    assert page.content.decode().count('data-testid="sample-row"') == 2
    _no_inline_code(page.content.decode())
    assert c.get(f"/evals/runs/{good_run.pk}/labels/{r.pk}/").status_code == 200


@pytest.mark.parametrize("role", NOT_LABELLERS)
def test_others_may_not_label(client, request, role, good_run):
    c = _as(client, request, role)
    r = good_run.results.first()
    assert c.get(f"/evals/runs/{good_run.pk}/labels/").status_code == 403
    assert c.get(f"/evals/runs/{good_run.pk}/labels/{r.pk}/").status_code == 403
    assert c.post(f"/evals/runs/{good_run.pk}/labels/{r.pk}/", {"accuracy": "1", "effectiveness": "1"}).status_code \
        == 403
    assert not HumanLabel.objects.exists()


def test_anonymous_is_sent_to_sign_in(client, good_run):
    for url in (f"/evals/runs/{good_run.pk}/labels/", f"/evals/runs/{good_run.pk}/agreement/",
                "/evals/runs/agreement/"):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_not_found(client, reviewer, good_run, bad_run):
    client.force_login(reviewer)
    other = bad_run.results.first()
    missing = "00000000-0000-0000-0000-000000000000"
    assert client.get(f"/evals/runs/{missing}/labels/").status_code == 404
    assert client.get(f"/evals/runs/{good_run.pk}/labels/{other.pk}/").status_code == 404  # another run's sample
    assert client.get(f"/evals/runs/{good_run.pk}/labels/999999/").status_code == 404
    assert client.get(f"/evals/runs/{good_run.pk}/labels/{10**30}/").status_code == 404  # past bigint
    assert client.get(f"/evals/runs/{missing}/agreement/").status_code == 404
    assert client.get("/evals/runs/agreement/no-such-set/").status_code == 404
    assert client.get(f"/evals/runs/{good_run.pk}/labels/?n=0").status_code == 400
    assert client.get(f"/evals/runs/{good_run.pk}/labels/?seed=x").status_code == 400


def test_labelling_is_blind_until_submitted(client, reviewer, ml_staff, judged_run):
    res = _results(judged_run)
    r = res["t1-001"]
    services.human_label_create(user=ml_staff, result=r, accuracy=1, effectiveness=0.5, note="OTHER-REVIEWER-NOTE")
    client.force_login(reviewer)
    url = f"/evals/runs/{judged_run.pk}/labels/{r.pk}/?n=3&seed=0"
    html = client.get(url).content.decode()
    assert 'data-testid="blind"' in html and 'data-testid="label-form"' in html
    assert escape(r.reply) in html  # the reply (the list price said as the price, or the fallback line)
    assert 'data-testid="tool-result-item"' in html and "HydraGlow" in html  # what the turn's tool returned
    for secret in ("SECRET-REASON", 'data-testid="verdict-rules"', "OTHER-REVIEWER-NOTE", "judge-a",
                   'data-testid="sample-problems"', "hook failure"):
        assert secret not in html, secret
    for problem in r.problems:  # the rules' findings
        assert escape(problem["message"]) not in html
    _no_inline_code(html)
    # a bad label: 400 with the error on its box, nothing saved
    bad_post = client.post(url, {"accuracy": "3", "effectiveness": "0.7"})
    assert bad_post.status_code == 400 and 'data-testid="error-accuracy"' in bad_post.content.decode()
    assert not HumanLabel.objects.filter(reviewer=reviewer).exists()
    response = client.post(url, {"accuracy": "0", "effectiveness": "0.5", "note": "list price"})
    assert response.status_code == 302 and response["Location"].endswith(url.split("/labels/")[1])
    label = HumanLabel.objects.get(reviewer=reviewer)
    assert (label.result_id, label.accuracy, label.effectiveness, label.note) == (r.pk, 0, 0.5, "list price")
    html = client.get(url).content.decode()
    assert 'data-testid="revealed"' in html and 'data-testid="verdict-rules"' in html
    assert "SECRET-REASON" in html and "OTHER-REVIEWER-NOTE" in html
    assert html.count('data-testid="verdict-judge"') == 2 and 'data-testid="verdict-vote"' in html
    assert 'data-testid="label-form"' not in html and 'data-testid="label-next"' in html
    _no_inline_code(html)
    # a second label is refused
    again = client.post(url, {"accuracy": "1", "effectiveness": "1"})
    assert again.status_code == 409 and 'data-testid="label-error"' in again.content.decode()
    assert HumanLabel.objects.get(reviewer=reviewer).accuracy == 0
    # the sample page counts it and points at the next one
    start_page = client.get(f"/evals/runs/{judged_run.pk}/labels/?n=3&seed=0").content.decode()
    assert "1 of 3 labelled" in start_page and 'data-testid="my-label"' in start_page


def test_t4_runs_have_nothing_to_label(client, reviewer, t4_run):
    client.force_login(reviewer)
    page = client.get(f"/evals/runs/{t4_run.pk}/labels/").content.decode()
    assert 'data-testid="nothing-to-label"' in page
    r = t4_run.results.first()
    assert 'data-testid="not-labellable"' in client.get(f"/evals/runs/{t4_run.pk}/labels/{r.pk}/").content.decode()
    response = client.post(f"/evals/runs/{t4_run.pk}/labels/{r.pk}/", {"accuracy": "1", "effectiveness": "1"})
    assert response.status_code == 400 and not HumanLabel.objects.exists()


@pytest.mark.parametrize("role", ["manager", "reviewer", "ml_staff", "operator", "compliance_lead"])
def test_everyone_with_a_role_sees_agreement(client, request, role, judged_run, reviewer):
    res = _results(judged_run)
    for r in res.values():
        services.human_label_create(user=reviewer, result=r, accuracy=int(r.accuracy), effectiveness=r.effectiveness)
    c = _as(client, request, role)
    page = c.get(f"/evals/runs/{judged_run.pk}/agreement/")
    assert page.status_code == 200
    html = page.content.decode()
    keys = re.findall(r'data-testid="agreement-row" data-key="([^"]+)"', html)
    assert keys == ["rules", "judge:judge-a", "judge:judge-b", "vote"]
    assert html.count('data-testid="matrices"') == 4 and 'data-testid="judges-vs-rules"' in html
    judge_rows = re.findall(r'data-testid="judge-rules-row"><th class="rowhead">(.*?)</th>', html)
    assert judge_rows == ["<code>judge-a</code>", "<code>judge-b</code>", "the judges' vote"]  # the run's order
    rules_row = re.search(r'data-key="rules">(.*?)</tr>', html, re.S).group(1)
    cell = re.search(r'data-testid="kappa-accuracy">(.*?)</td>', rules_row, re.S).group(1)
    # the reviewer agreed with the rules on every sample: kappa 1, or undefined when the rules used one class only
    assert re.sub(r"<[^>]+>", "", cell).strip() == ("—" if len({r.accuracy for r in res.values()}) == 1 else "1.00")
    eff_cell = re.search(r'data-testid="kappa-effectiveness">(.*?)</td>', rules_row, re.S).group(1)
    assert re.sub(r"<[^>]+>", "", eff_cell).strip() == ("—" if len({r.effectiveness for r in res.values()}) == 1
                                                        else "1.00")
    _no_inline_code(html)
    set_page = c.get(f"/evals/runs/agreement/{judged_run.eval_set_version.eval_set.name}/")
    assert set_page.status_code == 200 and 'data-testid="labelled-runs"' in set_page.content.decode()
    index = c.get("/evals/runs/agreement/")
    assert index.status_code == 200 and judged_run.eval_set_version.eval_set.name in index.content.decode()
    assert ('data-testid="label-link"' in html) == (role in ("reviewer", "ml_staff", "compliance_lead"))


def test_outsider_sees_no_agreement(client, outsider, good_run):
    client.force_login(outsider)
    assert client.get(f"/evals/runs/{good_run.pk}/agreement/").status_code == 403
    assert client.get("/evals/runs/agreement/").status_code == 403
    assert client.get(f"/evals/runs/agreement/{good_run.eval_set_version.eval_set.name}/").status_code == 403


# --- API -----------------------------------------------------------------------------------------------------------


def _api(request, role) -> APIClient:
    c = APIClient()
    if role != "anonymous":
        c.force_authenticate(request.getfixturevalue(role))
    return c


@pytest.mark.parametrize("role, read, write", [
    ("reviewer", 200, 201), ("ml_staff", 200, 201), ("compliance_lead", 200, 201), ("manager", 200, 403),
    ("operator", 200, 403), ("outsider", 403, 403), ("anonymous", 401, 401)])
def test_api_roles(request, role, read, write, good_run):
    c = _api(request, role)
    base = f"/api/eval-runs/{good_run.pk}"
    assert c.get(f"{base}/labels/").status_code == read
    assert c.get(f"{base}/agreement/").status_code == read
    assert c.get(f"/api/eval-sets/{good_run.eval_set_version.eval_set.name}/agreement/").status_code == read
    assert c.get(f"{base}/labels/sample/").status_code == (200 if write == 201 else write)
    response = c.post(f"{base}/labels/", {"case_id": "t1-000", "sample": 0, "accuracy": 1, "effectiveness": 0.5},
                      format="json")
    assert response.status_code == write, response.content
    assert HumanLabel.objects.count() == (1 if write == 201 else 0)


def test_api_create_reveals_and_refuses_a_second_label(reviewer, judged_run):
    c = APIClient()
    c.force_authenticate(reviewer)
    base = f"/api/eval-runs/{judged_run.pk}"
    sample = c.get(f"{base}/labels/sample/?n=3&seed=0").json()
    assert len(sample) == 3 and {s["case_id"] for s in sample} == {"t1-000", "t1-001", "t1-002"}
    assert all(set(s) == {"case_id", "sample", "reply", "comments", "tool_results", "labelled"} for s in sample)
    assert "SECRET-REASON" not in json.dumps(sample) and not any(s["labelled"] for s in sample)
    assert [s["case_id"] for s in sample] == [r.case_id for r in selectors.label_sample(judged_run, n=3, seed=0)]
    response = c.post(f"{base}/labels/", {"case_id": "t1-001", "sample": 0, "accuracy": 0, "effectiveness": 1,
                                          "note": "list price"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["reviewer"] == reviewer.username and body["accuracy"] == 0 and body["effectiveness"] == 1.0
    assert {v["judge"] for v in body["judges"]} == {"judge-a", "judge-b"}
    assert "SECRET-REASON" in json.dumps(body["judges"]) and body["vote"]["accuracy_votes"] == {"0": 1, "1": 1}
    assert body["rules"]["accuracy"] == _results(judged_run)["t1-001"].accuracy
    again = c.post(f"{base}/labels/", {"case_id": "t1-001", "sample": 0, "accuracy": 1, "effectiveness": 1},
                   format="json")
    assert again.status_code == 409 and again.json()["code"] == "already_labelled"
    labels = c.get(f"{base}/labels/").json()
    assert labels["count"] == 1 and labels["results"][0]["case_id"] == "t1-001"
    assert c.get(f"{base}/labels/?reviewer=nobody").json()["count"] == 0
    assert [s["labelled"] for s in c.get(f"{base}/labels/sample/?n=3&seed=0").json()
            if s["case_id"] == "t1-001"] == [True]
    agreement = c.get(f"{base}/agreement/").json()
    assert agreement["labels"] == 1 and agreement["run"] == str(judged_run.pk)
    assert set(agreement["judges"]) == {"judge-a", "judge-b"}
    assert agreement["judges_vs_rules"]["samples_judged"] == 3
    assert agreement["rules"]["accuracy"]["n"] == 1
    s = c.get(f"/api/eval-sets/{judged_run.eval_set_version.eval_set.name}/agreement/").json()
    assert s["labels"] == 1 and s["runs"][0]["id"] == str(judged_run.pk)


@pytest.mark.parametrize("body, paths", [
    ({}, {"case_id", "accuracy", "effectiveness"}),
    ({"case_id": "t1-000", "accuracy": 2, "effectiveness": 0.7}, {"accuracy", "effectiveness"}),
    ({"case_id": "t1-000", "accuracy": True, "effectiveness": "x"}, {"accuracy", "effectiveness"}),
    ({"case_id": "t1-000", "sample": -1, "accuracy": 1, "effectiveness": 1}, {"sample"}),
    ({"case_id": "t1-000", "sample": 7, "accuracy": 1, "effectiveness": 1}, {"case_id"}),
    ({"case_id": "nope", "accuracy": 1, "effectiveness": 1}, {"case_id"}),
    ({"case_id": ["t1-000"], "accuracy": [1], "effectiveness": {}}, {"case_id", "accuracy", "effectiveness"}),
    ({"case_id": "t1-000", "accuracy": 1, "effectiveness": 1, "note": "x" * 2001}, {"note"}),
])
def test_api_malformed_labels_are_400_with_paths(reviewer, good_run, body, paths):
    c = APIClient()
    c.force_authenticate(reviewer)
    response = c.post(f"/api/eval-runs/{good_run.pk}/labels/", body, format="json")
    assert response.status_code == 400, response.content
    assert {e["path"] for e in response.json()["errors"]} == paths
    assert not HumanLabel.objects.exists()


def test_api_bad_queries_and_missing_things(reviewer, good_run):
    c = APIClient()
    c.force_authenticate(reviewer)
    missing = "00000000-0000-0000-0000-000000000000"
    assert c.get(f"/api/eval-runs/{missing}/labels/").status_code == 404
    assert c.post(f"/api/eval-runs/{missing}/labels/", {}, format="json").status_code == 404
    assert c.get(f"/api/eval-runs/{missing}/agreement/").status_code == 404
    assert c.get("/api/eval-sets/no-such-set/agreement/").status_code == 404
    assert c.get(f"/api/eval-runs/{good_run.pk}/labels/sample/?n=0").status_code == 400
    assert c.get(f"/api/eval-runs/{good_run.pk}/labels/sample/?n=201").status_code == 400
    assert c.get(f"/api/eval-runs/{good_run.pk}/labels/sample/?seed=-1").status_code == 400
    assert c.post(f"/api/eval-runs/{good_run.pk}/labels/", "not json", content_type="application/json"
                  ).status_code == 400
    assert c.get("/api/eval-runs/not-a-uuid/labels/").status_code == 404


def test_session_login_works_for_the_pages(client, reviewer, good_run):
    assert client.login(username=reviewer.username, password=PASSWORD)
    assert client.get(f"/evals/runs/{good_run.pk}/labels/").status_code == 200
