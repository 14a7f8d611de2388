"""The evaluation half of ``manage.py reproduce_hat``: the base and every trained model on T1, T2, T3 and T4.

:func:`evaluate_models` plays, for each model, the same cases with the same seeds through the project's one
evaluation path — :func:`training_jobs.evals.runner.run_case` (the one turn engine,
:func:`streams.engine.turn.run_turn`, judged by the one rule set through
:func:`training_jobs.evals.judging.judge_case`, as ``manage.py run_eval`` does), T2 / T3 cases under their
held-out variant or perturbation of the harness the case names, and IFEval prompts through
:func:`~training_jobs.evals.runner.run_instruction_case`, scored by :mod:`training_jobs.evals.ifeval` — and
aggregates with the runner's case-resampling bootstrap (95 % intervals; samples of one case are not
independent, so cases are what is resampled).

What is evaluated, without the database: the committed sets (``data/evals/*.jsonl``, which
``python -m training_jobs.evals.build_sets --check`` proves current) and the 541 IFEval prompts, as the seeded
eval sets of ``run_eval`` hold them. A budget takes a seeded subset of each, the same for every model:

- T1: ``n_t1`` cases; T2: ``n_t2`` cases, the T2 versions of the chosen T1 tasks first, so the gap
  T1 − T2 is measured on the same tasks (paired) when ``n_t2 == n_t1``; every T2 case runs under a held-out
  harness state (HSA held-out pool: names and settings never used in training);
- T3: ``n_t3_per_level`` cases at each perturbation level (Clean, Slight, Medium, Heavy, Union; the Clean
  level without the set's tool-fault cases, which are no perturbation level);
- T4: ``n_t4`` IFEval prompts; all four metrics (prompt / instruction level, strict / loose), each the mean
  over the k samples, with prompts resampled for the interval.

Sampling (all models): temperature :data:`TEMPERATURE`, ``budget.eval_max_new_tokens`` per model call, sample
``j`` of a case seeded ``seed + j``. A turn may take up to :data:`DEADLINE_S`: this measures what the weights
do, not CPU latency (the latency figures are kept with each set's results). Plain Python, no ORM.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from training_jobs.evals import runner
from training_jobs.evals.cases import EVAL_SETS, PERTURBATION_LEVELS, EvalCase, case_texts, content_hash, parse_case
from training_jobs.evals.ifeval import HEADLINES, PROMPTS_PATH, IFEvalPrompt, load_prompts, score_responses
from training_jobs.reproduce.eval_serving import DEFAULT_SERVING, served

if TYPE_CHECKING:
    from training_jobs.reproduce.parts import Parts

T3_LEVELS: tuple[str, ...] = PERTURBATION_LEVELS
TEMPERATURE = 0.7
DEADLINE_S = 600.0
DEFAULT_MAX_NEW_TOKENS = 256
# One torch thread for generation unless the budget says otherwise (``eval_threads``): decoding one sequence gains
# little from a second thread, and on a shared 2-core machine two OpenMP threads thrash (measured here under load:
# 48 tokens of demo-tiny at 1,000 tokens of context took 1.3-2.7 s with one thread, 40-45 s with two).
DEFAULT_EVAL_THREADS = 1
EVENTS_KEPT = 400  # per sample in samples/*.jsonl (token events dropped first), as eval runs keep them


class EvalBudget(Protocol):
    """What evaluation reads of a budget (training_jobs.reproduce.budgets.Budget has these and more)."""

    name: str
    k: int
    n_t1: int
    n_t2: int
    n_t3_per_level: int
    n_t4: int
    max_seq_len: int
    dtype: str
    threads: int


# --- what is evaluated ----------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def ifeval_cases() -> tuple[EvalCase, ...]:
    """The 541 IFEval prompts as T4 cases ``ifeval-<key>`` (the ids the seeded ``t4-ifeval`` set uses)."""
    return tuple(parse_case({"id": f"ifeval-{p.key}", "kind": "t4", "prompt": p.prompt,
                             "instruction_id_list": list(p.instruction_ids), "kwargs": [dict(k) for k in p.kwargs],
                             "source": str(PROMPTS_PATH.relative_to(PROMPTS_PATH.parents[2]))})
                 for p in load_prompts())


@lru_cache(maxsize=3)
def _set(name: str) -> tuple[EvalCase, ...]:
    return tuple(EVAL_SETS[name].load())


def t1_cases() -> tuple[EvalCase, ...]:
    return _set("t1-live-stream-qa")


def t2_cases() -> tuple[EvalCase, ...]:
    """Every T2 case: each runs under a held-out harness state (the states the leakage test protects)."""
    return _set("t2-harness-variant-qa")


def t3_cases() -> tuple[EvalCase, ...]:
    return _set("t3-robustness")


def t3_level(case: EvalCase) -> str | None:
    """The perturbation level a T3 case measures; None for a tool-fault case (no perturbation level)."""
    if case.tool_faults or case.harness_variant is None:
        return None
    return case.harness_variant.level


def evaluation_texts() -> list[str]:
    """Every evaluation prompt any budget can draw: the comments and gold replies of every T1, T2 and T3 case and
    every IFEval prompt (what must never appear in training data)."""
    texts: dict[str, None] = {}
    for case in (*t1_cases(), *t2_cases(), *t3_cases(), *ifeval_cases()):
        texts.update(dict.fromkeys(case_texts(case)))
    return list(texts)


@dataclass(frozen=True)
class Selection:
    """The cases one run evaluates every model on."""

    t1: tuple[EvalCase, ...]
    t2: tuple[EvalCase, ...]
    t3: dict[str, tuple[EvalCase, ...]]
    t4: tuple[EvalCase, ...]

    def describe(self) -> dict[str, Any]:
        """Case ids and the content hash of each subset (the data hashes a result is stored with)."""
        parts = {"t1": self.t1, "t2": self.t2, **{f"t3.{lv}": cs for lv, cs in self.t3.items()}, "t4": self.t4}
        return {name: {"cases": [c.id for c in cs], "sha256": content_hash(cs)} for name, cs in parts.items()}


def _count(budget: EvalBudget, field: str) -> int:
    n = getattr(budget, field)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"budget.{field} must be a whole number of at least 1, got {n!r}")
    return n


def select_cases(budget: EvalBudget, seed: int) -> Selection:
    """A seeded subset of each set, the same for every model of a run (a budget larger than a set takes it all)."""
    rng = random.Random(f"reproduce-eval:{seed}")
    order = list(t1_cases())
    rng.shuffle(order)
    t1 = tuple(order[:_count(budget, "n_t1")])
    by_parent = {c.parent: c for c in t2_cases()}
    t2 = tuple(by_parent[c.id] for c in order if c.id in by_parent)[:_count(budget, "n_t2")]
    n3 = _count(budget, "n_t3_per_level")
    t3 = {}
    for level in T3_LEVELS:
        at = [c for c in t3_cases() if t3_level(c) == level]
        rng.shuffle(at)
        t3[level] = tuple(at[:n3])
    prompts = list(ifeval_cases())
    rng.shuffle(prompts)
    return Selection(t1=t1, t2=t2, t3=t3, t4=tuple(prompts[:_count(budget, "n_t4")]))


# --- playing -----------------------------------------------------------------------------------------------------


def case_manifest(case: EvalCase, base: Any) -> Any:
    """The harness state a case runs under: its harness, or its T2 held-out variant / T3 perturbation of it (as
    training_jobs.eval_run_services.case_manifest, which needs the ORM to be imported)."""
    variant = case.harness_variant
    if variant is None:
        return base
    if variant.kind == "heldout":
        from training_jobs.evals.t2 import variant_manifest

        return variant_manifest(case, base)
    from training_jobs.evals.t3 import perturbed_manifest

    return perturbed_manifest(case, base)


Progress = Callable[[int, int], None]


def _failed(case: EvalCase, sample: int, exc: Exception) -> runner.SampleOutcome:
    # a case that cannot run (bad variant, engine bug) is judged 0 and the run goes on, as in eval runs
    return runner.SampleOutcome(case_id=case.id, sample=sample, reply="", reason="internal_error", fallback=True,
                                accuracy=0.0, effectiveness=0.0, error=f"{type(exc).__name__}: {exc}")


def _play_all(cases: Sequence[EvalCase], k: int, play: Callable[[EvalCase, int], runner.SampleOutcome],
              progress: Progress | None) -> list[runner.SampleOutcome]:
    """k samples of each case, in order; a sample that cannot run is judged 0 and the rest go on."""
    out = []
    for case in cases:
        for sample in range(k):
            try:
                outcome = play(case, sample)
            except Exception as exc:
                outcome = _failed(case, sample, exc)
            out.append(outcome)
            if progress is not None:
                progress(len(out), len(cases) * k)
    return out


def play_harness_cases(cases: Sequence[EvalCase], *, new_backend: Callable[[int], Any], k: int, seed: int,
                       sampling: Mapping[str, Any], deadline_s: float = DEADLINE_S,
                       progress: Progress | None = None) -> list[runner.SampleOutcome]:
    """k samples of each T1–T3 case through the turn engine, judged by the rules (sample j seeded seed + j)."""
    from training_jobs.evals.build_t1 import harness_manifest
    from training_jobs.evals.judging import judge_case

    bases = {name: harness_manifest(name) for name in dict.fromkeys(c.harness for c in cases)}  # once per harness

    def play(case: EvalCase, sample: int) -> runner.SampleOutcome:
        base = bases[case.harness]
        return runner.run_case(case, sample, manifest=case_manifest(case, base), backend=new_backend(seed + sample),
                               judge=partial(judge_case, base_manifest=base), sampling=sampling, seed=seed + sample,
                               deadline_s=deadline_s)

    return _play_all(cases, k, play, progress)


def play_ifeval_cases(cases: Sequence[EvalCase], *, new_backend: Callable[[int], Any], k: int, seed: int,
                      sampling: Mapping[str, Any], progress: Progress | None = None) -> list[runner.SampleOutcome]:
    """k responses to each IFEval prompt (no harness, no tools); scored together by :func:`ifeval_scores`."""
    def play(case: EvalCase, sample: int) -> runner.SampleOutcome:
        return runner.run_instruction_case(case, sample, backend=new_backend(seed + sample), sampling=sampling,
                                           seed=seed + sample)

    return _play_all(cases, k, play, progress)


# --- figures -----------------------------------------------------------------------------------------------------


def _interval(stats: list[float], value: float) -> tuple[float, float]:
    stats.sort()
    alpha = (1.0 - runner.CONFIDENCE) / 2
    low = stats[int(alpha * (len(stats) - 1))]
    high = stats[int((1 - alpha) * (len(stats) - 1))]
    # a percentile interval of a ratio or a difference can miss its own estimate on a handful of cases: widen it
    return min(low, value), max(high, value)


def ratio_score(numerators: Sequence[float], denominators: Sequence[float], *, seed: int) -> dict[str, Any]:
    """sum(num) / sum(den) with a 95 % bootstrap interval that resamples the units (IFEval's instruction-level
    accuracy: followed instructions over instructions, prompts resampled)."""
    n = len(numerators)
    if n == 0 or sum(denominators) <= 0:
        return {"mean": None, "ci_low": None, "ci_high": None, "n": n}
    value = sum(numerators) / sum(denominators)
    rng = random.Random(seed)
    stats = []
    for _ in range(runner.BOOTSTRAP_RESAMPLES):
        picks = [rng.randrange(n) for _ in range(n)]
        den = sum(denominators[i] for i in picks)
        stats.append(sum(numerators[i] for i in picks) / den if den else value)
    low, high = _interval(stats, value)
    return {"mean": value, "ci_low": low, "ci_high": high, "n": n}


def _case_accuracy(outcomes: Iterable[runner.SampleOutcome]) -> dict[str, float]:
    by_case: dict[str, list[float]] = {}
    for o in outcomes:
        by_case.setdefault(o.case_id, []).append(o.accuracy)
    return {case: sum(v) / len(v) for case, v in by_case.items()}


def gap_score(t1: Sequence[runner.SampleOutcome], t2: Sequence[runner.SampleOutcome], t2_cases: Sequence[EvalCase],
              *, seed: int) -> dict[str, Any]:
    """In-distribution minus harness-variant accuracy (fractions; positive: the model loses accuracy when the
    harness changes). Paired by task when T2 holds exactly the T1 tasks (bootstrap over per-task differences),
    else the two sets are resampled independently."""
    a1 = _case_accuracy(t1)
    parent = {c.id: c.parent for c in t2_cases}
    a2 = {parent.get(case, case): v for case, v in _case_accuracy(t2).items()}
    if not a1 or not a2:
        return {"mean": None, "ci_low": None, "ci_high": None, "n": 0, "paired": False}
    if set(a1) == set(a2):
        diffs = [a1[c] - a2[c] for c in sorted(a1)]
        return {**runner.score(diffs, seed=seed), "paired": True}
    v1, v2 = list(a1.values()), list(a2.values())
    value = sum(v1) / len(v1) - sum(v2) / len(v2)
    rng = random.Random(seed)
    stats = [sum(rng.choice(v1) for _ in v1) / len(v1) - sum(rng.choice(v2) for _ in v2) / len(v2)
             for _ in range(runner.BOOTSTRAP_RESAMPLES)]
    low, high = _interval(stats, value)
    return {"mean": value, "ci_low": low, "ci_high": high, "n": min(len(v1), len(v2)), "paired": False}


def _ifeval_prompt(case: EvalCase) -> IFEvalPrompt:
    return IFEvalPrompt(key=int(case.id.rsplit("-", 1)[1]), prompt=case.prompt,
                        instruction_ids=tuple(case.instruction_id_list), kwargs=tuple(dict(k) for k in case.kwargs))


def ifeval_scores(cases: Sequence[EvalCase], outcomes: Sequence[runner.SampleOutcome], *, k: int,
                  seed: int) -> dict[str, Any]:
    """The four IFEval figures (fractions), each the mean over the k samples with prompts resampled for the 95 %
    interval; ``per_sample``: the official scorer's figures (percent) for each sample index on its own."""
    prompts = [_ifeval_prompt(c) for c in cases]
    key_of = {c.id: p.key for c, p in zip(cases, prompts)}
    replies: dict[int, dict[int, str]] = {}
    for o in outcomes:
        replies.setdefault(o.sample, {})[key_of[o.case_id]] = o.reply
    n = len(prompts)
    per_prompt = {name: [0.0] * n for name in HEADLINES}
    counts = [float(len(p.instruction_ids)) for p in prompts]
    per_sample = {}
    for sample in range(k):
        scores = score_responses(prompts, replies.get(sample, {}))  # a missing reply fails every instruction
        per_sample[str(sample)] = scores.percentages()
        for i, result in enumerate(scores.prompts):
            per_prompt["prompt_strict"][i] += result.strict_rate / k
            per_prompt["prompt_loose"][i] += result.loose_rate / k
            per_prompt["instruction_strict"][i] += sum(r.strict_rate for r in result.instructions) / k
            per_prompt["instruction_loose"][i] += sum(r.loose_rate for r in result.instructions) / k
    out: dict[str, Any] = {}
    for j, name in enumerate(HEADLINES):
        if name.startswith("prompt"):
            out[name] = runner.score(per_prompt[name], seed=seed + j)
        else:
            out[name] = ratio_score(per_prompt[name], counts, seed=seed + j)
    out.update(prompts=n, instructions=int(sum(counts)), per_sample=per_sample,
               latency=runner.latency(outcomes), errors=sum(bool(o.error) for o in outcomes))
    return out


