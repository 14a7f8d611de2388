"""The training data of a reproduction run, made once and shared by every arm (plain Python, no Django).

Tasks: canonical samples (a viewer comment in a room with the reference policy's gold turn) under T1's own
harness (``skincare_v1``, :data:`training_jobs.evals.build_t1.HARNESS`): every comment of the demo scenarios, then
the tiny model's seeded gold generator on its training split for as many more as the budget needs, shuffled by
the run's seed. The evaluation sets are built apart from these sources (hand-written T1 comments, held-out link
ids and names); on top of that a task is left out when its comment or reply leaks into any T1-T4 text
(:func:`training_jobs.evals.leakage.find_leaks`: exact, contained or a shared 8-gram).

Stage 1 data, the same tasks in the same order for both SFT arms, one row per task:

- ``fixed``: the task under its original harness, rendered as it is (the fixed-harness baseline);
- ``hsa``: the task under one HSA state (every operator at its recipe probability, the *training* name pool;
  :mod:`training_jobs.hsa.dataset`), the first of two drawn that keeps the gold turn valid.

A task is kept only when both its rows fit ``max_seq_len`` on the base's tokenizer (so truncation drops no row
of either arm) and its HSA row has no held-out term (:func:`training_jobs.hsa.leaks.heldout_leaks`,
:func:`training_jobs.evals.t2.t2_leaks` against T2's harness states). Stage 2 prompts come from
:func:`training_jobs.hat.general_prompts.general_prompts` (disjoint from IFEval by construction and by test; checked
again here); stage 3 rolls out the first ``rl_prompts`` tasks.

Every file is written as canonical JSON lines and identified by its sha256.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from training_jobs.evals.leakage import training_row_text
from training_jobs.hsa.samples import Sample

HSA_VARIANTS_PER_TASK = 2  # HSA states drawn per task; the first that keeps the gold turn valid is used
LENGTH_MARGIN = 8  # tokens kept free below max_seq_len (the trainer's own rendering may add a token or two)
RL_AUGMENT_PROBABILITY = 0.5  # share of RL rollouts under an HSA state (the rest under the original harness)


def train_harness_name() -> str:
    """The harness the tasks are written under: T1's (T2 and T3 are its held-out variants and perturbations)."""
    from training_jobs.evals.build_t1 import HARNESS

    return HARNESS


