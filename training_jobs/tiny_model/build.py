"""Build the tiny chat model fully offline: tokenizer trained on the project's own text + a small Qwen3.

- Byte-level BPE (``tokenizers``) trained on the demo manifests, the demo room and rendered gold turns, with
  every digit its own token (prices and link ids are copied digit by digit).
- Special tokens of the qwen3 chat template; eos ``<|im_end|>``, pad ``<|endoftext|>``.
- Chat template: the qwen3 template shipped inside the installed ``trl`` package, read at build time (TRL
  recognises templates by exact text; that makes tool-call parsing and assistant-only loss work). It is saved
  into the checkpoint directory, never copied into the repository's source.
- ``Qwen3Config`` small (defaults: 4 layers x 128 hidden, see ../shared/STACK.md), random init with a seed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Template markup that should be one token each (added, not "special", so decoding keeps them: the server
# parses <tool_call> and <think> out of the decoded text, as with the real Qwen3 tokenizer).
MARKUP_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")


@dataclass(frozen=True)
class TinyModelSpec:
    """Size of the model and tokenizer. Defaults: the demo checkpoint."""

    vocab_size: int = 4096  # BPE vocabulary, before special tokens
    hidden_size: int = 128
    intermediate_size: int = 512
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    seed: int = 0


def qwen3_chat_template() -> str:
    """The qwen3 chat template from the installed trl package (read, not copied)."""
    from importlib.resources import files

    return (files("trl") / "chat_templates" / "qwen3.jinja").read_text(encoding="utf-8")


def qwen3_served_chat_template() -> str:
    """The template the trained checkpoint is served with: trl's training variant of qwen3 (also read from the
    installed package). TRL trains qwen3-template models on this variant (``get_training_chat_template``):
    every assistant turn starts with an empty ``<think></think>`` block. The plain qwen3 template drops that
    block from earlier assistant turns of a tool loop, and on this tiny model that one difference took the
    right-link-id rate from ~80 % to 0 % (measured at step 1,000), so the server renders exactly what the
    model was trained on. Same special tokens and generation prompt as qwen3."""
    from importlib.resources import files

    return (files("trl") / "chat_templates" / "qwen3_training.jinja").read_text(encoding="utf-8")


def corpus_texts(gold_samples: int = 600, seed: int = 0) -> Iterator[str]:
    """The project's own text: manifests, the demo room, and rendered gold turns (both splits' vocabulary is
    the same product/template words; held-out *phrasings* are not fed in)."""
    from training_jobs.tiny_model.gold import DEMO_DIR, generate

    for path in sorted(DEMO_DIR.glob("*.yaml")):
        yield path.read_text(encoding="utf-8")
    template = qwen3_chat_template()
    yield template
    for t in generate(gold_samples, seed=seed, split="train"):
        yield json.dumps(t.tools, ensure_ascii=False)
        for m in t.messages:
            yield str(m.get("content") or "")
            for call in m.get("tool_calls") or []:
                yield '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>' % (
                    call["function"]["name"],
                    call["function"]["arguments"],
                )


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4096):
    """Byte-level BPE with digits split one per token; returns a ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split("\n", behavior="merged_with_previous"),
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS) + list(MARKUP_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        padding_side="left",
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    fast.chat_template = qwen3_chat_template()
    return fast


def build_tiny_model(out_dir: str | Path, spec: TinyModelSpec | None = None, *, gold_samples: int = 600) -> Path:
    """Write tokenizer + randomly initialised Qwen3 model (+ generation config) to ``out_dir``."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    spec = spec or TinyModelSpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(corpus_texts(gold_samples, spec.seed), spec.vocab_size)
    torch.manual_seed(spec.seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        rope_theta=spec.rope_theta,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.pad_token_id],
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
        max_new_tokens=96,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "tiny_model_spec.json").write_text(json.dumps(asdict(spec), indent=2) + "\n", encoding="utf-8")
    return out


def param_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())
