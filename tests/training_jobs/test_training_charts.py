"""The training charts and a run's metrics: the points of a resumed job merged into one run (the later run wins from
the step it resumed at), the SVG's ticks and gridlines, the JSON the interactive chart draws (one colour per run, a
dash for a run whose line would hide under another's, whether a log scale is possible), the job and compare pages
with it (a resumed job's whole run), and a model's metrics as a labelled table with its training curves (only for
those who may see training jobs; 403 for the others, 404 for an unknown model).

Jobs and models are rows made here (progress points included): no training runs in these tests."""

from __future__ import annotations

import json
import re

import pytest

from training_jobs import services
from training_jobs.curve_selectors import (
    chart,
    metric_curve,
    model_metric_rows,
    model_metric_tables,
    nice_ticks,
    resumed_at,
    run_points,
    run_segments,
)
from training_jobs.models import TrainedModel, TrainingJob

pytestmark = pytest.mark.django_db


def _segment(steps, loss, *, t0=1700000000, stage=None, offset=0):
    """Points as the job's reporter stores them for one run of a job."""
    out = []
    for s in steps:
        p = {"step": offset + s, "stage_step": s, "max_steps": 8, "loss": loss(s), "learning_rate": 1e-3, "t": t0 + s}
        if stage:
            p["stage"] = stage
        out.append(p)
    return out


# the first run logged steps 1-5 and was cancelled; its checkpoint was at step 3, so the resumed run logs 4-8
FIRST = _segment(range(1, 6), lambda s: 10.0 - s)
SECOND = _segment(range(4, 9), lambda s: 5.0 - s / 2, t0=1700000100)
RESUMED = FIRST + SECOND + [{"step": 8, "max_steps": 8, "train_loss": 1.5, "t": 1700000200}]


# --- one run across resumes (pure) -----------------------------------------------------------------------------------


def test_a_resumed_job_s_points_are_merged_by_step_the_later_run_winning():
    assert [len(s) for s in run_segments(RESUMED)] == [5, 6]
    merged = run_points(RESUMED)
    assert [p["step"] for p in merged] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [p["segment"] for p in merged] == [0, 0, 0, 1, 1, 1, 1, 1]
    assert [p["loss"] for p in merged[2:5]] == [7.0, 3.0, 2.5]  # steps 4 and 5 come from the resumed run
    assert merged[-1]["train_loss"] == 1.5 and merged[-1]["loss"] == 1.0  # the summary point joins its step
    assert resumed_at(RESUMED) == [4] and resumed_at(merged) == [4]


def test_a_run_that_started_over_replaces_everything_from_its_first_step():
    """Resumed without a checkpoint, a job trains again from step 1: the first run's later steps are gone."""
    again = _segment(range(1, 3), lambda s: 9.0, t0=1700000300)
    merged = run_points(FIRST + again)
    assert [(p["step"], p["loss"]) for p in merged] == [(1, 9.0), (2, 9.0)]
    assert resumed_at(FIRST + again) == [1]


def test_points_without_a_step_are_left_out_and_no_points_is_no_run():
    assert run_points([]) == [] and run_segments([]) == []
    assert run_points([{"loss": 1.0}, {"step": None, "loss": 2.0}, {"step": 2, "loss": 3.0}]) == [
        {"step": 2, "loss": 3.0, "segment": 0}]


def test_a_pipeline_s_stages_are_one_run():
    sft = _segment(range(1, 4), lambda s: 2.0, stage="sft")
    rl = _segment(range(1, 4), lambda s: 0.5, stage="rl", offset=3)
    assert len(run_segments(sft + rl)) == 1 and [p["step"] for p in run_points(sft + rl)] == [1, 2, 3, 4, 5, 6]


# --- the SVG's axes (pure) -------------------------------------------------------------------------------------------


def test_nice_ticks_are_round_values_inside_the_range():
    assert nice_ticks(0, 10, 5) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert nice_ticks(0.41, 2.5, 4) == [0.5, 1.0, 1.5, 2.0, 2.5]
    assert nice_ticks(1e-4, 5e-4, 5) == [0.0001, 0.0002, 0.0003, 0.0004, 0.0005]
    assert nice_ticks(-1.0, 1.0, 3) == [-1.0, 0.0, 1.0]
    assert nice_ticks(3.0, 3.0) == [3.0] and nice_ticks(float("nan"), 1.0) == []


