"""Reproduction runs (manage.py reproduce_hat as a console job) and their pages: every role's answer (200 / 403 /
404, anonymous to the login page), the start form (queued on the gpu queue on commit; bad input a 400 with the
error on its box, a base that is not built naming its folder), a run's page with every cell of the table, the
report's reference rows, the claims, the four plots and the provenance from a fixture folder; a run whose folder
is gone says so plainly; the committed result, read-only; cancel; the compare page's section; and the worker's
wiring with ``reproduce()`` replaced (no training here)."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest

from console.jobs import Job
from tests.conftest import main_part
from tests.training_jobs import reproduction_fixtures as fx
from tests.training_jobs.reproduction_fixtures import FIXED_SHA, WEIGHTS_SHA, synthetic_results, write_fixture_folder
from training_jobs import reproduce_services as S
from training_jobs.reproduce.claims import judge_claims
from training_jobs.reproduce.table import COLUMNS, ROWS, table_cells
from training_jobs.reproduce_models import ReproductionRun

pytestmark = pytest.mark.django_db

# the shared fixtures (tests/training_jobs/reproduction_fixtures.py)
bases, committed, done_run, no_committed = fx.bases, fx.committed, fx.done_run, fx.no_committed
runs_root, sent, smol_not_built = fx.runs_root, fx.sent, fx.smol_not_built

ROLES = ["manager", "reviewer", "ml_staff", "ml_lead", "operator", "outsider", "anonymous"]
PLOTS = ("accuracy.svg", "gap.svg", "ifeval.svg", "robustness.svg")


def _login(client, request, role: str):
    if role != "anonymous":
        client.force_login(request.getfixturevalue(role))
    return client


# --- roles --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_every_role_on_every_page(request, client, done_run, committed, role):
    _login(client, request, role)
    base = f"/training/reproductions/{done_run.pk}/"
    expected = {"anonymous": 302, "ml_staff": 200, "ml_lead": 200}.get(role, 403)
    for path in ("/training/reproductions/", "/training/reproductions/new/", base, base + "gap.svg",
                 "/training/reproductions/committed/", "/training/reproductions/committed/ifeval.svg"):
        r = client.get(path)
        assert r.status_code == expected, (role, path)
        if role == "anonymous":
            assert "/accounts/login/" in r["Location"], path
    r = client.post(base + "cancel/")
    assert r.status_code == ({"anonymous": 302}.get(role, 409) if expected != 403 else 403), role
    if expected == 200:
        assert client.get(f"/training/reproductions/{uuid.uuid4()}/").status_code == 404
        assert client.get(f"/training/reproductions/{uuid.uuid4()}/gap.svg").status_code == 404
        assert client.post(f"/training/reproductions/{uuid.uuid4()}/cancel/").status_code == 404


def test_the_committed_page_is_a_404_until_it_is_committed(client, ml_staff, no_committed):
    client.force_login(ml_staff)
    assert client.get("/training/reproductions/committed/").status_code == 404
    assert client.get("/training/reproductions/committed/gap.svg").status_code == 404
    html = client.get("/training/reproductions/").content.decode()
    assert 'data-testid="committed"' not in html and "No reproduction runs yet." in html


# --- a run's page -------------------------------------------------------------------------------------------------


def test_a_run_page_shows_every_cell_the_reference_rows_the_claims_the_plots_and_the_provenance(
        client, ml_lead, done_run):
    client.force_login(ml_lead)
    r = client.get(f"/training/reproductions/{done_run.pk}/")
    assert r.status_code == 200
    html = main_part(r.content.decode())
    cells = table_cells(synthetic_results())
    assert html.count('data-testid="table-row"') == len(ROWS)
    assert html.count('data-testid="cell"') == len(ROWS) * len(COLUMNS)
    for c in COLUMNS:
        assert f'data-testid="column" data-key="{c.key}">{c.title}</th>' in html
    for row, _title in ROWS:
        part = html.split(f'data-testid="table-row" data-row="{row}"', 1)[1].split("</tr>", 1)[0]
        for c in COLUMNS:
            cell = cells[row][c.key]
            fmt = "{:+.1f}" if c.points else "{:.1f}"
            text, lo, hi = (fmt.format(100 * cell[k]) for k in ("mean", "ci_low", "ci_high"))
            assert f'data-key="{c.key}">{text} <span class="small muted">[{lo}, {hi}]</span>' in part, (row, c.key)
    # the report's rows, with their numbered sources
    assert html.count('data-testid="reference-row"') == 5
    assert "80.3 <sup>" in html and "75.4 <sup>" in html and "Δ -7.7 <sup>" in html and "Δ +8.5 <sup>" in html
    assert "n/s" in html and "issue 15" in html and "which IFEval metric is not stated" in html
    # every claim with its verdict and comparisons
    for claim in judge_claims(cells):
        block = html.split(f'data-testid="claim" data-claim="{claim["claim"]}"', 1)[1].split("</div>", 1)[0]
        assert f'data-testid="verdict">{claim["verdict"]}</span>' in block
        assert block.count('data-testid="comparison"') == len(claim["comparisons"])
    assert {c["verdict"] for c in judge_claims(cells)} == {"reproduced", "not reproduced"}
    # the four plots, as images served from that run's folder only
    for name in PLOTS:
        assert f'src="/training/reproductions/{done_run.pk}/{name}"' in html
    # provenance: command, commit, base weights, data hashes, wall times
    assert "manage.py reproduce_hat --base tiny --budget smoke" in html and "1867fa9deadbeef" in html
    assert WEIGHTS_SHA in html and FIXED_SHA in html and "ab" * 32 in html
    assert "total 81.5 s" in html and "training 50.0 s" in html
    assert " style=" not in html and "<script" not in html
    assert 'data-testid="cancel"' not in html  # finished


def test_the_plots_are_served_as_svg_and_nothing_else_of_the_folder(client, ml_staff, done_run):
    client.force_login(ml_staff)
    base = f"/training/reproductions/{done_run.pk}/"
    for name in PLOTS:
        r = client.get(base + name)
        assert r.status_code == 200 and r["Content-Type"] == "image/svg+xml", name
        assert r["X-Content-Type-Options"] == "nosniff" and "default-src 'none'" in r["Content-Security-Policy"]
        assert b"<svg" in b"".join(r.streaming_content)
    for name in ("run.json", "results.json", "table.csv", "table.md", "evil.svg", "..%2Frun.json", "data"):
        assert client.get(base + name).status_code == 404, name
    (done_run.path / "gap.svg").unlink()
    assert client.get(base + "gap.svg").status_code == 404


def test_a_run_whose_folder_is_gone_says_so_and_shows_what_it_stored(client, ml_staff, done_run):
    shutil.rmtree(done_run.path)
    client.force_login(ml_staff)
    r = client.get(f"/training/reproductions/{done_run.pk}/")
    assert r.status_code == 200
    html = main_part(r.content.decode())
    assert 'data-testid="folder-missing"' in html and "The result folder of this run is gone" in html
    assert str(done_run.out_dir) in html and 'data-testid="table-row"' not in html and "<img" not in html
    assert html.count('data-testid="claim"') == 3 and "1867fa9deadbeef" in html and WEIGHTS_SHA in html
    assert "as the run stored it when it ended" in html and "total 81.5 s" in html
    assert client.get(f"/training/reproductions/{done_run.pk}/gap.svg").status_code == 404


def test_a_broken_results_file_is_named_not_a_500(client, ml_staff, done_run):
    (done_run.path / "results.json").write_text("{not json")
    client.force_login(ml_staff)
    r = client.get(f"/training/reproductions/{done_run.pk}/")
    assert r.status_code == 200 and 'data-testid="folder-problem"' in r.content.decode()
    assert "results.json cannot be read" in r.content.decode()


def test_the_committed_result_is_shown_read_only(client, ml_staff, committed):
    client.force_login(ml_staff)
    html = main_part(client.get("/training/reproductions/").content.decode())
    assert 'data-testid="committed"' in html and html.count('data-testid="committed-claim"') == 3
    assert 'href="/training/reproductions/committed/"' in html
    r = client.get("/training/reproductions/committed/")
    html = main_part(r.content.decode())
    assert r.status_code == 200 and "results/hat-miniature" in html
    assert html.count('data-testid="cell"') == len(ROWS) * len(COLUMNS) and html.count('data-testid="claim"') == 3
    for name in PLOTS:
        assert f'src="/training/reproductions/committed/{name}"' in html
        assert client.get(f"/training/reproductions/committed/{name}").status_code == 200
    assert client.get("/training/reproductions/committed/run.json").status_code == 404
    assert 'data-testid="cancel"' not in html and "<form" not in html and WEIGHTS_SHA in html


def test_the_real_committed_result_is_complete_and_shown(client, ml_staff):
    """results/hat-miniature as committed (issue 15's cpu-budget run on SmolLM2): every cell of the table with its
    interval, the three claims judged from those cells, the four plots, and the command that reproduces it."""
    from training_jobs.reproduce_selectors import COMMITTED_DIR

    results = json.loads((COMMITTED_DIR / "results.json").read_text())
    run = json.loads((COMMITTED_DIR / "run.json").read_text())
    assert run["base"]["name"] == "smol" and run["budget"]["name"] == "cpu"
    cells = table_cells(results)  # raises on any missing or malformed cell
    assert set(cells) == {key for key, _ in ROWS}
    assert [c["verdict"] for c in judge_claims(cells)] == [c["verdict"] for c in results["claims"]]
    readme = (COMMITTED_DIR / "README.md").read_text()
    assert "reproduce_hat --base smol --budget cpu" in readme or "reproduce.run --base smol --budget cpu" in readme
    client.force_login(ml_staff)
    r = client.get("/training/reproductions/committed/")
    html = main_part(r.content.decode())
    assert r.status_code == 200 and 'data-testid="folder-problem"' not in html
    assert html.count('data-testid="cell"') == len(ROWS) * len(COLUMNS) and html.count('data-testid="claim"') == 3
    for name in PLOTS:
        assert client.get(f"/training/reproductions/committed/{name}").status_code == 200


def test_the_list_links_each_run_with_its_verdicts(client, ml_staff, done_run):
    client.force_login(ml_staff)
    html = main_part(client.get("/training/reproductions/").content.decode())
    assert f'href="/training/reproductions/{done_run.pk}/"' in html and "tiny · smoke · seed 0" in html
    assert html.count('data-testid="verdict"') == 3 and "81.5 s" in html
    assert 'data-testid="new-reproduction"' in html
    assert 'data-testid="reproductions-link"' in client.get("/training/").content.decode()


# --- start and cancel ---------------------------------------------------------------------------------------------


def test_the_form_starts_a_run_on_the_gpu_queue(client, ml_staff, bases, runs_root, sent,
                                                 django_capture_on_commit_callbacks):
    client.force_login(ml_staff)
    with django_capture_on_commit_callbacks(execute=True):
        r = client.post("/training/reproductions/new/", {"base": "smol", "budget": "cpu", "seed": "7"})
    run = ReproductionRun.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/training/reproductions/{run.pk}/"
    assert (run.base, run.budget, run.seed, run.status) == ("smol", "cpu", 7, "queued")
    assert run.out_dir == str(runs_root / str(run.pk)) and run.progress_total == S.PROGRESS_TOTAL
    assert len(sent) == 1 and sent[0]["queue"] == "gpu" and sent[0]["args"] == (str(run.pk),)
    assert sent[0]["task_id"] == run.task_id
    html = main_part(client.get(r["Location"]).content.decode())
    assert 'data-testid="cancel"' in html and 'data-testid="folder-missing"' not in html  # queued: no folder yet


@pytest.mark.parametrize(("form", "box", "message"), [
    ({"base": "smol", "budget": "smoke", "seed": "0"}, "base", "models/not-built-for-tests"),
    ({"base": "tiny", "budget": "smoke", "seed": "-1"}, "seed", "from 0 to 4294967295"),
    ({"base": "tiny", "budget": "smoke", "seed": str(2**33)}, "seed", "from 0 to 4294967295"),
    ({"base": "tiny", "budget": "huge", "seed": "0"}, "budget", "huge"),
    ({"base": "large", "budget": "smoke", "seed": "0"}, "base", "large"),
    ({"base": "tiny", "budget": "smoke", "seed": "x"}, "seed", "whole number"),
])
def test_bad_input_is_a_400_with_the_error_on_its_box(client, ml_staff, smol_not_built, runs_root, sent, form, box,
                                                      message):
    client.force_login(ml_staff)
    r = client.post("/training/reproductions/new/", form)
    assert r.status_code == 400
    html = r.content.decode()
    error = html.split(f'data-testid="error-{box}"', 1)[1].split("</div>", 1)[0]
    assert message in error, error
    assert not ReproductionRun.objects.exists() and not sent


def test_the_service_names_every_problem_at_its_path(ml_staff, smol_not_built, runs_root):
    from console.errors import ValidationFailed

    with pytest.raises(ValidationFailed) as err:
        S.reproduction_start(user=ml_staff, base="smol", budget="fast", seed=True, enqueue=False)
    by_path = {e["path"]: e["message"] for e in err.value.errors}
    assert set(by_path) == {"base", "budget", "seed"}
    assert by_path["base"] == "the base 'smol' (models/not-built-for-tests) is not built (no config.json): run " \
                              "make install"
    assert not ReproductionRun.objects.exists()


def test_only_ml_staff_and_leads_start(reviewer, operator, bases, runs_root):
    from console.errors import NotAllowed

    for user in (reviewer, operator):
        with pytest.raises(NotAllowed):
            S.reproduction_start(user=user, base="tiny", budget="smoke", enqueue=False)


def test_cancel_by_owner_lead_and_others(client, ml_staff, ml_staff2, ml_lead, reviewer, bases, runs_root):
    run = S.reproduction_start(user=ml_staff, base="tiny", budget="smoke", enqueue=False)
    url = f"/training/reproductions/{run.pk}/"
    client.force_login(reviewer)
    assert client.post(url + "cancel/").status_code == 403
    client.force_login(ml_staff2)
    r = client.post(url + "cancel/")
    assert r.status_code == 403 and "who started it" in r.content.decode()
    client.force_login(ml_staff)
    assert client.get(url + "cancel/").status_code == 405
    r = client.post(url + "cancel/")
    assert r.status_code == 302 and ReproductionRun.objects.get(pk=run.pk).status == Job.Status.CANCELLED
    r = client.post(url + "cancel/")  # already finished: the page says why
    assert r.status_code == 409 and 'data-testid="action-error"' in r.content.decode()
    other = S.reproduction_start(user=ml_staff, base="tiny", budget="smoke", enqueue=False)
    ReproductionRun.objects.filter(pk=other.pk).update(status=Job.Status.RUNNING)
    client.force_login(ml_lead)  # a lead cancels anyone's: a running run is asked to stop
    assert client.post(f"/training/reproductions/{other.pk}/cancel/").status_code == 302
    assert ReproductionRun.objects.get(pk=other.pk).status == Job.Status.CANCELLING


# --- the compare page ---------------------------------------------------------------------------------------------


def test_the_compare_page_lists_the_reproductions_for_who_may_see_them(client, ml_staff, reviewer, done_run, committed):
    client.force_login(ml_staff)
    r = client.get("/evals/runs/compare/")  # no runs picked: the page's own 400, the section still there
    html = r.content.decode()
    assert r.status_code == 400 and 'data-testid="reproductions-section"' in html
    assert f'href="/training/reproductions/{done_run.pk}/"' in html
    assert 'data-testid="committed-reproduction-link"' in html and 'href="/training/reproductions/"' in html
    client.force_login(reviewer)  # sees evaluation runs, not training pages
    html = client.get("/evals/runs/compare/").content.decode()
    assert 'data-testid="reproductions-section"' not in html


# --- the worker ---------------------------------------------------------------------------------------------------

LINES = ["reproduce_hat: base tiny (models/demo-tiny), budget smoke, seed 0, out X",
         "data: 16 tasks (left out {}), fixed f1f1, hsa c3c3, 8 distillation prompts, 4 RL tasks, 1.5 s",
         *[line for arm in ("fixed_sft", "hsa_sft", "hsa_sft_distill", "hsa_sft_distill_rl")
           for line in (f"{arm}: sft from base, 8 steps", f"[{arm}/sft] step 1/8 loss 2.1", f"{arm}: done in 3.0 s")],
         "evaluating 5 model(s) on t1 3, k=2, seed 0, serving inprocess",
         *[line for m in ("base", "fixed_sft", "hsa_sft", "hsa_sft_distill", "hsa_sft_distill_rl")
           for line in (f"evaluating {m} (dir)", f"  {m} T1: 6/6 samples", f"{m}: T1 50.0 · T2 40.0")],
         "reproduce_hat: done in 81.5 s; table: results.json"]


def test_the_task_runs_reproduce_and_stores_the_summary(ml_staff, bases, runs_root, monkeypatch):
    from training_jobs import tasks

    run = S.reproduction_start(user=ml_staff, base="tiny", budget="smoke", seed=3, enqueue=False)
    calls, stages = [], []

    def fake(*, base, budget, out_dir, seed, log):
        calls.append((base, budget, out_dir, seed))
        for line in LINES:
            log(line)
            stages.append(ReproductionRun.objects.get(pk=run.pk).stage)
        return write_fixture_folder(out_dir)

    monkeypatch.setattr("training_jobs.reproduce.run.reproduce", fake)
    assert tasks.reproduction_run(str(run.pk))["status"] == "succeeded"
    run.refresh_from_db()
    assert calls == [("tiny", "smoke", run.path, 3)]
    assert "training hsa_sft_distill: sft" in stages and "evaluating hsa_sft" in stages and "table written" in stages
    assert run.status == Job.Status.SUCCEEDED and run.progress_done == run.progress_total == S.PROGRESS_TOTAL
    assert run.git_commit == "1867fa9deadbeef" and run.wall_s["total"] == 81.5
    results = json.loads((run.path / "results.json").read_text())
    assert run.claims == results["claims"] and len(run.claims) == 3
    assert run.provenance["base"]["weights_sha256"] == WEIGHTS_SHA and run.provenance["data"]["fixed"]["sha256"] == \
        FIXED_SHA
    assert run.log.splitlines()[-1].startswith("reproduce_hat: done") and run.stage == ""


def test_a_cancel_stops_the_run_at_its_next_log_line(ml_staff, bases, runs_root, monkeypatch):
    run = S.reproduction_start(user=ml_staff, base="tiny", budget="smoke", enqueue=False)
    monkeypatch.setattr(ReproductionRun, "job_cancel_check_every_s", 0.0)
    seen = []

    def fake(*, base, budget, out_dir, seed, log):
        log(LINES[0])
        S.reproduction_cancel(user=ml_staff, run=ReproductionRun.objects.get(pk=run.pk))
        for line in LINES[1:]:
            seen.append(line)
            log(line)
        raise AssertionError("not stopped")

    monkeypatch.setattr("training_jobs.reproduce.run.reproduce", fake)
    run = S.reproduction_execute(run_id=run.pk)
    assert run.status == Job.Status.CANCELLED and len(seen) == 1 and LINES[1] in run.log


def test_a_failure_is_stored_with_the_log(ml_staff, bases, runs_root, monkeypatch):
    run = S.reproduction_start(user=ml_staff, base="tiny", budget="smoke", enqueue=False)

    def fake(*, base, budget, out_dir, seed, log):
        log(LINES[0])
        raise RuntimeError("out of memory in hsa_sft")

    monkeypatch.setattr("training_jobs.reproduce.run.reproduce", fake)
    run = S.reproduction_execute(run_id=run.pk)
    assert run.status == Job.Status.FAILED and run.error == "RuntimeError: out of memory in hsa_sft"
    assert run.log == LINES[0] and run.claims == [] and run.git_commit == ""


def test_the_stage_of_each_log_line():
    assert S.stage_of("hsa_sft: distill from hsa_sft, 3 steps") == ("training hsa_sft: distill", False)
    assert S.stage_of("hsa_sft: done in 3.0 s -> x") == (None, True)
    assert S.stage_of("evaluating base (models/demo-tiny)") == ("evaluating base", False)
    assert S.stage_of("base: T1 50.0 · T2 40.0") == (None, True)
    assert S.stage_of("[hsa_sft/sft] step 3/8 loss 1.0") == (None, False)
    assert S.stage_of("data: 16 tasks") == ("training", False)


def test_the_audit_timeline_links_a_run(ml_staff, bases, runs_root):
    from console.models import AuditEvent
    from console.selectors import audit_object

    run = S.reproduction_start(user=ml_staff, base="tiny", budget="smoke", seed=2, enqueue=False)
    event = AuditEvent.objects.get(action="reproduction.queued")
    assert event.scope == f"reproduction:{run.pk}" and event.data["seed"] == 2
    assert audit_object(event).url == f"/training/reproductions/{run.pk}/"
