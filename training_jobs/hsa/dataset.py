"""The HSA dataset builder: canonical samples + a recipe -> rows in TRL's conversational format.

A :class:`Recipe` says which operators run (each with a probability and its settings), how many augmented
variants each sample gets, the seed, which name pool the operators draw from (``train``, or ``heldout`` for a
Harness-Variant evaluation set) and how many harness variants are shared (``harness_pool_size``).
:func:`build` is deterministic for a recipe and its input samples; :func:`build_fixed_harness` makes the
baseline from the same samples with no augmentation. Both take ``progress(done, total)`` and ``cancel() ->
bool`` callbacks for the job that will run them, and return rows plus :class:`BuildStats` (per operator:
applied, skipped — drawn but nothing to change, so an operator that never fires on a harness shows —, dropped,
kept, mean prompt tokens). :func:`write_dataset` stores a Hugging Face ``datasets`` Dataset with
the recipe and the statistics beside it.

Row format (what ``trl.SFTTrainer`` reads): ``messages`` — chat messages with tool calls whose ``arguments``
are JSON strings; ``tools`` — the tool list as one JSON string (TRL 1.16 parses it: as nested data, Arrow would
merge every augmented schema's property names into one struct and the template would render nulls); plus
metadata columns (``sample_id``, ``variant``, ``operators``, ``harness_hash``, ``source``).

How a row is made: the harness edits of the recipe's operators are drawn for a *harness variant* (validated
once by ``parse_manifest``); a row takes a variant, relabels its sample's target through the variant's rename
map, maybe adds a hook correction, re-checks the target where an operator touched the constraints or hooks
(dropping and counting it when it no longer passes), and renders the prompt with ``render_prompt``. With
``harness_pool_size = P`` each base harness has P variants, each drawn from its own seeded stream and shared
by the rows that pick it; ``0`` draws a fresh variant for every row.

Labels: ``Recipe.label_mode='mechanical'`` (default) relabels the gold turn as above; ``'regenerate'`` has a
teacher endpoint re-answer each row under its augmented harness through the turn engine and keeps only answers
the judge passes (:mod:`training_jobs.hsa.regenerate`; statistics: ``regenerated``, ``rejected``,
``reject_reasons``). The recipe names the teacher and the judge (model endpoint records administrators created);
the caller resolves the names to endpoints (``endpoints={name: ModelEndpoint}``) or passes a ``regenerator``. Writing: :func:`write_dataset` stores a :class:`BuildResult`; :func:`build_to_disk` builds
and writes in one pass (rows go to an Arrow file as they are made), so memory stays flat for any size;
:func:`iter_build` / :func:`iter_fixed_harness` yield rows one at a time for other writers.
"""

from __future__ import annotations

import gc
import hashlib
import json
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from harness_editor.render import estimate_tokens, render_comments, render_system_text, render_tools, room_lines
from harness_editor.schemas import Manifest, content_hash, manifest_to_json
from training_jobs.hsa.leaks import heldout_leaks  # noqa: F401 (re-exported)
from training_jobs.hsa.operators import (
    OPERATORS,
    HarnessState,
    Needs,
    Operator,
    harness_state,
    needs_of,
    operator,
    relabel_target,
    validate_state,
)
from streams.engine.client import ModelEndpoint
from training_jobs.hsa.regenerate import LabelMode, Regenerator, RegenerateSettings
from training_jobs.hsa.relabel import IDENTITY, RenameMap
from training_jobs.hsa.samples import Retry, Sample, target_json, target_messages, target_problems

ProgressCallback = Callable[[int, int], None]
CancelCallback = Callable[[], bool]


class BuildCancelled(Exception):
    """Raised when ``cancel()`` returned True; ``done`` rows were made before it."""

    def __init__(self, done: int, total: int):
        self.done, self.total = done, total
        super().__init__(done, total)

    def __str__(self) -> str:
        return f"HSA build cancelled after {self.done} of {self.total} rows"


# --- the recipe ----------------------------------------------------------------------------------------------


