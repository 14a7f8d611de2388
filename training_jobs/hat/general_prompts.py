"""General instruction prompts for stage 2 (on-policy distillation): what the base model could already do and
HSA-SFT may have worn down, asked again so the student relearns it from the frozen base model.

Training prompts are disjoint from every evaluation set (IFEval above all: stage 2 is meant to restore
instruction following, and T4 measures exactly that). Two sources, mixed deterministically:

- *verifiable* prompts composed from project-written material (``data/general_prompts/verifiable.yaml``):
  everyday requests on other topics than IFEval's, each with one to three instructions of IFEval's kinds (word
  and sentence limits, no commas, JSON, bullet counts, end phrases, ...) in our own wording. Each prompt keeps
  its instruction ids and kwargs, so lm-eval's IFEval checkers can verify a response to it
  (:func:`training_jobs.evals.ifeval.score_responses` takes these prompts as they are);
- a *built* set from templates: short everyday instructions (explain, list, rewrite, summarise, answer
  politely) about live-commerce and general topics, so the stage does not only see checkable formats.

tests/training_jobs/test_general_prompts.py fails if any IFEval prompt leaks into them
(:func:`training_jobs.evals.leakage.find_leaks`).
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

REPO = Path(__file__).resolve().parents[2]
MATERIAL_PATH = REPO / "data" / "general_prompts" / "verifiable.yaml"

_TEMPLATES = (
    "Explain {topic} in two short sentences.",
    "List three things a shopper should know about {topic}.",
    "Write a one-line friendly greeting for viewers interested in {topic}.",
    "Rewrite this sentence politely: \"{complaint}\"",
    "Summarise in one sentence why people like {topic}.",
    "Answer in exactly three words: what is {topic}?",
    "Give a numbered list of two tips about {topic}.",
    "Write a short reply to a viewer who says: \"{complaint}\"",
    "Describe {topic} without using the letter z.",
    "In plain words and under 30 words, what is {topic}?",
)
_TOPICS = ("sunscreen", "a hair dryer", "a face serum", "gift wrapping", "free shipping", "a flash sale",
           "returns and refunds", "a moisturizer for dry skin", "a coupon code", "a facial steamer",
           "sleep routines", "drinking water", "a weekly budget", "learning a language", "a morning walk",
           "recycling", "houseplants", "a birthday present", "time zones", "a packing list")
_COMPLAINTS = ("my parcel is late again", "the sound is too quiet", "why is this so expensive",
               "you ignored my question", "the coupon does not work", "I want a refund now")
_CONSTRAINTS_PER_PROMPT = ((1, 0.35), (2, 0.45), (3, 0.20))


@dataclass(frozen=True)
class TrainingPrompt:
    """One general prompt. Verifiable ones carry IFEval instruction ids and kwargs (the fields
    :func:`training_jobs.evals.ifeval.score_responses` reads); built ones carry none."""

    key: int  # stable: derived from the text
    prompt: str
    instruction_ids: tuple[str, ...] = ()
    kwargs: tuple[dict[str, Any], ...] = ()
    source: Literal["verifiable", "built"] = "verifiable"


def _key(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)


# --- verifiable prompts ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Constraint:
    id: str
    say: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    group: str | None = None
    alone: bool = False
    excludes: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Material:
    tasks: tuple[dict[str, Any], ...]
    questions: tuple[str, ...]
    constraints: dict[str, tuple[_Constraint, ...]]  # instruction id -> its entries
    languages: dict[str, str]


@functools.lru_cache(maxsize=4)
def load_material(path: str | Path = MATERIAL_PATH) -> _Material:
    """The tasks, questions and instruction wordings prompts are composed from (validated: a typo in the
    material is an error here, not a prompt the checkers cannot read)."""
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    tasks = tuple(raw["tasks"])
    for i, t in enumerate(tasks):
        if not isinstance(t.get("text"), str) or len(t.get("words", ())) < 2:
            raise ValueError(f"{path}: tasks[{i}] needs text and at least two words")
    constraints: dict[str, list[_Constraint]] = {}
    for i, c in enumerate(raw["constraints"]):
        if not c.get("id") or not c.get("say"):
            raise ValueError(f"{path}: constraints[{i}] needs id and say")
        constraints.setdefault(c["id"], []).append(_Constraint(
            id=c["id"], say=tuple(c["say"]), kwargs=dict(c.get("kwargs") or {}), group=c.get("group"),
            alone=bool(c.get("alone")), excludes=frozenset(c.get("excludes") or ())))
    return _Material(tasks=tasks, questions=tuple(raw["questions"]),
                     constraints={k: tuple(v) for k, v in constraints.items()}, languages=dict(raw["languages"]))


def _quoted(words: list[str], conjunction: str = "and") -> str:
    q = [f'"{w}"' for w in words]
    return q[0] if len(q) == 1 else f"{', '.join(q[:-1])} {conjunction} {q[-1]}"


def _draw_kwargs(c: _Constraint, task: dict[str, Any], rng: random.Random,
                 languages: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the checker's kwargs, the values the wording is formatted with)."""
    kwargs: dict[str, Any] = {}
    for name, spec in c.kwargs.items():
        if spec == "$words":
            kwargs[name] = rng.sample(list(task["words"]), rng.choice((1, 2)))
        elif spec == "$word":
            kwargs[name] = rng.choice(list(task["words"]))
        elif isinstance(spec, list):
            kwargs[name] = rng.choice(spec)
        else:
            kwargs[name] = spec
    if c.id == "length_constraints:nth_paragraph_first_word":  # the nth paragraph has to exist
        kwargs["nth_paragraph"] = min(kwargs["nth_paragraph"], kwargs["num_paragraphs"])
    fmt = dict(kwargs)
    if "keywords" in kwargs:
        fmt["keywords_text"] = _quoted(kwargs["keywords"])
    if "forbidden_words" in kwargs:
        fmt["forbidden_text"] = _quoted(kwargs["forbidden_words"], "or")
    if "language" in kwargs:
        fmt["language_name"] = languages[kwargs["language"]]
    return kwargs, fmt


