"""Stage 3, HSA agentic RL: ``trl.GRPOTrainer`` whose rollouts are turns of the one turn engine.

Each prompt is a *rollout task*: a canonical sample (a comment in its room, with the reference policy's gold
turn) under either its own harness or an HSA-augmented harness state (``augment_probability``; the augmentation
is applied before the rollout and the reference relabelled into the augmented names). A rollout runs
:func:`streams.engine.turn.run_turn` — the same renderer, tool bindings, hooks and retries as the preview room
and live sessions — with the policy being trained as its model (:class:`PolicyBackend`). The GRPO sample is the
token sequence the policy actually saw and wrote: the first prompt, then, call after call, the policy's tokens
(trained) and the tokens the engine added between calls (tool results, hook feedback; masked out of the loss
through ``env_mask``). The four rewards of :mod:`training_jobs.hat.rewards` score each rollout against the
reference; TRL normalises each reward within its group before the weighted sum
(``multi_objective_aggregation="normalize_then_sum"``), and a fifth term penalises reasoning beyond a budget.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_editor.render import render_prompt
from harness_editor.schemas import Manifest
from streams.engine.client import ChatDelta
from streams.engine.turn import TurnResult, run_turn
from training_jobs.hat import rewards as R
from training_jobs.hat.config import RLStageConfig
from training_jobs.hat.progress import ProgressCallback, StageReporter
from training_jobs.hat.stage import (
    StageResult,
    load_model,
    peft_config,
    reporter_or_null,
    train_and_finish,
    trainer_arguments,
)
from training_jobs.hsa.samples import Sample

REWARD_NAMES = ("accuracy", "effectiveness", "tool_rationality", "skill_selection")


# --- tasks --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutTask:
    """One prompt of the RL stage: the harness state the rollout runs under and the reference relabelled into
    it. ``augmented``: the harness is an HSA variant, not the sample's own."""

    key: str
    manifest: Manifest
    room: dict[str, Any]
    comments: list[dict[str, Any]]
    reference: Sample
    augmented: bool
    prompt: list[dict[str, Any]] = field(default_factory=list)  # the rendered system + user messages


def _key(messages: Sequence[dict[str, Any]]) -> str:
    return json.dumps(list(messages), sort_keys=True, ensure_ascii=False)


def rollout_tasks(samples: Sequence[Sample], *, augment_probability: float, seed: int = 0) -> list[RolloutTask]:
    """A task per sample: under an HSA-augmented harness with ``augment_probability`` (every harness operator
    drawn at its default probability, one variant per task; the reference's tool calls and skill loads
    relabelled by the variant's rename map), else under the sample's own harness.

    As in the HSA builder, the variant is drawn with the reference's needs (:func:`training_jobs.hsa.prompt_ops.
    needs_of`: tool rounds, model requests, retries, reply length and sentences), so a numeric-constraint move
    never makes the reference illegal; a variant that still does not accept it (a builder bug) is not used: the
    task runs under the sample's own harness."""
    from training_jobs.hsa.dataset import Recipe, make_variant
    from training_jobs.hsa.operators import harness_state, relabel_target
    from training_jobs.hsa.prompt_ops import needs_of
    from training_jobs.hsa.samples import target_problems

    rng = random.Random(seed)
    harness_ops = [(op, p) for op, p in Recipe().configured() if op.harness is not None]
    tasks: list[RolloutTask] = []
    for sample in samples:
        manifest, reference, augmented = sample.manifest, sample, False
        if rng.random() < augment_probability:
            variant = make_variant(harness_state(sample.manifest), harness_ops, random.Random(rng.getrandbits(64)),
                                   needs_of(sample))
            relabelled = sample.with_target(relabel_target(sample.target, variant.rename))
            relabelled = Sample(**{**relabelled.__dict__, "manifest": variant.manifest})
            if not target_problems(variant.manifest, relabelled):
                manifest, reference, augmented = variant.manifest, relabelled, True
        comments = [dict(c) for c in sample.comments]
        prompt = list(render_prompt(manifest, room=copy.deepcopy(dict(sample.room)), comments=comments).messages)
        tasks.append(RolloutTask(_key(prompt), manifest, dict(sample.room), comments, reference, augmented, prompt))
    return tasks


# --- the policy inside the turn engine --------------------------------------------------------------------------------