class OperatorSpec(BaseModel):
    """One operator in a recipe."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Operator name (training_jobs.hsa.operators.OPERATORS).")
    probability: float = Field(0.5, ge=0.0, le=1.0, description="Chance the operator runs on a harness variant "
                               "(for the hook-correction operator: on a row).")
    settings: dict[str, Any] = Field(default_factory=dict, description="Overrides of the operator's defaults.")

    @model_validator(mode="after")
    def _known(self) -> OperatorSpec:
        try:  # unknown names or settings fail here, when the recipe is written, not mid-build
            operator(self.name, **self.settings)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None
        return self


def default_operators(probability: float = 0.5) -> list[OperatorSpec]:
    """Every operator, in catalogue order (skill ids, skill content, tools, system prompt, hooks)."""
    # A few hook recoveries among mostly final behaviour (DESIGN.md section 7); constraint moves drop rows.
    special = {"synthesise_hook_correction": 0.1, "move_numeric_constraints": 0.35}
    return [OperatorSpec(name=n, probability=special.get(n, probability)) for n in OPERATORS]


ENDPOINT_NAME_MAX = 64  # streams.models.ModelEndpoint.name


def endpoint_name(value: Any) -> str | None:
    """A recipe's teacher/judge: the name of a model endpoint record, or None. A URL, an API key or an environment
    variable is never taken here (the old ``{"base_url", "api_key_env"}`` form is refused with this message):
    administrators create endpoints and their secrets, everyone else picks one by name."""
    if value is None:
        return None
    if isinstance(value, dict):
        raise ValueError("name a model endpoint an administrator created (e.g. \"local\"); an endpoint written "
                         "out (base_url, api_key_env, ...) is not accepted")
    if not isinstance(value, str):
        raise ValueError("the name of a model endpoint (a string)")
    name = value.strip()
    if not name or len(name) > ENDPOINT_NAME_MAX or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ValueError(f"the name of a model endpoint: 1 to {ENDPOINT_NAME_MAX} printable characters")
    if "://" in name:
        raise ValueError("name a model endpoint an administrator created, not a URL")
    return name


class Recipe(BaseModel):
    """How an HSA dataset is made; saved beside the dataset as ``recipe.json``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("hsa", min_length=1, max_length=120)
    seed: int = Field(0, description="Everything random in the build derives from this.")
    variants_per_sample: int = Field(4, ge=1, le=64, description="Augmented rows per canonical sample (K).")
    operators: list[OperatorSpec] = Field(default_factory=default_operators,
                                          description="Applied in this order; each with its probability.")
    names: Literal["train", "heldout"] = Field(
        "train", description="Name/phrasing pool: 'train' for training sets, 'heldout' for Harness-Variant "
        "evaluation (training rows never contain a held-out name).")
    harness_pool_size: int = Field(
        128, ge=0, le=1_000_000, description="Harness variants per base harness, shared by the rows that draw "
        "them (each validated once); 0 = a fresh variant per row.")
    progress_every: int = Field(500, ge=1, description="Rows between progress/cancel callbacks.")
    label_mode: LabelMode = Field(
        "mechanical", description="How targets are kept right under an augmented harness: 'mechanical' (the "
        "rename map relabels the gold turn) or 'regenerate' (a teacher endpoint re-answers through the turn "
        "engine and a judge keeps only answers that pass; see training_jobs.hsa.regenerate).")
    teacher: str | None = Field(None, validate_default=True, description="The teacher: the name of a model "
                                "endpoint an administrator created (label_mode 'regenerate').")
    judge: str | None = Field(None, description="An optional judge (pass/fail JSON verdicts) on top of the rule "
                              "checks: the name of a model endpoint (label_mode 'regenerate').")
    regenerate: RegenerateSettings = Field(default_factory=RegenerateSettings,
                                           description="Teacher sampling and judge strictness.")

    @field_validator("teacher", "judge", mode="before")
    @classmethod
    def _endpoint_name(cls, value: Any) -> Any:
        return endpoint_name(value)

    @field_validator("teacher", mode="after")
    @classmethod
    def _teacher_for_regeneration(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None and info.data.get("label_mode") == "regenerate":  # located at recipe.teacher
            raise ValueError("label_mode 'regenerate' needs a teacher endpoint")
        return value

    @field_validator("operators")
    @classmethod
    def _unique(cls, ops: list[OperatorSpec]) -> list[OperatorSpec]:
        seen = [o.name for o in ops]
        dup = {n for n in seen if seen.count(n) > 1}
        if dup:
            raise ValueError(f"operators listed twice: {sorted(dup)}")
        return ops

    def configured(self) -> list[tuple[Operator, float]]:
        return [(operator(o.name, pool=self.names, **o.settings), o.probability) for o in self.operators]


# --- statistics ---------------------------------------------------------------------------------------------------


@dataclass
class OperatorStats:
    applied: int = 0  # rows (kept or dropped) where the operator changed the harness or the sample
    skipped: int = 0  # rows where it was drawn but found nothing to change (never fires on this harness: 0 applied)
    dropped: int = 0  # of the applied, rows whose target failed the re-check (counted for re-check operators only)
    prompt_tokens: int = 0  # sum over kept rows where it applied
    rejected: int = 0  # of those, rows whose regenerated answer the judge rejected (label_mode 'regenerate')

    @property
    def kept(self) -> int:
        return self.applied - self.dropped - self.rejected

    @property
    def mean_prompt_tokens(self) -> float:
        return round(self.prompt_tokens / self.kept, 1) if self.kept else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"applied": self.applied, "skipped": self.skipped, "dropped": self.dropped, "rejected": self.rejected,
                "kept": self.kept, "mean_prompt_tokens": self.mean_prompt_tokens}