def _compatible(c: _Constraint, chosen: list[_Constraint]) -> bool:
    return not any((c.group and c.group == o.group) or c.id == o.id or c.id in o.excludes or o.id in c.excludes
                   for o in chosen)


def _compose(rng: random.Random, m: _Material) -> TrainingPrompt:
    ids = sorted(m.constraints)
    first = rng.choice(m.constraints[rng.choice(ids)])
    if first.alone:
        chosen = [first]
    else:
        want = rng.choices([k for k, _ in _CONSTRAINTS_PER_PROMPT], [w for _, w in _CONSTRAINTS_PER_PROMPT])[0]
        chosen = [first]
        for iid in rng.sample(ids, len(ids)):
            if len(chosen) == want:
                break
            c = rng.choice(m.constraints[iid])
            if not c.alone and _compatible(c, chosen):
                chosen.append(c)
    task = rng.choice(m.tasks)
    request = rng.choice(m.questions) if first.id == "detectable_format:constrained_response" else task["text"]
    parts, kwargs = [], []
    for c in chosen:
        kw, fmt = _draw_kwargs(c, task, rng, m.languages)
        if c.id == "combination:repeat_prompt":
            kw = {"prompt_to_repeat": request}
        parts.append(rng.choice(c.say).format(**fmt))
        kwargs.append(kw)
    sep = "\n\n" if first.id == "combination:repeat_prompt" else " "
    text = request + sep + " ".join(parts)
    return TrainingPrompt(key=_key(text), prompt=text, instruction_ids=tuple(c.id for c in chosen),
                          kwargs=tuple(kwargs), source="verifiable")


def verifiable_prompts(n: int, seed: int = 0, material_path: str | Path = MATERIAL_PATH) -> list[TrainingPrompt]:
    """``n`` distinct prompts with verifiable instructions, composed from the material (seeded)."""
    rng = random.Random(seed)
    material = load_material(material_path)
    out: list[TrainingPrompt] = []
    seen: set[str] = set()
    tries = 0
    while len(out) < n:
        p = _compose(rng, material)
        tries += 1
        if p.prompt not in seen:
            seen.add(p.prompt)
            out.append(p)
        elif tries > 20 * n + 1000:
            raise ValueError(f"the material yields only about {len(out)} distinct verifiable prompts, {n} asked")
    return out


# --- built prompts -----------------------------------------------------------------------------------------------

def built_prompts(n: int, seed: int = 0) -> list[str]:
    """``n`` prompts from the templates (seeded): every distinct one once before any repeats."""
    rng = random.Random(seed)
    distinct = sorted({t.format(topic=topic, complaint=c) for t in _TEMPLATES for topic in _TOPICS
                       for c in _COMPLAINTS})
    rng.shuffle(distinct)
    return [distinct[i % len(distinct)] for i in range(n)]


# --- the mix stage 2 trains on -----------------------------------------------------------------------------------

def general_training_prompts(n: int, seed: int = 0, verifiable_share: float = 0.5) -> list[TrainingPrompt]:
    """``n`` prompts: about ``verifiable_share`` of them verifiable, the rest built; shuffled with ``seed``."""
    if not 0 <= verifiable_share <= 1:
        raise ValueError("verifiable_share must be between 0 and 1")
    rng = random.Random(seed)
    take = round(n * verifiable_share)
    chosen = verifiable_prompts(take, seed) + [
        TrainingPrompt(key=_key(p), prompt=p, source="built") for p in built_prompts(n - take, seed)]
    rng.shuffle(chosen)
    return chosen


def general_prompts(n: int, seed: int = 0, verifiable_share: float = 0.5) -> list[str]:
    """The texts of :func:`general_training_prompts` (what the distillation trainer samples on)."""
    return [p.prompt for p in general_training_prompts(n, seed, verifiable_share)]


def prompt_dataset(prompts: list[str]) -> Any:
    """A ``datasets.Dataset`` with the conversational ``prompt`` column TRL's on-policy trainers read."""
    from datasets import Dataset

    return Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in prompts])