def test_a_curve_has_ticks_and_gridlines_inside_its_box():
    curve = metric_curve(run_points(RESUMED), "loss", x_max=8)
    assert curve.count == 8 and curve.x_max == 8
    assert [label for _, label in curve.x_ticks] == ["0", "2", "4", "6", "8"]
    assert all(curve.top <= y <= curve.bottom for y, _ in curve.y_ticks) and len(curve.y_ticks) >= 3
    assert all(curve.left <= x <= curve.right for x, _ in curve.x_ticks)
    assert curve.x_ticks[0][0] == curve.left and curve.x_ticks[-1][0] == curve.right


# --- the interactive chart's data (pure) -----------------------------------------------------------------------------


def test_chart_data_gives_each_run_a_colour_and_dashes_a_run_that_would_hide():
    same = run_points(_segment(range(1, 9), lambda s: 4.0 / s))
    other = run_points(_segment(range(1, 9), lambda s: 3.0 / s))
    c = chart("loss", "Loss", [("seed-1", same), ("seed-1 again", same), ("other", other), ("seed-1 thrice", same)],
              x_max=10, testid="compare-loss")
    assert [s["colour"] for s in c["series"]] == [0, 1, 2, 3]
    assert [s["dash"] for s in c["series"]] == [0, 1, 0, 2]
    assert [s["same_as"] for s in c["series"]] == ["", "seed-1", "", "seed-1"]
    data = c["data"]
    assert data["x_max"] == 10 and data["log"] is True and data["key"] == "loss"
    assert data["series"][0]["steps"] == [1, 2, 3, 4, 5, 6, 7, 8] and data["series"][0]["values"][1] == 2.0
    frames = {(s["curve"].y_min, s["curve"].y_max, s["curve"].x_max) for s in c["series"]}
    assert len(frames) == 1  # shared axes
    json.dumps(data)  # what json_script writes


def test_chart_of_a_resumed_run_marks_where_it_resumed_and_offers_log_only_above_zero():
    c = chart("loss", "Loss", [("job", run_points(RESUMED))], x_max=8)
    assert c["series"][0]["resumed_at"] == [4] and c["data"]["series"][0]["resumed_at"] == [4]
    assert c["data"]["series"][0]["values"] == [9.0, 8.0, 7.0, 3.0, 2.5, 2.0, 1.5, 1.0]
    lr0 = [{"step": 1, "learning_rate": 0.0}, {"step": 2, "learning_rate": 1e-3}]
    assert chart("learning_rate", "LR", [("job", lr0)])["log"] is False
    assert chart("reward", "Reward", [("job", run_points(RESUMED))]) is None  # never logged: no chart


# --- a model's metrics (pure) ----------------------------------------------------------------------------------------


def test_model_metrics_are_labelled_rows_with_units_and_rounding():
    rows = model_metric_rows({"final_loss": 0.123456, "train_loss": 0.5, "wall_s": 95.2, "steps_this_run": 1200,
                              "samples_per_s": 3.14159, "kl/mean": 0.000012345, "note": "ok"})
    shown = {r["key"]: (r["label"], r["text"]) for r in rows}
    assert [r["key"] for r in rows][:5] == ["final_loss", "train_loss", "steps_this_run", "wall_s", "samples_per_s"]
    assert shown["final_loss"] == ("Final loss", "0.1235")
    assert shown["wall_s"] == ("Training time", "1 min 35 s")
    assert shown["steps_this_run"] == ("Steps", "1,200")
    assert shown["samples_per_s"] == ("Throughput", "3.14 samples/s")
    assert shown["kl/mean"] == ("Kl mean", "1.23e-05") and shown["note"] == ("Note", "ok")
    assert model_metric_rows({}) == [] and model_metric_rows(None) == []