# --- one model, every model ------------------------------------------------------------------------------------------


def model_checksum(model_dir: str | Path) -> str:
    """sha256 over the checkpoint's weight files (names and bytes), the identity a result is stored with."""
    h = hashlib.sha256()
    files = sorted(p for p in Path(model_dir).iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())
    for path in files:
        h.update(path.name.encode())
        with path.open("rb") as f:
            for block in iter(lambda f=f: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def _write_samples(path: Path, outcomes: Sequence[runner.SampleOutcome]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for o in outcomes:
            row = o.to_dict()
            events = [e for e in row["events"] if e.get("type") != "token"]
            row["events"] = events[:EVENTS_KEPT]
            f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")


def _bar(log: Callable[[str], None], what: str) -> Progress:
    last = [-1]

    def progress(done: int, total: int) -> None:
        tenth = int(10 * done / total) if total else 10
        if tenth > last[0] and (tenth % 5 == 0 or done == total):
            last[0] = tenth
            log(f"  {what}: {done}/{total} samples")

    return progress


def evaluate_model(name: str, model_dir: str | Path, selection: Selection, *, budget: EvalBudget, seed: int,
                   out_dir: Path, serving: str = DEFAULT_SERVING, log: Callable[[str], None] = print
                   ) -> dict[str, Any]:
    """One model on the selection: T1, T2, the gap, T3 by level and IFEval; samples written under
    ``out_dir/samples/<name>/``."""
    k = _count(budget, "k")
    max_tokens = int(getattr(budget, "eval_max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
    sampling = {"temperature": TEMPERATURE, "max_tokens": max_tokens}
    t0 = time.perf_counter()
    samples_dir = out_dir / "samples" / name
    threads = int(getattr(budget, "eval_threads", DEFAULT_EVAL_THREADS))
    result: dict[str, Any] = {"path": str(model_dir), "sha256": model_checksum(model_dir), "serving": serving,
                              "threads": threads}
    with served(model_dir, serving=serving, dtype=budget.dtype, threads=threads, max_new_tokens=max_tokens,
                temperature=TEMPERATURE, log_path=out_dir / f"server-{name}.log") as new_backend:
        result["ready_s"] = round(time.perf_counter() - t0, 2)
        play = partial(play_harness_cases, new_backend=new_backend, k=k, seed=seed, sampling=sampling)
        played: dict[str, list[runner.SampleOutcome]] = {}
        for key, cases in (("t1", selection.t1), ("t2", selection.t2),
                           *((f"t3.{lv}", cs) for lv, cs in selection.t3.items())):
            played[key] = play(cases, progress=_bar(log, f"{name} {key}"))
            _write_samples(samples_dir / f"{key}.jsonl", played[key])
        t4 = play_ifeval_cases(selection.t4, new_backend=new_backend, k=k, seed=seed, sampling=sampling,
                               progress=_bar(log, f"{name} t4"))
        _write_samples(samples_dir / "t4.jsonl", t4)
    result["t1"] = runner.aggregate(played["t1"], k=k, seed=seed)
    result["t2"] = runner.aggregate(played["t2"], k=k, seed=seed)
    result["gap"] = gap_score(played["t1"], played["t2"], selection.t2, seed=seed)
    result["t3"] = {lv: runner.aggregate(played[f"t3.{lv}"], k=k, seed=seed) for lv in selection.t3}
    result["t4"] = ifeval_scores(selection.t4, t4, k=k, seed=seed)
    result["wall_s"] = round(time.perf_counter() - t0, 2)
    return result


def _pct(score: Mapping[str, Any] | None) -> str:
    if not score or score.get("mean") is None or not math.isfinite(score["mean"]):
        return "—"
    return f"{100 * score['mean']:.1f} [{100 * score['ci_low']:.1f}, {100 * score['ci_high']:.1f}]"


def _evaluate_in_processes(models: Mapping[str, Path], selection: Selection, *, budget: EvalBudget, seed: int,
                           out_dir: Path, serving: str, workers: int, log: Callable[[str], None],
                           finished: Callable[[str, dict[str, Any]], None]) -> None:
    """:func:`evaluate_model` for several models at once, one process each (``budget.eval_workers``: on a GPU,
    in-process generation decodes one sequence at a time, bound by Python and kernel launches, so one process
    leaves the GPU mostly idle; on 2 CPU cores, one single-threaded process per core). Each process loads its own
    model and plays the same cases with the same seeds (sample j of a case seeded ``seed + j`` on torch in whichever
    process plays it), so the results are those of one process after the other; the processes write their progress
    straight to stdout. ``finished(name, result)`` is called as each model's evaluation ends (it is kept then, not
    when the last one ends: a run stopped half-way keeps what it finished)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    log(f"evaluating {', '.join(models)} in {workers} processes")
    context = multiprocessing.get_context("spawn")  # CUDA cannot be used in a forked child
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {pool.submit(evaluate_model, name, model_dir, selection, budget=budget, seed=seed,
                               out_dir=out_dir, serving=serving, log=print): name
                   for name, model_dir in models.items()}
        failed: list[BaseException] = []
        for future in as_completed(futures):
            try:
                result = future.result()
            except Exception as exc:  # the others still finish and are kept; the first failure is raised after
                log(f"{futures[future]}: evaluation failed: {type(exc).__name__}: {exc}")
                failed.append(exc)
                continue
            finished(futures[future], result)
    if failed:
        raise failed[0]


def evaluation_key(model_dir: str | Path, selection: Selection, *, budget: EvalBudget, seed: int, serving: str
                   ) -> str:
    """What a model's evaluation depends on (its weights, the cases, sampling, k, seed, serving): the key of a kept
    evaluation (:mod:`training_jobs.reproduce.parts`)."""
    from training_jobs.reproduce.parts import key_of

    return key_of({"model": model_checksum(model_dir), "sets": selection.describe(), "k": _count(budget, "k"),
                   "seed": seed, "serving": serving, "temperature": TEMPERATURE, "deadline_s": DEADLINE_S,
                   "max_tokens": int(getattr(budget, "eval_max_new_tokens", DEFAULT_MAX_NEW_TOKENS))})


def evaluate_models(*, models: Mapping[str, Path], budget: EvalBudget, out_dir: Path, seed: int,
                    log: Callable[[str], None] = print, serving: str | None = None, parts: Parts | None = None
                    ) -> dict[str, Any]:
    """Evaluate every model (``{"base": dir, "fixed_sft": dir, ...}``: plain transformers checkpoints) on the same
    seeded cases, the same way (``serving``: one of eval_serving.SERVINGS, default in-process), and return the
    results :func:`training_jobs.reproduce.table.write_table` turns into the table (also written to
    ``out_dir/evaluation.json``). ``parts`` (a :class:`~training_jobs.reproduce.parts.Parts`): keep each model's
    evaluation there, and take one from there instead of playing it again when its key matches."""
    if not models:
        raise ValueError("no models to evaluate")
    serving = serving or getattr(budget, "serving", None) or DEFAULT_SERVING
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    selection = select_cases(budget, seed)
    k = _count(budget, "k")
    sizes = (f"T1 {len(selection.t1)}, T2 {len(selection.t2)}, T3 {sum(map(len, selection.t3.values()))} "
             f"({len(selection.t3)} levels), IFEval {len(selection.t4)}")
    log(f"evaluating {len(models)} model(s) on {sizes} cases, k={k}, seed {seed}, serving {serving}")
    evaluated: dict[str, Any] = {}
    keys = {name: evaluation_key(d, selection, budget=budget, seed=seed, serving=serving)
            for name, d in models.items()} if parts is not None else {}

    def summary(name: str, r: Mapping[str, Any]) -> None:
        log(f"{name}: T1 {_pct(r['t1']['accuracy'])} · T2 {_pct(r['t2']['accuracy'])} · IFEval prompt strict "
            f"{_pct(r['t4']['prompt_strict'])} · {r['wall_s']:.0f} s")

    def finished(name: str, r: dict[str, Any]) -> None:
        summary(name, r)
        if parts is not None:
            log(f"{name}: evaluation kept at {parts.keep_eval(name, keys[name], r, out_dir / 'samples' / name)}")
        evaluated[name] = r

    for name in keys:
        kept = parts.find_eval(name, keys[name])
        if kept is not None:
            parts.restore_samples(name, kept, out_dir / "samples" / name)
            evaluated[name] = {**kept["result"], "kept_part": str(parts.eval_dir(name))}
            log(f"{name}: evaluation taken from the kept part {parts.eval_dir(name)}")
            summary(name, evaluated[name])
    to_play = {name: d for name, d in models.items() if name not in evaluated}
    workers = min(int(getattr(budget, "eval_workers", 1) or 1), len(to_play))
    if workers > 1:
        _evaluate_in_processes(to_play, selection, budget=budget, seed=seed, out_dir=out_dir, serving=serving,
                               workers=workers, log=log, finished=finished)
    else:
        for name, model_dir in to_play.items():
            log(f"evaluating {name} ({model_dir})")
            finished(name, evaluate_model(name, model_dir, selection, budget=budget, seed=seed, out_dir=out_dir,
                                          serving=serving, log=log))
    evaluated = {name: evaluated[name] for name in models}  # the models' order, kept or played
    results = {
        "budget": budget.to_dict() if hasattr(budget, "to_dict") else {
            f: getattr(budget, f) for f in EvalBudget.__annotations__},
        "seed": seed, "k": k, "serving": serving,
        "sampling": {"temperature": TEMPERATURE,
                     "max_tokens": int(getattr(budget, "eval_max_new_tokens", DEFAULT_MAX_NEW_TOKENS)),
                     "deadline_s": DEADLINE_S},
        "sets": selection.describe(), "models": evaluated, "eval_wall_s": round(time.perf_counter() - t0, 2),
    }
    (out_dir / "evaluation.json").write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")
    return results
