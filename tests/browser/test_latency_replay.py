"""A latency replay in Chromium under the console's CSP: launched from the form, its page with the table, the reference
row and one histogram per level (inline SVG), no CSP violation (the `page` fixture fails on any)."""

from __future__ import annotations

import json

from console.jobs import Job
from tests.streams.preview_helpers import scripted_model  # noqa: F401  (fixture)
from tests.streams.scripted_endpoint import scripted_endpoint  # noqa: F401  (fixture)
from tests.training_jobs.eval_helpers import t1_case
from training_jobs.eval_services import eval_set_import
from training_jobs.evals.replay import replay_summary
from training_jobs.latency_models import LatencyReplay


def _level(c: int, times: list[float]) -> dict:
    from training_jobs.evals.replay import percentile

    return {"concurrency": c, "turns": len(times), "complete": True, "p50_s": percentile(times, 50),
            "p95_s": percentile(times, 95), "under_15s": 1.0, "ttft_p50_s": 0.1 * c, "ttft_p95_s": 0.2 * c,
            "decode_tps_p50": 120.0 / c, "turns_per_s": 0.9 * c ** 0.5, "in_flight_max": c, "fallbacks": 0,
            "errors": 0, "turn_s": times}


def test_launch_a_replay_and_read_its_page(page, login, shot, ml_staff, harness_with_history, scripted_model,
                                           monkeypatch):
    monkeypatch.setattr("training_jobs.tasks.latency_replay.apply_async", lambda **kw: None)
    eval_set_import(user=ml_staff, name="t1-lat", kind="t1", jsonl_text="\n".join(json.dumps(t1_case(i))
                                                                                 for i in range(4)))
    login(ml_staff)
    page.goto("/evals/latency/")
    page.click("[data-testid=new-replay]")
    page.select_option("#id_eval_set_version", "t1-lat@1")
    page.select_option("#id_harness_version", "glow-gadget@1")
    page.fill("#id_concurrency", "1, 4, 8")
    page.fill("#id_turns_per_level", "12")
    page.click("[data-testid=launch]")
    page.wait_for_selector("[data-testid=replay-name]")
    replay = LatencyReplay.objects.get()
    assert replay.concurrency == [1, 4, 8] and replay.turns_per_level == 12
    assert page.text_content("[data-testid=replay-status]").strip() == "queued"
    # as if the worker had played it
    levels = [_level(1, [0.8 + 0.05 * i for i in range(12)]), _level(4, [1.2 + 0.2 * i for i in range(12)]),
              _level(8, [2.0 + 0.45 * i for i in range(12)])]
    LatencyReplay.objects.filter(pk=replay.pk).update(status=Job.Status.SUCCEEDED, summary=replay_summary(levels),
                                                      progress_done=36)
    page.goto(f"/evals/latency/{replay.pk}/")
    page.wait_for_load_state("networkidle")
    assert page.locator("[data-testid=level-row]").count() == 3
    assert "3.407" in page.text_content("[data-testid=reference-row]")
    for c in (1, 4, 8):
        svg = page.locator(f"[data-testid=histogram-{c}] svg")
        assert svg.is_visible() and svg.bounding_box()["width"] > 200
        assert page.locator(f"[data-testid=histogram-{c}] rect.bin").count() == len(levels[0]["turn_s"]) * 0 + \
            len(replay_summary(levels)["histogram_edges"]) - 1
    shot("replay")
