"""Stage 3 (HSA agentic RL) for real with TRL's GRPOTrainer on the tiny model: rollouts are turns of the one
turn engine with the policy as its model, under original and augmented harnesses, scored by the four rewards;
the trained tokens are exactly what the policy saw and wrote (engine tokens masked)."""

from __future__ import annotations

import json
import math

import pytest

from training_jobs.hat.config import RLStageConfig
from training_jobs.hat.rl import rollout, rollout_tasks, run_rl
from training_jobs.hsa.samples import tiny_model_samples
from training_jobs.tiny_model.pipeline import DEMO_MODEL_DIR

FAST = dict(max_steps=2, per_device_batch_size=2, num_generations=2, max_completion_length=40, learning_rate=1e-3,
            save_steps=100, prompts=4, threads=2)


@pytest.fixture(scope="module")
def samples():
    return tiny_model_samples(6, seed=11)


@pytest.fixture(scope="module")
def policy():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(DEMO_MODEL_DIR), AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)


def test_tasks_mix_original_and_augmented_harnesses_with_relabelled_references(samples):
    tasks = rollout_tasks(samples, augment_probability=0.5, seed=3)
    assert len(tasks) == 6 and len({t.key for t in tasks}) == 6
    assert {t.augmented for t in tasks} == {True, False}
    for t in tasks:
        tool_names = {tool.name for tool in t.manifest.tools}
        assert all(c.name in tool_names for c in t.reference.tool_calls())  # the reference speaks the harness's names
        assert t.prompt[0]["role"] == "system" and t.prompt[-1]["role"] == "user"
    assert [t.key for t in rollout_tasks(samples, augment_probability=0.5, seed=3)] == [t.key for t in tasks]


def test_a_rollout_is_one_engine_turn_and_its_tokens_are_what_the_policy_saw(samples, policy):
    model, tokenizer = policy
    task = rollout_tasks(samples, augment_probability=0.0)[0]
    r = rollout(task, model, tokenizer, RLStageConfig(**FAST))
    assert r.result is not None and not r.error, r.error
    b = r.backend
    assert len(b.completion_ids) == len(b.env_mask) and 1 in b.env_mask
    calls = [e for e in r.result.events if e.type == "model_request"]
    # one run of policy tokens per model call, engine tokens (0) between them
    runs = sum(1 for i, m in enumerate(b.env_mask) if m == 1 and (i == 0 or b.env_mask[i - 1] == 0))
    assert runs == len(calls) >= 1
    assert set(r.scores) == {"accuracy", "effectiveness", "tool_rationality", "skill_selection", "reasoning_length"}
    assert all(0 <= r.scores[k] <= 1 for k in ("accuracy", "effectiveness", "tool_rationality", "skill_selection"))
    # the sequence decodes to the prompt followed by the turn the engine ran
    text = tokenizer.decode(b.prompt_ids + b.completion_ids)
    assert task.comments[0]["text"] in text


def test_grpo_steps_train_on_engine_rollouts(samples, tmp_path):
    lines, points = [], []

    class Rec:
        def report(self, p):
            points.append(p)

        def log(self, line):
            lines.append(line)

        def should_stop(self):
            return False

    result = run_rl(RLStageConfig(**FAST, augment_probability=0.5), model_dir=DEMO_MODEL_DIR, samples=samples,
                    out_dir=tmp_path, reporter=Rec())
    assert (result.steps, result.stopped) == (2, False) and result.final_dir.is_dir()
    assert result.metrics["rollouts_rollouts"] == 2 * 2 * 1  # steps x generations x prompts per step
    logged = [p for p in points if "reward" in p]
    assert logged and all(math.isfinite(p["reward"]) for p in logged)
    assert any(k.startswith("rewards/accuracy") for p in points for k in p)  # each reward logged on its own
    assert any("agentic RL" in line for line in lines)
    assert 0 <= result.metrics["groups_without_signal"] <= 1

    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(result.final_dir).num_parameters() > 0


def test_a_stage_whose_groups_never_differ_says_it_learned_nothing(samples, tmp_path):
    """Near-greedy sampling makes every rollout of a group the same, so every advantage is zero: the stage says so
    (on the job page) instead of reporting a quiet success."""
    lines = []

    class Rec:
        def report(self, p):
            pass

        def log(self, line):
            lines.append(line)

        def should_stop(self):
            return False

    result = run_rl(RLStageConfig(**{**FAST, "temperature": 1e-4}), model_dir=DEMO_MODEL_DIR, samples=samples,
                    out_dir=tmp_path, reporter=Rec())
    assert result.metrics["groups_without_signal"] == 1.0
    assert any(line.startswith("warning: in every logged step each group's rollouts scored the same")
               for line in lines)


def test_the_rollout_sequence_is_the_chat_template_s_layout(samples, policy):
    """Between the policy's answers the sequence holds exactly what the template puts there (the end of the answer,
    the tool results, the next generation prompt): decoded, every engine segment starts where the template would
    start the next turn."""
    model, tokenizer = policy
    engine_segments = 0
    for task in rollout_tasks(samples, augment_probability=0.0)[:3]:
        r = rollout(task, model, tokenizer, RLStageConfig(**{**FAST, "max_completion_length": 48}))
        b = r.backend
        segments, current, kind = [], [], None
        for tok, m in zip(b.completion_ids, b.env_mask):
            if m != kind and current:
                segments.append((kind, current))
                current = []
            kind = m
            current.append(tok)
        if current:
            segments.append((kind, current))
        for m, toks in segments:
            if m == 0:  # an engine segment: closes the previous answer, then a new turn with its own header
                engine_segments += 1
                text = tokenizer.decode(toks)
                assert "<|im_start|>" in text and text.rstrip().endswith(("assistant", "</think>")), text[-80:]
                assert text.lstrip("<|im_end|>").startswith("\n"), text[:40]
    assert engine_segments  # the model called tools: there were segments to check


def test_samples_travel_to_a_launched_stage_whole(tmp_path):
    """The worker hands the RL stage's canonical samples to the processes it launches as JSON lines: every field
    comes back equal (tool results, hook retries, rooms, comments), and samples that shared a harness share it."""
    from harness_editor.schemas import content_hash
    from training_jobs.hsa.samples import Retry, read_samples_jsonl, scenario_samples, write_samples_jsonl

    originals = [*scenario_samples(), *tiny_model_samples(5, seed=2)]
    originals.append(originals[0].with_target((Retry("Only $5, buy now!!!"), *originals[0].target)))
    assert write_samples_jsonl(originals, tmp_path / "s.jsonl") == len(originals)
    back = read_samples_jsonl(tmp_path / "s.jsonl")
    for a, b in zip(originals, back, strict=True):
        assert (a.id, a.source, a.target, dict(a.room), tuple(a.comments), dict(a.meta)) == \
               (b.id, b.source, b.target, dict(b.room), tuple(b.comments), dict(b.meta))
        assert content_hash(a.manifest) == content_hash(b.manifest)
    assert len({id(s.manifest) for s in back}) == len({id(s.manifest) for s in originals}) > 1
    lines = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert sum("manifest" in line for line in lines) == len({id(s.manifest) for s in originals})
