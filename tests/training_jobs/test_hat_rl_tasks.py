"""RL rollout tasks under HSA-augmented harnesses (training_jobs.hat.rl.rollout_tasks): the variant is drawn with
the reference's needs, as the HSA builder does, so a numeric-constraint move (tool rounds, the request limit,
reply length and sentences) never makes the reference turn illegal under the harness the rollout runs in."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_editor.schemas import manifest_from_yaml
from training_jobs.hat.rl import rollout_tasks
from training_jobs.hsa.prompt_ops import needs_of
from training_jobs.hsa.samples import target_problems, tiny_model_samples
from training_jobs.hsa.written import load_turns, written_samples

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def order_desk_samples():
    manifest = manifest_from_yaml((ROOT / "harness_editor" / "demo" / "order_desk.yaml").read_text(encoding="utf-8"))
    return written_samples(manifest, load_turns(ROOT / "tests" / "training_jobs" / "data" / "order_desk_turns.yaml"))


def _tasks(samples, seeds):
    return [t for seed in seeds for t in rollout_tasks(samples, augment_probability=1.0, seed=seed)]


def test_every_augmented_reference_stays_legal_on_the_order_desk(order_desk_samples):
    """The order desk's gold turns need up to four tool rounds (its max_tool_rounds): without the needs, about one
    task in twenty got a limit below its reference."""
    tasks = _tasks(order_desk_samples, range(20))
    assert all(t.augmented for t in tasks)  # a variant is always usable: none had to be given up
    for t in tasks:
        assert target_problems(t.manifest, t.reference) == [], (t.reference.id, t.manifest.constraints)
        need = needs_of(t.reference)
        c = t.manifest.constraints
        assert c.max_tool_rounds >= need.rounds and c.turn_limit >= need.requests
        assert c.reply_max_chars >= need.longest_reply
    base = order_desk_samples[0].manifest.constraints
    moved = [t for t in tasks if (t.manifest.constraints.max_tool_rounds, t.manifest.constraints.turn_limit,
                                  t.manifest.constraints.reply_max_chars)
             != (base.max_tool_rounds, base.turn_limit, base.reply_max_chars)]
    assert moved  # the numeric moves still happen, within what the references need


def test_every_augmented_reference_stays_legal_in_the_live_room():
    tasks = _tasks(tiny_model_samples(30, seed=1), range(5))
    assert all(t.augmented for t in tasks)
    assert [(t.reference.id, target_problems(t.manifest, t.reference)) for t in tasks
            if target_problems(t.manifest, t.reference)] == []


def test_tasks_are_reproducible_from_their_seed(order_desk_samples):
    keys = [t.key for t in rollout_tasks(order_desk_samples, augment_probability=0.5, seed=4)]
    assert keys == [t.key for t in rollout_tasks(order_desk_samples, augment_probability=0.5, seed=4)]
    assert {t.augmented for t in rollout_tasks(order_desk_samples, augment_probability=0.5, seed=4)} == {True, False}
