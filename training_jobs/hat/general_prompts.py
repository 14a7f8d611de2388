"""General instruction prompts for stage 2 (on-policy distillation): what the base model could already do and
HSA-SFT may have worn down, asked again so the student relearns it from the frozen base model.

Two sources, mixed deterministically:
- the 541 IFEval prompts shipped in ``data/ifeval/input_data.jsonl`` (verifiable instructions: word counts,
  formats, forbidden characters);
- a general set the project builds from templates: short everyday instructions (explain, list, rewrite,
  summarise, answer politely) about live-commerce and general topics, so the stage does not only see IFEval's
  style.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
IFEVAL_PATH = REPO / "data" / "ifeval" / "input_data.jsonl"

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


def ifeval_prompts(path: str | Path = IFEVAL_PATH) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["prompt"] for line in f if line.strip()]


def built_prompts(n: int, seed: int = 0) -> list[str]:
    """``n`` prompts from the templates (seeded): every distinct one once before any repeats."""
    rng = random.Random(seed)
    distinct = sorted({t.format(topic=topic, complaint=c) for t in _TEMPLATES for topic in _TOPICS
                       for c in _COMPLAINTS})
    rng.shuffle(distinct)
    return [distinct[i % len(distinct)] for i in range(n)]


def general_prompts(n: int, seed: int = 0, ifeval_share: float = 0.5) -> list[str]:
    """``n`` prompts: about ``ifeval_share`` of them from IFEval, the rest built; shuffled with ``seed``."""
    rng = random.Random(seed)
    ifeval = ifeval_prompts()
    take = min(round(n * ifeval_share), len(ifeval))
    chosen = rng.sample(ifeval, take) + built_prompts(n - take, seed)
    rng.shuffle(chosen)
    return chosen


def prompt_dataset(prompts: list[str]) -> Any:
    """A ``datasets.Dataset`` with the conversational ``prompt`` column TRL's on-policy trainers read."""
    from datasets import Dataset

    return Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in prompts])