def test_per_group_figures_are_a_table_not_a_run_on_row():
    """A metric holding figures per harness (the glow-gadget adapter's held-out turns) is a table with a column per
    harness; a text value wraps (not a one-line figure cell, which overflowed the card)."""
    metrics = {"final_loss": 0.1, "note": "trained on the three versions; see the card",
               "heldout": {"skincare_v1": {"right_skill": 0.625, "n": 8},
                           "skincare_v2": {"right_skill": 0.125, "end_to_end_exact": 0.25}}}
    rows = model_metric_rows(metrics)
    assert [r["key"] for r in rows] == ["final_loss", "note"]
    assert [r["num"] for r in rows] == [True, False]
    (table,) = model_metric_tables(metrics)
    assert table["key"] == "heldout" and table["label"].startswith("Held-out turns by harness")
    assert table["columns"] == ["skincare_v1", "skincare_v2"]
    assert [(r["label"], r["cells"]) for r in table["rows"]] == [
        ("Right skill", ["0.625", "0.125"]), ("N", ["8", "—"]), ("End to end exact", ["—", "0.25"])]
    assert model_metric_tables({"final_loss": 0.1, "empty": {}}) == [] and model_metric_tables(None) == []


def test_a_base_model_s_measured_scores_are_a_table_of_estimates():
    """The SmolLM2 base's T1/T4 scores (training_jobs.services.base_models): a table per set with each estimate's
    score, interval and cases, the set's counts in the label; the scores file stays a row."""
    est = {"mean": 0.1, "ci_low": 0.033, "ci_high": 0.183, "n": 60}
    metrics = {"scores_file": "results/smollm2-135m-base-scores.json",
               "t4": {"n": 60, "of": 541, "k": 1, "prompt_strict": est,
                      "instruction_strict": {"mean": 0.215, "ci_low": 0.146, "ci_high": 0.291, "n": 93}},
               "t1": {"n": 12, "of": None, "k": 1, "accuracy": {"mean": 1.0, "ci_low": 1.0, "ci_high": 1.0, "n": 12},
                      "pass_k": {"mean": None, "ci_low": None, "ci_high": None, "n": 0}}}
    assert [r["key"] for r in model_metric_rows(metrics)] == ["scores_file"]
    t4, t1 = model_metric_tables(metrics)
    assert t4["label"] == "IFEval (T4): 60 of 541 cases, k = 1" and t1["label"] == "T1 tool use: 12 cases, k = 1"
    assert t4["columns"] == ["score", "95 % interval", "cases"]
    assert [(r["label"], r["cells"]) for r in t4["rows"]] == [
        ("Prompt strict", ["10.0 %", "[3.3, 18.3 %]", "60"]),
        ("Instruction strict", ["21.5 %", "[14.6, 29.1 %]", "93"])]
    assert [r["cells"] for r in t1["rows"]] == [["100.0 %", "[100.0, 100.0 %]", "12"], ["—", "—", "0"]]


def test_a_resumed_stage_s_metrics_cover_the_whole_run():
    rows = model_metric_rows({"final_loss": 1.0, "train_loss": 1.5, "steps_this_run": 5, "wall_s": 10}, RESUMED)
    shown = {r["key"]: r for r in rows}
    assert shown["runs"]["text"] == "2" and shown["runs"]["note"] == "resumed at step 4"
    assert shown["steps"]["text"] == "8"
    assert shown["run_mean_loss"]["text"] == f"{(9 + 8 + 7 + 3 + 2.5 + 2 + 1.5 + 1) / 8:.4f}"
    assert shown["steps_this_run"]["label"] == "Steps (last run)" and "only the run" in shown["wall_s"]["note"]
    assert shown["final_loss"]["label"] == "Final loss"  # the last step's loss is the whole run's


# --- the pages -------------------------------------------------------------------------------------------------------


@pytest.fixture
def base(db):
    return services.demo_base_model()


def _job(user, base, name, metrics, **fields) -> TrainingJob:
    defaults = {"kind": "sft", "status": "succeeded", "config": {"max_steps": 8}, "progress_done": 8,
                "progress_total": 8}
    return TrainingJob.objects.create(name=name, base_model=base, created_by=user, metrics=metrics,
                                      **{**defaults, **fields})


def _chart_data(html: str, testid: str) -> dict:
    found = re.search(rf'<script id="chart-data-{re.escape(testid)}" type="application/json">(.*?)</script>', html,
                      re.S)
    assert found, f"no chart data {testid}"
    return json.loads(found.group(1))