def canonical_line(row: Mapping[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, ensure_ascii=False, default=str) + "\n"


def write_jsonl(rows: Iterable[Mapping[str, Any]], path: Path) -> str:
    """Write canonical JSON lines; returns the file's sha256."""
    digest = hashlib.sha256()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            line = canonical_line(row)
            digest.update(line.encode("utf-8"))
            f.write(line)
    return digest.hexdigest()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- what the model must never see ------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def eval_texts() -> tuple[str, ...]:
    """Every evaluation text: the comments and gold replies of T1, T2 and T3, and the 541 IFEval prompts."""
    from training_jobs.evals.cases import EVAL_SETS, case_texts
    from training_jobs.evals.ifeval import load_prompts

    texts: dict[str, None] = {}
    for spec in EVAL_SETS.values():
        for case in spec.load():
            texts.update(dict.fromkeys(case_texts(case)))
    texts.update(dict.fromkeys(p.prompt for p in load_prompts()))
    return tuple(texts)


@lru_cache(maxsize=1)
def _t2_cases_and_terms() -> tuple[list[Any], dict[str, Any]]:
    from training_jobs.evals.cases import EVAL_SETS
    from training_jobs.evals.t2 import set_heldout_terms

    cases = EVAL_SETS["t2-harness-variant-qa"].load()
    return cases, set_heldout_terms(cases)


def heldout_state_leaks(texts: Sequence[str]) -> list[str]:
    """Held-out names, phrasings, codes or settings of T2's harness states found in ``texts`` (described)."""
    from training_jobs.evals.t2 import t2_leaks

    cases, terms = _t2_cases_and_terms()
    return [str(leak) for leak in t2_leaks(cases, texts, terms=terms)]


def eval_leaks(texts: Sequence[str]) -> list[Any]:
    """Evaluation texts found in ``texts``: :class:`training_jobs.evals.leakage.Leak` records (empty: none)."""
    from training_jobs.evals.leakage import find_leaks

    return find_leaks(texts, eval_texts())


def row_text(row: Mapping[str, Any]) -> str:
    """A training row as one text (its messages and its tools: everything the model reads and writes), as the
    leakage checks read every training source."""
    return training_row_text(row)


# --- the base's chat template ---------------------------------------------------------------------------------


def template_problems(tokenizer: Any) -> list[str]:
    """Why the base's chat template cannot train these arms (empty: it can). Every row is a tool-use turn, so the
    template must show the model the harness's tools (else no arm could see a renamed tool, and the comparison
    would measure nothing), and TRL must find the assistant's tokens in it (``{% generation %}`` markers, or a
    template TRL knows how to patch) for the loss on the assistant turns only."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return ["it has no chat template"]
    problems = []
    probe = {"type": "function", "function": {"name": "probe_tool_x7", "description": "probe",
                                              "parameters": {"type": "object", "properties": {}}}}
    try:
        shown = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=[probe], tokenize=False,
                                              add_generation_prompt=True)
    except Exception as exc:  # a template that refuses tools
        shown = f"{type(exc).__name__}: {exc}"
    if "probe_tool_x7" not in shown:
        problems.append("its chat template does not render the tools a request offers")
    if not has_generation_markers(template):
        try:
            get_training_chat_template(tokenizer)
        except Exception:  # noqa: BLE001 (TRL raises ValueError for a template it does not know)
            problems.append("its chat template has no {% generation %} markers and is not one TRL can patch "
                            "(assistant-only loss)")
    return problems


# --- tasks ----------------------------------------------------------------------------------------------------


def task_pool(n: int, seed: int) -> list[Sample]:
    """At least ``n`` candidate tasks under the training harness, shuffled by ``seed``: the scenario samples and
    then gold-generator samples on the generator's training split."""
    from training_jobs.hsa.samples import load_demo_manifest, scenario_samples, tiny_model_samples

    name = train_harness_name()
    manifest = load_demo_manifest(name)
    pool = scenario_samples([(name, manifest)])
    if len(pool) < n:
        pool += tiny_model_samples(n - len(pool), seed=seed, split="train", manifest=manifest)
    random.Random(f"reproduce-tasks:{seed}").shuffle(pool)
    return pool


def _leaking_tasks(samples: Sequence[Sample]) -> set[int]:
    """Indexes of the samples whose comments or reply leak into an evaluation text. Each comment and the reply is
    checked on its own too, so a short evaluation text (matched only exactly) is found when a task repeats it."""
    owners: list[int] = []
    texts: list[str] = []
    for i, s in enumerate(samples):
        parts = [str(c.get("text", "")) for c in s.comments] + [s.reply]
        for text in (*parts, "\n".join(parts)):
            owners.append(i)
            texts.append(text)
    return {owners[leak.training_index] for leak in eval_leaks(texts)}


# --- stage 1 rows ----------------------------------------------------------------------------------------------


@dataclass
class Stage1Data:
    """The tasks of stage 1 and their rows under each arm's harness states (same order, one row per task)."""

    tasks: list[Sample]
    fixed_rows: list[dict[str, Any]]
    hsa_rows: list[dict[str, Any]]
    left_out: dict[str, int] = field(default_factory=dict)  # reason -> candidate tasks left out
    hsa_stats: dict[str, Any] = field(default_factory=dict)


def _token_counter(tokenizer: Any) -> Callable[[Mapping[str, Any]], int]:
    def count(row: Mapping[str, Any]) -> int:
        ids = tokenizer.apply_chat_template(list(row["messages"]), tools=json.loads(row["tools"]) or None,
                                            tokenize=True, return_dict=True)["input_ids"]
        return len(ids)

    return count


def stage1_data(n: int, *, seed: int, tokenizer: Any, max_seq_len: int) -> Stage1Data:
    """``n`` tasks with their fixed-harness and HSA rows (see the module docstring); ValueError when fewer than
    ``n`` candidates pass every check."""
    from training_jobs.hsa.dataset import BuildStats, Recipe, iter_build, iter_fixed_harness
    from training_jobs.hsa.leaks import heldout_leaks

    count = _token_counter(tokenizer)
    left_out: dict[str, int] = {}
    want = n + n // 2 + 8  # candidates: some are left out below
    for _ in range(4):
        pool = task_pool(want, seed)
        leaking = _leaking_tasks(pool)
        clean = [s for i, s in enumerate(pool) if i not in leaking]
        left_out = {"leaks_into_evaluation": len(pool) - len(clean)}
        candidates = clean[:want]
        hsa_stats = BuildStats(kind="hsa", samples=len(candidates))
        recipe = Recipe(name=f"reproduce-{seed}", seed=seed, variants_per_sample=HSA_VARIANTS_PER_TASK,
                        names="train")
        hsa_by_task: dict[str, dict[str, Any]] = {}
        for row in iter_build(candidates, recipe, hsa_stats, {}):
            hsa_by_task.setdefault(row["sample_id"], row)  # the first state that kept the gold turn
        fixed_stats = BuildStats(kind="fixed_harness", samples=len(candidates))
        fixed_by_task = {row["sample_id"]: row for row in iter_fixed_harness(candidates, fixed_stats, {})}
        tasks, fixed_rows, hsa_rows = [], [], []
        for sample in candidates:
            if len(tasks) == n:
                break
            hsa, fixed = hsa_by_task.get(sample.id), fixed_by_task[sample.id]
            reason = ("no_valid_hsa_state" if hsa is None
                      else "longer_than_max_seq_len" if max(count(fixed), count(hsa)) > max_seq_len - LENGTH_MARGIN
                      else "heldout_term" if heldout_leaks([hsa]) or heldout_state_leaks([row_text(hsa)])
                      else "")
            if reason:
                left_out[reason] = left_out.get(reason, 0) + 1
                continue
            tasks.append(sample)
            fixed_rows.append(fixed)
            hsa_rows.append(hsa)
        if len(tasks) == n:
            return Stage1Data(tasks, fixed_rows, hsa_rows, left_out, hsa_stats.to_dict())
        want *= 2
    raise ValueError(f"only {len(tasks)} of {n} training tasks pass the checks (left out: {left_out}); "
                     f"raise max_seq_len or lower train_samples")


def write_stage1_dataset(rows: Sequence[Mapping[str, Any]], out: Path) -> str:
    """``out/rows.jsonl`` (canonical; its sha256 is returned) and ``out/dataset`` (what SFTTrainer reads)."""
    from training_jobs.hsa.dataset import write_rows

    digest = write_jsonl(rows, out / "rows.jsonl")
    write_rows(rows, out / "dataset")
    return digest


# --- stages 2 and 3 ---------------------------------------------------------------------------------------------


def distill_prompts(n: int, seed: int) -> list[str]:
    """General instruction prompts for stage 2; ValueError if one leaks into an evaluation set."""
    from training_jobs.hat.general_prompts import general_prompts

    prompts = general_prompts(n, seed)
    leaks = eval_leaks(prompts)
    if leaks:
        raise ValueError("general prompts leak into the evaluation sets: "
                         + "; ".join(leak.describe() for leak in leaks[:3]))
    return prompts


def rl_task_rows(samples: Sequence[Sample], *, seed: int) -> list[dict[str, Any]]:
    """What the RL stage's policy reads: the rendered prompt and the tools of each rollout task, drawn as
    :func:`training_jobs.hat.rl.run_rl` draws them (same samples, augment probability and seed)."""
    from harness_editor.render import render_tools
    from training_jobs.hat.rl import rollout_tasks

    tasks = rollout_tasks(list(samples), augment_probability=RL_AUGMENT_PROBABILITY, seed=seed)
    return [{"sample_id": t.reference.id, "augmented": t.augmented, "messages": t.prompt,
             "tools": json.dumps(render_tools(t.manifest), ensure_ascii=False)} for t in tasks]
