"""The report's three claims, judged from the reproduction's table (plain Python).

    (a) fixed-harness SFT memorises the harness; HSA-SFT keeps its accuracy when the harness changes
    (b) stage-1 SFT costs general instruction following; on-policy distillation from the frozen base restores it
    (c) agentic RL adds on top of HSA-SFT and distillation

Every comparison is between two cells of :func:`training_jobs.reproduce.table.table_cells` (figures with 95 %
intervals) and gets one of three verdicts:

- ``reproduced``: the difference has the claimed sign and the two intervals do not overlap (a conservative test:
  two independent 95 % intervals that do not overlap mean a difference well beyond p < 0.05);
- ``direction only``: the claimed sign, but the intervals overlap (the miniature cannot tell it from noise);
- ``not reproduced``: no difference, or the other sign.

The live-room claims are judged on **effectiveness**, not accuracy: a safe fallback ("let me check that for you")
makes no false claim, so accuracy counts it as right; a model that never answers would reproduce any accuracy
claim. Effectiveness counts only replies that answer the question with the right facts. IFEval is judged on
prompt-level strict accuracy (the usual headline; the report's sources do not say which metric they mean).
A claim with several comparisons holds as well as its weakest one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

REPRODUCED, DIRECTION_ONLY, NOT_REPRODUCED = "reproduced", "direction only", "not reproduced"
_ORDER = (NOT_REPRODUCED, DIRECTION_ONLY, REPRODUCED)  # weakest first

Cells = Mapping[str, Mapping[str, Mapping[str, float]]]


@dataclass(frozen=True)
class Comparison:
    """``better`` should score above ``worse`` on ``column`` (a key of the table's columns)."""

    what: str
    column: str
    better: str
    worse: str


@dataclass(frozen=True)
class Claim:
    key: str
    statement: str
    comparisons: tuple[Comparison, ...]


CLAIMS: tuple[Claim, ...] = (
    Claim("a", "Fixed-harness SFT memorises the harness; HSA-SFT keeps working when tools, skills or the prompt "
               "change (report: Harness-Variant QA 94.6 for HSA-SFT vs 75.4 for the base).", (
        Comparison("HSA-SFT beats fixed-harness SFT on changed harnesses (T2 effectiveness)", "t2_effectiveness",
                   "hsa_sft", "fixed_sft"),
    )),
    Claim("b", "Stage-1 SFT costs general instruction following (report: fixed-harness SFT −7.7 IFEval); "
               "on-policy distillation from the frozen base restores it (+8.5).", (
        Comparison("fixed-harness SFT loses IFEval against the base", "ifeval_prompt_strict", "base", "fixed_sft"),
        Comparison("distillation restores IFEval after HSA-SFT", "ifeval_prompt_strict", "hsa_sft_distill",
                   "hsa_sft"),
    )),
    Claim("c", "Agentic RL adds on top of HSA-SFT and distillation (the report's final model).", (
        Comparison("RL beats distillation in distribution (T1 effectiveness)", "t1_effectiveness",
                   "hsa_sft_distill_rl", "hsa_sft_distill"),
        Comparison("RL beats distillation on changed harnesses (T2 effectiveness)", "t2_effectiveness",
                   "hsa_sft_distill_rl", "hsa_sft_distill"),
    )),
)


def compare(cells: Cells, c: Comparison) -> dict[str, Any]:
    """One comparison: both cells, the difference in points and its verdict."""
    better, worse = cells[c.better][c.column], cells[c.worse][c.column]
    diff = 100 * (better["mean"] - worse["mean"])
    if diff <= 0:
        verdict = NOT_REPRODUCED
    elif better["ci_low"] > worse["ci_high"]:
        verdict = REPRODUCED
    else:
        verdict = DIRECTION_ONLY
    return {"what": c.what, "column": c.column, "better": c.better, "worse": c.worse,
            "better_cell": dict(better), "worse_cell": dict(worse), "difference_pts": round(diff, 1),
            "verdict": verdict}


def judge_claims(cells: Cells) -> list[dict[str, Any]]:
    """Every claim of :data:`CLAIMS` with its comparisons and its verdict (the weakest of its comparisons)."""
    out = []
    for claim in CLAIMS:
        comparisons = [compare(cells, c) for c in claim.comparisons]
        verdict = min((x["verdict"] for x in comparisons), key=_ORDER.index)
        out.append({"claim": claim.key, "statement": claim.statement, "verdict": verdict,
                    "comparisons": comparisons})
    return out


def _cell_text(cell: Mapping[str, float]) -> str:
    return f"{100 * cell['mean']:.1f} [{100 * cell['ci_low']:.1f}, {100 * cell['ci_high']:.1f}]"


def claims_markdown(verdicts: list[dict[str, Any]]) -> list[str]:
    """The claims section of the table: one line per claim, its verdict in bold, the numbers behind it."""
    lines = ["## The claims", "",
             "Judged on effectiveness for the live room (a fallback is accurate but answers nothing) and IFEval "
             "prompt-level strict. *Reproduced*: the claimed sign and non-overlapping 95 % intervals; *direction "
             "only*: the claimed sign within the noise; *not reproduced*: no difference or the other sign.", ""]
    for v in verdicts:
        lines.append(f"- **({v['claim']}) {v['verdict']}.** {v['statement']}")
        for c in v["comparisons"]:
            lines.append(f"  - {c['what']}: {c['better']} {_cell_text(c['better_cell'])} vs {c['worse']} "
                         f"{_cell_text(c['worse_cell'])}, {c['difference_pts']:+.1f} pts: {c['verdict']}")
    lines.append("")
    return lines