def test_job_page_draws_a_resumed_job_s_whole_run(client, ml_staff, base):
    job = _job(ml_staff, base, "resumed-sft", RESUMED, resumes=1)
    client.force_login(ml_staff)
    html = client.get(f"/training/{job.pk}/").content.decode()
    data = _chart_data(html, "loss-curve")
    assert data["series"][0]["steps"] == [1, 2, 3, 4, 5, 6, 7, 8] and data["series"][0]["resumed_at"] == [4]
    assert data["series"][0]["values"][3] == 3.0  # step 4 as the resumed run logged it
    assert "resumed at step 4" in html and 'class="fallback"' in html and "vendor/uplot/uPlot.iife.min.js" in html
    assert 'data-testid="loss-curve-smoothing"' in html and 'data-testid="loss-curve-log"' in html
    assert 'data-testid="lr-curve"' in html and "<script>" not in html  # CSP: data only, no inline script
    # the live fragment carries the chart data too (charts.js redraws from it)
    fragment = client.get(f"/training/{job.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert _chart_data(fragment, "loss-curve")["series"][0]["steps"][-1] == 8


def test_compare_page_keeps_two_runs_with_the_same_values_apart(client, ml_staff, base):
    points = _segment(range(1, 9), lambda s: 2.0 / s)
    one = _job(ml_staff, base, "seed-7", points)
    two = _job(ml_staff, base, "seed-7-again", points)
    resumed = _job(ml_staff, base, "resumed", RESUMED, resumes=1)
    client.force_login(ml_staff)
    response = client.get("/training/compare/", {"jobs": [str(one.pk), str(two.pk), str(resumed.pk)]})
    assert response.status_code == 200
    html = response.content.decode()
    data = _chart_data(html, "compare-loss")
    assert [(s["name"], s["colour"], s["dash"], s["same_as"]) for s in data["series"]] == [
        ("seed-7", 0, 0, ""), ("seed-7-again", 1, 1, "seed-7"), ("resumed", 2, 0, "")]
    assert 'class="line series-1 dash-1"' in html and "the same values as seed-7" in html
    assert 'data-testid="compare-runs"' in html and "2 runs · resumed at step 4" in html
    loss = next(c for c in response.context["charts"] if c["key"] == "loss")
    assert [s["job"].pk for s in loss["series"]] == [one.pk, two.pk, resumed.pk]
    assert response.context["rows"][2]["loss"] == 1.0 and response.context["rows"][2]["runs"] == 2


@pytest.fixture
def resumed_model(ml_staff, base):
    job = _job(ml_staff, base, "resumed-sft", RESUMED, resumes=1)
    return TrainedModel.objects.create(name="resumed-sft · HSA-SFT", kind="sft", path="/tmp/runs/r/sft/final",
                                       parent=base, job=job, config={"max_steps": 8}, created_by=ml_staff,
                                       metrics={"final_loss": 1.0, "train_loss": 1.5, "wall_s": 12.5,
                                                "steps_this_run": 5, "samples_per_s": 2.5})


def test_model_page_shows_metrics_as_a_table_and_its_training_curves(client, ml_staff, resumed_model):
    client.force_login(ml_staff)
    response = client.get(f"/models/{resumed_model.pk}/")
    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-testid="metrics"' in html and "<th scope=\"row\">Training time (last run)</th>" in html
    assert "12 s" in html and "2.50 samples/s" in html and "resumed at step 4" in html
    assert '&quot;final_loss&quot;' not in html and '"final_loss":' not in html.split('chart-data')[0]  # no raw JSON
    data = _chart_data(html, "model-loss")
    assert data["series"][0]["steps"] == [1, 2, 3, 4, 5, 6, 7, 8] and data["x_max"] == 8
    listing = client.get("/models/").content.decode()
    assert 'data-testid="model-final-loss">1.0000<' in listing


def test_a_pipeline_model_s_curve_is_its_own_stage_stepped_within_it(client, ml_staff, base):
    sft = _segment(range(1, 5), lambda s: 2.0, stage="sft")
    rl = [{**p, "reward": 0.25 * p["stage_step"]} for p in _segment(range(1, 5), lambda s: 0.5, stage="rl", offset=4)]
    job = _job(ml_staff, base, "pipe", sft + rl, kind="pipeline")
    model = TrainedModel.objects.create(name="pipe · RL", kind="rl", path="/tmp/p/rl/final", parent=base, job=job,
                                        config={"max_steps": 4}, metrics={"final_loss": 0.5}, created_by=ml_staff)
    client.force_login(ml_staff)
    html = client.get(f"/models/{model.pk}/").content.decode()
    assert _chart_data(html, "model-loss")["series"][0]["steps"] == [1, 2, 3, 4]
    assert _chart_data(html, "model-reward")["series"][0]["values"] == [0.25, 0.5, 0.75, 1.0]


@pytest.mark.parametrize("role, status, curves", [("ml_staff", 200, True), ("reviewer", 200, False),
                                                  ("manager", 200, False), ("operator", 403, False),
                                                  ("outsider", 403, False)])
def test_model_page_curves_only_for_those_who_see_training(request, client, resumed_model, role, status, curves):
    client.force_login(request.getfixturevalue(role))
    response = client.get(f"/models/{resumed_model.pk}/")
    assert response.status_code == status
    if status == 200:
        html = response.content.decode()
        assert 'data-testid="metric-final_loss"' in html  # the metrics are the model's: every model viewer
        assert ('chart-data-model-loss' in html) is curves


def test_model_page_shows_per_harness_figures_as_a_table(client, manager, ml_staff, base):
    model = TrainedModel.objects.create(
        name="adapter", kind="sft", path="/tmp/adapter", parent=base, is_adapter=True, created_by=ml_staff,
        metrics={"final_loss": 0.105, "heldout": {"skincare_v1": {"right_tool_and_link_id": 0.75},
                                                  "skincare_v2": {"right_tool_and_link_id": 0.5}}})
    client.force_login(manager)
    html = client.get(f"/models/{model.pk}/").content.decode()
    section = html.split('data-testid="training-metrics"')[1].split("</section>")[0]
    assert 'data-testid="metric-final_loss"' in section and "None: a base model." not in section
    row = re.search(r'data-testid="metric-heldout-right_tool_and_link_id">(.*?)</tr>', html, re.S).group(1)
    assert re.findall(r'<td class="num">([^<]*)</td>', row) == ["0.75", "0.5"]
    assert 'data-testid="metric-heldout"' not in html  # not a row of "Skincare v1 …; Skincare v2 …"


def test_a_base_model_page_shows_its_measured_scores_as_tables(client, manager, base):
    base.metrics = {"scores_file": "results/smollm2-135m-base-scores.json",
                    "t4": {"n": 60, "of": 541, "k": 1,
                           "prompt_strict": {"mean": 0.1, "ci_low": 0.033, "ci_high": 0.183, "n": 60}}}
    base.save(update_fields=["metrics"])
    client.force_login(manager)
    html = client.get(f"/models/{base.pk}/").content.decode()
    assert "IFEval (T4): 60 of 541 cases, k = 1" in html and 'data-testid="metric-scores_file"' in html
    row = re.search(r'data-testid="metric-t4-prompt_strict">(.*?)</tr>', html, re.S).group(1)
    assert re.findall(r'<td class="num">([^<]*)</td>', row) == ["10.0 %", "[3.3, 18.3 %]", "60"]
    assert 'data-testid="metric-t4"' not in html  # not one run-on row


def test_unknown_model_and_job_are_404_and_a_base_model_has_no_metrics(client, ml_staff, base):
    client.force_login(ml_staff)
    assert client.get("/models/00000000-0000-0000-0000-000000000000/").status_code == 404
    assert client.get("/training/00000000-0000-0000-0000-000000000000/").status_code == 404
    html = client.get(f"/models/{base.pk}/").content.decode()
    assert "None: a base model." in html and "chart-data-" not in html


def test_compare_refuses_anonymous_and_other_roles(client, ml_staff, reviewer, base):
    points = _segment(range(1, 3), lambda s: 1.0)
    ids = [str(_job(ml_staff, base, n, points).pk) for n in ("a", "b")]
    assert client.get("/training/compare/", {"jobs": ids}).status_code == 302
    client.force_login(reviewer)
    assert client.get("/training/compare/", {"jobs": ids}).status_code == 403