@dataclass
class BuildStats:
    kind: str  # "hsa" | "fixed_harness"
    samples: int = 0
    rows: int = 0
    dropped: int = 0
    drop_reasons: dict[str, int] = field(default_factory=dict)
    harness_variants: int = 0
    prompt_tokens: int = 0
    seconds: float = 0.0
    operators: dict[str, OperatorStats] = field(default_factory=dict)
    label_mode: str = "mechanical"
    regenerated: int = 0  # rows whose target the teacher wrote and the judge kept
    rejected: int = 0  # rows whose regenerated answer was rejected (not in the dataset)
    reject_reasons: dict[str, int] = field(default_factory=dict)  # rejection code -> rows (a row may have several)
    reject_examples: list[dict[str, Any]] = field(default_factory=list)  # the first few, with details

    @property
    def mean_prompt_tokens(self) -> float:
        return round(self.prompt_tokens / self.rows, 1) if self.rows else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["operators"] = {n: s.to_dict() for n, s in self.operators.items()}
        d["mean_prompt_tokens"] = self.mean_prompt_tokens
        return d


@dataclass
class BuildResult:
    rows: list[dict[str, Any]]
    stats: BuildStats
    recipe: Recipe | None
    harnesses: dict[str, Manifest] = field(default_factory=dict)  # by the rows' harness_hash
    path: Path | None = None  # where build_to_disk wrote it (its rows are on disk, not in ``rows``)


# --- harness variants ------------------------------------------------------------------------------------------------


@dataclass
class HarnessVariant:
    """One augmented harness state, validated, with what rows need from it (computed once)."""

    state: HarnessState
    manifest: Manifest
    rename: RenameMap
    applied: tuple[str, ...]
    touches_checks: bool
    tools_json: str
    tools_tokens: int
    harness_hash: str
    skill_bodies: dict[str, str] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()  # operators drawn for it that changed nothing

    @classmethod
    def of(cls, state: HarnessState, manifest: Manifest, rename: RenameMap, applied: Sequence[str],
           touches_checks: bool, skipped: Sequence[str] = ()) -> HarnessVariant:
        tools_json = json.dumps(render_tools(manifest), ensure_ascii=False)
        return cls(state, manifest, rename, tuple(applied), touches_checks, tools_json,
                   estimate_tokens(tools_json), content_hash(manifest), skipped=tuple(skipped))


