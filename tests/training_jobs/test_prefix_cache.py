"""The evaluation's prefix cache (training_jobs.hat.rl.PrefixCache): a model call reuses the attention keys and
values of the longest token prefix it shares with the call before, and draws what it would have drawn without it."""

from __future__ import annotations

import copy

import pytest
import torch

from streams.engine.turn import run_turn
from training_jobs.hat.rl import PolicyBackend, PrefixCache
from training_jobs.hsa.samples import tiny_model_samples
from training_jobs.tiny_model.pipeline import DEMO_MODEL_DIR


@pytest.fixture(scope="module")
def policy():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(DEMO_MODEL_DIR)
    model.eval()
    return model, AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)


def _ids(tokenizer, n: int) -> list[int]:
    text = "Welcome to the room! How much is the serum today, and does it ship to Alaska? " * 4
    return tokenizer(text, add_special_tokens=False)["input_ids"][:n]


def test_a_call_reuses_the_shared_prefix_and_draws_the_same_tokens(policy):
    model, tokenizer = policy
    prefix = PrefixCache()
    first = _ids(tokenizer, 60)
    greedy = dict(max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    with torch.no_grad():
        new = prefix.generate(model, first, **greedy)
        assert (prefix.reused, prefix.computed) == (0, 60)
        plain = model.generate(input_ids=torch.tensor([first]), **greedy)[0, 60:].tolist()
        assert new == plain
        # the next call continues the sequence: only what is new is computed
        longer = first + new + _ids(tokenizer, 5)
        again = prefix.generate(model, longer, **greedy)
        reused = 60 + len(new) - 1  # the cache holds all but the last token drawn
        assert (prefix.reused, prefix.computed) == (reused, 60 + len(longer) - reused)
        assert again == model.generate(input_ids=torch.tensor([longer]), **greedy)[0, len(longer):].tolist()
        # a sequence that parts earlier: the cache is cut back to the shared tokens
        other = first[:20] + _ids(tokenizer, 30)[5:]
        assert prefix.generate(model, other, **greedy) == \
            model.generate(input_ids=torch.tensor([other]), **greedy)[0, len(other):].tolist()
        assert prefix.reused == 60 + len(new) - 1 + 20
        # sampled, same seed: the same draws
        sampled = dict(max_new_tokens=12, do_sample=True, temperature=0.7, top_k=0, top_p=1.0,
                       pad_token_id=tokenizer.pad_token_id)
        torch.manual_seed(3)
        cached = prefix.generate(model, longer, **sampled)
        torch.manual_seed(3)
        assert cached == model.generate(input_ids=torch.tensor([longer]), **sampled)[0, len(longer):].tolist()


def test_engine_turns_play_the_same_with_and_without_the_cache(policy):
    """Whole turns of the engine (several model calls each, one case after another on one harness), seeded per
    sample as the evaluation seeds them: the same replies and tool calls; the cache skipped most prompt tokens."""
    model, tokenizer = policy
    samples = tiny_model_samples(n=4, split="heldout", seed=5)
    prefix = PrefixCache()

    def play(sample, seed: int, cache: PrefixCache | None):
        torch.manual_seed(seed)
        backend = PolicyBackend(model, tokenizer, max_new_tokens=48, temperature=0.7, prefix=cache)
        result = run_turn(manifest=sample.manifest, room=copy.deepcopy(dict(sample.room)),
                          comments=[dict(c) for c in sample.comments], backend=backend, deadline_s=300)
        return result.reply, backend.completion_ids

    for i, sample in enumerate(samples):
        assert play(sample, 100 + i, prefix) == play(sample, 100 + i, None)
    assert prefix.reused > prefix.computed  # the system prompt and tools were read once, not once per call