class PrefixCache:
    """The attention keys and values of the last token sequence one model generated from, reused for the longest
    token prefix the next sequence shares with it: the next call of the same turn (the sequence so far plus a tool
    result) and the next case on the same harness (the same system prompt and tools) then compute only what is new.
    On these CPUs a ~2,000-token prompt costs seconds per call to read again. One cache per model, used by one
    caller at a time (an evaluation plays its samples one after another); the sampled tokens draw from the same
    logits up to float rounding."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.cache: Any = None
        self.reused = 0  # prompt tokens not computed again, over all calls (benchmarks read it)
        self.computed = 0

    def generate(self, model: Any, ids: list[int], **kwargs: Any) -> list[int]:
        """``model.generate`` from ``ids`` (one sequence) with the cached prefix; the new tokens."""
        import torch
        from transformers import DynamicCache

        shared = 0
        for a, b in zip(self.tokens, ids[:-1]):  # at least the last token is computed: it gives the next logits
            if a != b:
                break
            shared += 1
        if self.cache is None or not shared:
            self.cache, shared = DynamicCache(), 0
        elif shared < self.cache.get_seq_length():
            self.cache.crop(shared - self.cache.get_seq_length())  # a negative count drops that many from the end
        self.reused += shared
        self.computed += len(ids) - shared
        context = torch.tensor([ids], device=model.device)
        out = model.generate(input_ids=context, attention_mask=torch.ones_like(context), past_key_values=self.cache,
                             **kwargs)
        sequence = out[0].tolist()
        self.tokens = sequence[:self.cache.get_seq_length()]  # what the cache holds: all but the last token
        return sequence[len(ids):]


class PolicyBackend:
    """The engine's model for one rollout: the policy being trained, generating locally. It keeps the one token
    sequence of the rollout: the first request is the chat template's rendering of the prompt; each later
    request adds only what the engine appended since the policy's last answer (tool results, hook feedback,
    rendered by the same template) to the tokens the policy really wrote, so what is trained is exactly what the
    policy saw. ``env_mask`` marks the policy's own tokens (1) against the engine's (0)."""

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int, temperature: float,
                 prefix: PrefixCache | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.prefix = prefix  # shared with the model's other backends (evaluation); None: every call reads it all
        self.prompt_ids: list[int] = []
        self.completion_ids: list[int] = []
        self.env_mask: list[int] = []
        self._answered = 0  # messages of the conversation the sequence already holds (through the last answer)
        self._ended = False  # the last answer ended with the end-of-turn token (not cut at max_new_tokens)
        self.broken = ""  # why the sequence could not be kept exact (the rollout is then not trained on)

    def _render(self, messages: list[dict[str, Any]], tools: Any, generation: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                                  add_generation_prompt=generation)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def stream_chat(self, messages: list[dict[str, Any]], tools: Any = None, **sampling: Any) -> Iterator[ChatDelta]:
        import torch

        if not self.prompt_ids:
            self.prompt_ids = self._encode(self._render(messages, tools, True))
        else:  # what the engine added after the policy's last answer, as the template renders it
            before = self._render(messages[:self._answered], tools, False)
            after = self._render(messages, tools, True)
            if not after.startswith(before):
                self.broken = "the chat template renders earlier turns differently later in the conversation"
            # the template closes the answer with the end-of-turn token and a separator (a newline): the policy
            # wrote the token itself unless it was cut at max_new_tokens
            eos = self.tokenizer.eos_token or ""
            separator = before[before.rfind(eos) + len(eos):] if eos and eos in before else ""
            closing = ("" if self._ended else eos) + separator
            added = self._encode(closing + after[len(before):]) if not self.broken else []
            self.completion_ids += added
            self.env_mask += [0] * len(added)
        ids = self.prompt_ids + self.completion_ids
        sampling = dict(max_new_tokens=self.max_new_tokens, do_sample=True, temperature=self.temperature, top_k=0,
                        top_p=1.0, eos_token_id=self.tokenizer.eos_token_id, pad_token_id=self.tokenizer.pad_token_id)
        with torch.no_grad():  # without a shared cache, a fresh one: the whole sequence is read, as generate does
            new = (self.prefix or PrefixCache()).generate(self.model, ids, **sampling)
        self._ended = bool(new) and new[-1] == self.tokenizer.eos_token_id
        self.completion_ids += new
        self.env_mask += [1] * len(new)
        self._answered = len(messages) + 1  # the engine appends this answer as one assistant message
        text = self.tokenizer.decode(new, skip_special_tokens=False)
        text = text.split(self.tokenizer.eos_token)[0] if self.tokenizer.eos_token else text
        yield ChatDelta(content=text)
        yield ChatDelta(finish_reason="stop")


@dataclass
class Rollout:
    task: RolloutTask
    result: TurnResult | None
    backend: PolicyBackend
    scores: dict[str, float]
    error: str = ""


def rollout(task: RolloutTask, model: Any, tokenizer: Any, config: RLStageConfig, tools: Any = None) -> Rollout:
    """One turn of the engine with the policy, scored. A rollout whose turn crashed or whose sequence could not
    be kept exact scores 0 on every reward and is not trained on (its mask is all zeros)."""
    backend = PolicyBackend(model, tokenizer, max_new_tokens=config.max_completion_length,
                            temperature=config.temperature)
    try:
        result = run_turn(manifest=task.manifest, room=copy.deepcopy(task.room), comments=task.comments,
                          backend=backend, deadline_s=300, tools=tools)
    except Exception as exc:  # never lose the step for one rollout
        return Rollout(task, None, backend, dict.fromkeys(REWARD_NAMES, 0.0), f"{type(exc).__name__}: {exc}")
    if backend.broken:
        return Rollout(task, result, backend, dict.fromkeys(REWARD_NAMES, 0.0), backend.broken)
    scores = {name: s.value for name, s in R.score_rollout(result, task.manifest, task.room, task.reference).items()}
    thought = R.reasoning_text(result)
    reasoning = len(tokenizer(thought, add_special_tokens=False)["input_ids"]) if thought else 0
    scores["reasoning_length"] = R.reasoning_length_penalty(
        reasoning, max(config.reasoning_budget, 1), config.reasoning_penalty) if config.reasoning_penalty else 0.0
    return Rollout(task, result, backend, scores)


# --- the stage --------------------------------------------------------------------------------------------------------


def _reward_func(name: str):
    def reward(prompts, completions, **kwargs) -> list[float]:
        return [float(s[name]) for s in kwargs["rollout_scores"]]

    reward.__name__ = name
    return reward


def run_rl(config: RLStageConfig, *, model_dir: str | Path, samples: Sequence[Sample], out_dir: str | Path,
           reporter: StageReporter | None = None, resume: bool = True, tools: Any = None) -> StageResult:
    """GRPO on rollouts in the simulator from ``samples`` (canonical samples: scenario or tiny gold turns).
    ``tools``: what the tool bindings may reach (:class:`streams.tool_bindings.ToolRuntime`; default: built-in and
    fixture bindings only, so a rollout never calls a live backend unless asked to)."""
    import torch
    from trl import GRPOConfig, GRPOTrainer

    reporter = reporter_or_null(reporter)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not samples:
        raise ValueError("the RL stage needs canonical samples to roll out")
    tasks = rollout_tasks(list(samples)[:config.prompts], augment_probability=config.augment_probability,
                          seed=config.seed)
    by_key = {t.key: t for t in tasks}
    model, tokenizer = load_model(model_dir, config)
    stats = {"rollouts": 0, "broken": 0, "augmented": 0}

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        policy = trainer.accelerator.unwrap_model(trainer.model)
        was_training = policy.training
        policy.eval()
        out_prompts, completions, masks, scores = [], [], [], []
        try:
            for prompt in prompts:  # GRPO's sampler already repeats each prompt num_generations times: one each
                task = by_key[_key(prompt)]
                r = rollout(task, policy, tokenizer, config, tools)
                stats["rollouts"] += 1
                stats["broken"] += bool(r.error)
                stats["augmented"] += task.augmented
                ids = r.backend.completion_ids or [tokenizer.eos_token_id]
                mask = r.backend.env_mask if r.backend.completion_ids and not r.error else [0] * len(ids)
                out_prompts.append(r.backend.prompt_ids or tokenizer(tokenizer.apply_chat_template(
                    task.prompt, tokenize=False, add_generation_prompt=True), add_special_tokens=False)["input_ids"])
                completions.append(ids)
                masks.append(mask)
                scores.append(r.scores)
        finally:
            if was_training:
                policy.train()
        return {"prompt_ids": out_prompts, "completion_ids": completions, "logprobs": None, "env_mask": masks,
                "rollout_scores": scores}

    weights = dict(config.reward_weights)
    names = [*REWARD_NAMES, "reasoning_length"]
    args = GRPOConfig(**trainer_arguments(config, out), num_generations=config.num_generations,
                      max_completion_length=config.max_completion_length, temperature=config.temperature,
                      multi_objective_aggregation="normalize_then_sum", scale_rewards="group",
                      reward_weights=[weights.get(n, 1.0) for n in names],  # the penalty is scaled by its coef
                      beta=0.0, remove_unused_columns=False, log_completions=False)
    dataset = _task_dataset(tasks)
    progress = ProgressCallback(reporter)
    trainer = GRPOTrainer(model=model, reward_funcs=[_reward_func(n) for n in names], args=args,
                          train_dataset=dataset, processing_class=tokenizer, peft_config=peft_config(config),
                          callbacks=[progress], rollout_func=rollout_func)
    torch.manual_seed(config.seed)
    reporter.log(f"agentic RL: {len(tasks)} rollout tasks ({sum(t.augmented for t in tasks)} under augmented "
                 f"harnesses), {config.num_generations} rollouts each, {config.max_steps} steps on {config.device}")
    result = train_and_finish("rl", trainer, tokenizer, config, model_dir=model_dir, out_dir=out, progress=progress,
                              resume=resume)
    result.metrics.update({f"rollouts_{k}": v for k, v in stats.items()})
    logged = [h for h in trainer.state.log_history if "frac_reward_zero_std" in h]
    if logged:
        flat = [h["frac_reward_zero_std"] for h in logged]
        result.metrics["groups_without_signal"] = round(sum(flat) / len(flat), 3)
        if min(flat) >= 1.0:  # GRPO learns from differences within a group: there were none
            reporter.log(f"warning: in every logged step each group's rollouts scored the same (reward "
                         f"{logged[-1].get('reward', 'n/a')}), so the policy did not change; "
                         f"the model may be unable to act under these harnesses (try samples it was trained on, "
                         f"a higher temperature or more generations)")
    return result


def _task_dataset(tasks: Sequence[RolloutTask]):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": t.prompt} for t in tasks])