def make_variant(base: HarnessState, ops: Sequence[tuple[Operator, float]], rng: random.Random,
                 needs: Needs | None = None) -> HarnessVariant:
    """Draw each harness operator with its probability, apply it, validate the result once. ``needs``: what the
    gold turns this variant will serve need from its numbers (see :class:`training_jobs.hsa.prompt_ops.Needs`)."""
    state, m, applied, skipped, touches = base, IDENTITY, [], [], False
    for op, p in ops:
        if op.harness is None or rng.random() >= p:
            continue
        new_state, step = op.edit_harness(state, rng, needs)
        if new_state is not state:
            applied.append(op.name)
            touches = touches or op.touches_checks
        else:
            skipped.append(op.name)
        state, m = new_state, m.then(step)
    return HarnessVariant.of(state, validate_state(state), m, applied, touches, skipped)


class _Bases:
    """Base harnesses by object, with their JSON state and content hash (computed once each)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Manifest, HarnessState, str]] = {}

    def get(self, manifest: Manifest) -> tuple[HarnessState, str]:
        hit = self._by_id.get(id(manifest))
        if hit is None or hit[0] is not manifest:
            hit = (manifest, harness_state(manifest), content_hash(manifest))
            self._by_id[id(manifest)] = hit
        return hit[1], hit[2]


# --- building --------------------------------------------------------------------------------------------------------


def prompt_messages(manifest: Manifest, sample: Sample, *, room_lines: Sequence[str] | None = None
                    ) -> list[dict[str, Any]]:
    """``render_prompt(manifest, room=sample.room, comments=sample.comments).messages``, built from the same
    renderer's parts: render_prompt also copies every tool schema on each call, and the builder keeps the
    (identical) tool list once per harness variant. ``room_lines``: ``render.room_lines(sample.room)`` when
    the caller has them (the rows of one sample share them). A test holds this equal to render_prompt."""
    system = render_system_text(manifest, sample.room, room_lines=room_lines)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    if sample.comments:
        messages.append({"role": "user", "content": render_comments(
            sample.comments, speaker_label=manifest.conventions.speaker_label)})
    return messages


class _RoomLines:
    """``room_lines`` per room object of the samples being built (samples treat their room as immutable)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Any, list[str]]] = {}

    def get(self, room: Any) -> list[str]:
        hit = self._by_id.get(id(room))
        if hit is None or hit[0] is not room:
            if len(self._by_id) >= 8192:
                self._by_id.clear()
            hit = self._by_id[id(room)] = (room, room_lines(room))
        return hit[1]


def _row(variant: HarnessVariant, sample: Sample, k: int, applied: Sequence[str],
         verdicts: dict | None = None, rooms: _RoomLines | None = None) -> tuple[dict[str, Any], int]:
    lines = rooms.get(sample.room) if rooms is not None and sample.room is not None else None
    prompt = prompt_messages(variant.manifest, sample, room_lines=lines)
    # = RenderedPrompt.estimated_tokens(): message text + the tools' JSON
    tokens = estimate_tokens("".join(m["content"] for m in prompt)) + variant.tools_tokens
    messages = prompt + target_messages(variant.manifest, sample, skill_bodies=variant.skill_bodies,
                                        verdicts=verdicts)
    return {
        "messages": messages,
        "tools": variant.tools_json,
        "sample_id": sample.id,
        "variant": k,
        "operators": list(applied),
        "harness_hash": variant.harness_hash,
        "source": sample.source,
    }, tokens


_DROP_REASONS = (("max_tool_rounds", "max_tool_rounds"), ("turn_limit", "turn_limit"),
                 ("retry limit", "max_retries"), ("characters, fewer", "reply_min_chars"),
                 ("characters, more", "reply_max_chars"), ("sentences, more", "max_sentences"),
                 ("passes every hook", "retry_passes"), ("blocked", "retry_blocked"))


def _drop_reason(problem: str) -> str:
    """Which harness setting a target no longer satisfies (for the statistics)."""
    return next((key for needle, key in _DROP_REASONS if needle in problem), "other")


def _tick(done: int, total: int, every: int, progress: ProgressCallback | None, cancel: CancelCallback | None) -> None:
    if done % every:
        return
    if cancel is not None and cancel():
        raise BuildCancelled(done, total)
    if progress is not None:
        progress(done, total)


def _seed(text: str) -> int:
    """A stable 64-bit seed (Python's str hash is salted per process; sha256 is not)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") << 8


@dataclass
class _Candidate:
    variant: HarnessVariant
    sample: Sample
    k: int
    applied: list[str]
    verdicts: dict


def _candidates(samples: Sequence[Sample], recipe: Recipe, stats: BuildStats, *, recheck: bool
                ) -> Iterator[_Candidate | None]:
    """Every (sample, k) in order: the augmented row to make, or None where the re-check dropped it (counted
    in ``stats``)."""
    ops = recipe.configured()
    harness_ops = [(op, p) for op, p in ops if op.harness is not None]
    sample_ops = [(op, p) for op, p in ops if op.sample is not None]
    bases = _Bases()
    pools: dict[str, list[HarnessVariant | None]] = {}
    pool_size = recipe.harness_pool_size
    k_per = recipe.variants_per_sample
    # a sample operator that re-checks (the hook correction) may add a retry: the numbers must leave room for it
    extra_retry = any(op.touches_checks and p > 0 for op, p in sample_ops)
    needs: dict[str, Needs] = {}  # by base harness: what every sample sharing its variants needs
    if pool_size:
        for sample in samples:
            _, base_hash = bases.get(sample.manifest)
            n = needs_of(sample, extra_retry=extra_retry)
            needs[base_hash] = needs[base_hash].merge(n) if base_hash in needs else n
    for sample in samples:
        base, base_hash = bases.get(sample.manifest)
        sample_seed = _seed(f"{recipe.seed}:{recipe.names}:{sample.id}")
        rng = random.Random(sample_seed)  # the sample's rows draw from it in turn (one seeding per sample)
        slots = rng.sample(range(pool_size), k_per) if pool_size >= k_per else None
        for k in range(k_per):
            if pool_size:
                slot = slots[k] if slots is not None else rng.randrange(pool_size)
                pool = pools.setdefault(base_hash, [None] * pool_size)
                variant = pool[slot]
                if variant is None:
                    variant = make_variant(base, harness_ops, random.Random(
                        _seed(f"{recipe.seed}:{recipe.names}:{base_hash}:{slot}")), needs[base_hash])
                    pool[slot] = variant
                    stats.harness_variants += 1
            else:
                variant = make_variant(base, harness_ops, rng, needs_of(sample, extra_retry=extra_retry))
                stats.harness_variants += 1
            row_sample = sample.with_target(relabel_target(sample.target, variant.rename))
            applied = list(variant.applied)
            skipped = list(variant.skipped)
            check = variant.touches_checks
            for op, p in sample_ops:
                if rng.random() < p:
                    changed = op.edit_sample(variant.state, row_sample, rng, IDENTITY)
                    if changed is not row_sample:
                        applied.append(op.name)
                        check = check or op.touches_checks
                        row_sample = changed
                    else:
                        skipped.append(op.name)
            for name in applied:
                stats.operators[name].applied += 1
            for name in skipped:
                stats.operators[name].skipped += 1
            verdicts: dict = {}
            problems = target_problems(variant.manifest, row_sample, verdicts=verdicts) if check and recheck else []
            if problems:
                stats.dropped += 1
                for reason in {_drop_reason(p) for p in problems}:
                    stats.drop_reasons[reason] = stats.drop_reasons.get(reason, 0) + 1
                for name in applied:
                    if OPERATORS[name].touches_checks:
                        stats.operators[name].dropped += 1
                yield None
            else:
                yield _Candidate(variant, row_sample, k, applied, verdicts)


def _kept(c: _Candidate, stats: BuildStats, harnesses: dict[str, Manifest], rooms: _RoomLines
          ) -> dict[str, Any]:
    row, tokens = _row(c.variant, c.sample, c.k, c.applied, c.verdicts, rooms)
    harnesses.setdefault(c.variant.harness_hash, c.variant.manifest)
    stats.prompt_tokens += tokens
    for name in c.applied:
        stats.operators[name].prompt_tokens += tokens
    return row


_REJECT_EXAMPLES = 20


def _regenerated(candidates: Iterator[_Candidate | None], regen: Regenerator, stats: BuildStats
                 ) -> Iterator[_Candidate | None]:
    """Candidates with the teacher's judged answer as their target (None where rejected), in input order;
    ``concurrency`` teacher turns in flight."""
    from concurrent.futures import ThreadPoolExecutor

    def one(c: _Candidate | None):
        return None if c is None else regen.regenerate(c.variant.manifest, c.sample)

    workers = regen.settings.concurrency
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    try:
        while True:
            chunk = [c for _, c in zip(range(workers), candidates)]
            if not chunk:
                return
            judged = list(pool.map(one, chunk)) if pool is not None else [one(c) for c in chunk]
            for c, j in zip(chunk, judged):
                if c is None or j is None:
                    yield None  # dropped before regeneration (not with the default re-check off)
                    continue
                if j.passed:
                    assert j.target is not None
                    stats.regenerated += 1
                    c.sample = c.sample.with_target(j.target)
                    c.verdicts = {}
                    yield c
                    continue
                stats.rejected += 1
                for r in j.reasons:
                    stats.reject_reasons[r] = stats.reject_reasons.get(r, 0) + 1
                for name in c.applied:
                    stats.operators[name].rejected += 1
                if len(stats.reject_examples) < _REJECT_EXAMPLES:
                    stats.reject_examples.append({"sample_id": c.sample.id, "variant": c.k, "reasons": j.reasons,
                                                  "detail": j.detail[:4]})
                yield None
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def iter_build(samples: Sequence[Sample], recipe: Recipe, stats: BuildStats, harnesses: dict[str, Manifest], *,
               progress: ProgressCallback | None = None, cancel: CancelCallback | None = None,
               regenerator: Regenerator | None = None, endpoints: Mapping[str, ModelEndpoint] | None = None
               ) -> Iterator[dict[str, Any]]:
    """The augmented rows of :func:`build`, one at a time (for writers that keep memory flat): fills
    ``stats`` and ``harnesses`` as it goes. In ``regenerate`` mode ``regenerator`` (default: one made from
    ``endpoints[recipe.teacher]`` and ``endpoints[recipe.judge]``, closed at the end) answers every row, and
    progress/cancel run on every row."""
    t0 = time.perf_counter()
    regenerate = recipe.label_mode == "regenerate"
    stats.label_mode = recipe.label_mode
    for op, _ in recipe.configured():
        stats.operators.setdefault(op.name, OperatorStats())
    total = len(samples) * recipe.variants_per_sample
    every = 1 if regenerate else recipe.progress_every
    own = None
    # regeneration answers under the new constraints itself: no mechanical re-check, the judge decides
    candidates: Iterator[_Candidate | None] = _candidates(samples, recipe, stats, recheck=not regenerate)
    if regenerate:
        if regenerator is None:
            regenerator = own = regenerator_for(recipe, endpoints or {})
        candidates = _regenerated(candidates, regenerator, stats)
    done = 0
    rooms = _RoomLines()
    try:
        for c in candidates:
            if c is not None:
                stats.rows += 1
                yield _kept(c, stats, harnesses, rooms)
            done += 1
            _tick(done, total, every, progress, cancel)
    finally:
        if own is not None:
            own.close()
        stats.seconds = round(stats.seconds + time.perf_counter() - t0, 3)
    if progress is not None:
        progress(total, total)


def regenerator_for(recipe: Recipe, endpoints: Mapping[str, ModelEndpoint]) -> Regenerator:
    """The recipe's teacher and judge from the endpoints the caller resolved (by name); ValueError naming the
    recipe field when one is missing."""
    picked = {}
    for field_name in ("teacher", "judge"):
        name = getattr(recipe, field_name)
        if name is None:
            continue
        if name not in endpoints:
            raise ValueError(f"recipe.{field_name}: the model endpoint {name!r} was not resolved for this build")
        picked[field_name] = endpoints[name]
    if "teacher" not in picked:
        raise ValueError("recipe.teacher: label_mode 'regenerate' needs a teacher endpoint")
    return Regenerator(picked["teacher"], picked.get("judge"), recipe.regenerate)


@contextmanager
def rare_gc() -> Iterator[None]:
    """Run the cyclic garbage collector rarely while building. Rows are trees of new dicts and lists, never
    cycles, yet at the default threshold (a young collection every 700 allocations, older generations walked
    as they fill) the collector took a quarter of the build's time (bench/hsa_throughput.py). Reference
    counting still frees everything as before; the thresholds come back afterwards."""
    before = gc.get_threshold()
    gc.set_threshold(50_000, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def build(samples: Sequence[Sample], recipe: Recipe, *, progress: ProgressCallback | None = None,
          cancel: CancelCallback | None = None, regenerator: Regenerator | None = None,
          endpoints: Mapping[str, ModelEndpoint] | None = None) -> BuildResult:
    """Augmented rows: ``recipe.variants_per_sample`` per sample (fewer where the re-check drops one, or, with
    ``label_mode='regenerate'``, where the judge rejects the teacher's answer)."""
    stats = BuildStats(kind="hsa", samples=len(samples))
    harnesses: dict[str, Manifest] = {}
    with rare_gc():
        rows = list(iter_build(samples, recipe, stats, harnesses, progress=progress, cancel=cancel,
                               regenerator=regenerator, endpoints=endpoints))
    return BuildResult(rows, stats, recipe, harnesses)


def iter_fixed_harness(samples: Sequence[Sample], stats: BuildStats, harnesses: dict[str, Manifest], *,
                       progress: ProgressCallback | None = None, cancel: CancelCallback | None = None,
                       progress_every: int = 500) -> Iterator[dict[str, Any]]:
    """The rows of :func:`build_fixed_harness`, one at a time (fills ``stats`` and ``harnesses``)."""
    t0 = time.perf_counter()
    variants: dict[int, tuple[Manifest, HarnessVariant]] = {}
    rooms = _RoomLines()
    total = len(samples)
    try:
        for i, sample in enumerate(samples, 1):
            hit = variants.get(id(sample.manifest))
            if hit is None or hit[0] is not sample.manifest:
                hit = (sample.manifest, HarnessVariant.of(harness_state(sample.manifest), sample.manifest, IDENTITY,
                                                          (), False))
                variants[id(sample.manifest)] = hit
                stats.harness_variants += 1
            row, tokens = _row(hit[1], sample, 0, (), None, rooms)
            harnesses.setdefault(hit[1].harness_hash, sample.manifest)
            stats.prompt_tokens += tokens
            stats.rows += 1
            yield row
            _tick(i, total, progress_every, progress, cancel)
    finally:
        stats.seconds = round(stats.seconds + time.perf_counter() - t0, 3)
    if progress is not None:
        progress(total, total)


def build_fixed_harness(samples: Sequence[Sample], *, progress: ProgressCallback | None = None,
                        cancel: CancelCallback | None = None, progress_every: int = 500) -> BuildResult:
    """The baseline: one row per sample under its own (base) harness, no augmentation."""
    stats = BuildStats(kind="fixed_harness", samples=len(samples))
    harnesses: dict[str, Manifest] = {}
    with rare_gc():
        rows = list(iter_fixed_harness(samples, stats, harnesses, progress=progress, cancel=cancel,
                                       progress_every=progress_every))
    return BuildResult(rows, stats, None, harnesses)


# --- leakage ----------------------------------------------------------------------------------------------------------


# :func:`heldout_leaks` lives in training_jobs.hsa.leaks (re-exported here for callers).


# --- writing ----------------------------------------------------------------------------------------------------------


def row_features() -> Any:
    """The ``datasets`` features of a row (what ``Dataset.from_list`` infers from augmented rows), fixed so a
    streamed write has one schema from its first row on."""
    from datasets import Features, List, Value

    call = {"id": Value("string"), "type": Value("string"),
            "function": {"name": Value("string"), "arguments": Value("string")}}
    message = {"role": Value("string"), "content": Value("string"), "tool_calls": List(call),
               "tool_call_id": Value("string"), "name": Value("string")}
    return Features({"messages": List(message), "tools": Value("string"), "sample_id": Value("string"),
                     "variant": Value("int64"), "operators": List(Value("string")),
                     "harness_hash": Value("string"), "source": Value("string")})


def write_rows(rows: Iterable[dict[str, Any]], dataset_dir: str | Path, *, batch_rows: int = 1000) -> int:
    """Write rows as they come (an Arrow file, ``batch_rows`` rows buffered at a time), then store them with
    ``Dataset.save_to_disk`` at ``dataset_dir`` (memory-mapped: memory stays flat however many rows).
    Returns the number of rows."""
    import shutil

    from datasets import Dataset
    from datasets.arrow_writer import ArrowWriter

    target = Path(dataset_dir)
    parts = target.parent / f".{target.name}.parts"
    shutil.rmtree(parts, ignore_errors=True)
    parts.mkdir(parents=True)
    features = row_features()
    try:
        path = parts / "rows.arrow"
        writer = ArrowWriter(features=features, path=str(path), writer_batch_size=batch_rows)
        try:
            for row in rows:
                writer.write(row)
            n, _ = writer.finalize()
        finally:
            writer.close()
        ds = (Dataset.from_file(str(path)) if n
              else Dataset.from_dict({k: [] for k in features}, features=features))
        if target.exists():
            shutil.rmtree(target)
        ds.save_to_disk(str(target))
        del ds
    finally:
        shutil.rmtree(parts, ignore_errors=True)
    return n


def _write_beside(out: Path, recipe: Recipe | None, stats: BuildStats, harnesses: dict[str, Manifest]) -> None:
    data = recipe.model_dump(mode="json") if recipe is not None else {"kind": "fixed_harness"}
    (out / "recipe.json").write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "stats.json").write_text(json.dumps(stats.to_dict(), indent=2) + "\n", encoding="utf-8")
    with (out / "harnesses.jsonl").open("w", encoding="utf-8") as f:
        for digest, manifest in harnesses.items():
            f.write(f'{{"harness_hash": "{digest}", "manifest": {manifest_to_json(manifest)}}}\n')


def write_dataset(result: BuildResult, out_dir: str | Path) -> Path:
    """``out_dir/dataset`` (``datasets.Dataset.save_to_disk``), ``out_dir/recipe.json``, ``out_dir/stats.json``
    and ``out_dir/harnesses.jsonl`` (every harness state a row was rendered under, by ``harness_hash``).
    ``result.rows`` may be any iterable (written as it is consumed; see :func:`build_to_disk`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_rows(result.rows, out / "dataset")
    _write_beside(out, result.recipe, result.stats, result.harnesses)
    return out


def build_to_disk(samples: Sequence[Sample], recipe: Recipe | None, out_dir: str | Path, *,
                  progress: ProgressCallback | None = None, cancel: CancelCallback | None = None,
                  progress_every: int = 500, regenerator: Regenerator | None = None,
                  endpoints: Mapping[str, ModelEndpoint] | None = None) -> BuildResult:
    """:func:`build` (or, with ``recipe=None``, :func:`build_fixed_harness`) straight into
    :func:`write_dataset`'s layout, rows written as they are made: memory stays flat for any number of rows.
    Returns the statistics and harnesses with ``rows=[]`` and ``path`` set. A cancelled or failed build
    leaves no ``dataset`` folder behind."""
    import shutil

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    harnesses: dict[str, Manifest] = {}
    if recipe is None:
        stats = BuildStats(kind="fixed_harness", samples=len(samples))
        rows = iter_fixed_harness(samples, stats, harnesses, progress=progress, cancel=cancel,
                                  progress_every=progress_every)
    else:
        stats = BuildStats(kind="hsa", samples=len(samples))
        rows = iter_build(samples, recipe, stats, harnesses, progress=progress, cancel=cancel,
                          regenerator=regenerator, endpoints=endpoints)
    try:
        with rare_gc():
            write_rows(rows, out / "dataset")
    except BaseException:
        shutil.rmtree(out / "dataset", ignore_errors=True)
        raise
    _write_beside(out, recipe, stats, harnesses)
    return BuildResult([], stats, recipe, harnesses, path=out)


def sample_json(sample: Sample) -> dict[str, Any]:
    """A sample as plain data (for a console page showing a target before/after relabelling)."""
    return {"id": sample.id, "source": sample.source, "comments": list(sample.comments),
            "target": target_json(sample.target), "retries": sum(isinstance(s, Retry) for s in sample.target)}
