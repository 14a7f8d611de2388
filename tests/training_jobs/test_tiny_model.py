"""Tokenizer, offline build and a 3-step SFT run on a very small model (one process: importing trl is slow)."""

from __future__ import annotations

import json
import math

import pytest

from training_jobs.tiny_model.build import MARKUP_TOKENS, TinyModelSpec, build_tiny_model, qwen3_chat_template
from training_jobs.tiny_model.evaluate import parse_output

SMALL = TinyModelSpec(vocab_size=600, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=1024)


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "base", SMALL, gold_samples=40)


def test_tokenizer_splits_digits_and_keeps_markup(small_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(small_model)
    for text in ("price $24.95 for link 1203", "#101 stock 180"):
        pieces = tok.tokenize(text)
        digits = [p for p in pieces if any(ch.isdigit() for ch in p)]
        assert digits and all(len(p) == 1 for p in digits), pieces
    for t in (*MARKUP_TOKENS, "<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        assert len(tok.encode(t, add_special_tokens=False)) == 1, t
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.decode(tok.encode("Only 8 left of link 102!")) == "Only 8 left of link 102!"


def test_build_is_loadable_with_trl_qwen3_template(small_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(small_model)
    model = AutoModelForCausalLM.from_pretrained(small_model)
    assert tok.chat_template == qwen3_chat_template()
    assert model.config.model_type == "qwen3" and model.config.num_hidden_layers == 1
    assert model.config.vocab_size == len(tok)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}],
        add_generation_prompt=True, tokenize=False,
    )
    assert "<tools>" in text and text.endswith("<|im_start|>assistant\n")


def test_three_step_sft_changes_params_and_reloads(small_model, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from training_jobs.tiny_model.train import TrainSpec, train

    before = {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(small_model).state_dict().items()}
    spec = TrainSpec(max_steps=3, train_samples=12, batch_size=4, save_steps=1000, logging_steps=1)
    summary = train(small_model, tmp_path / "run", spec)
    assert summary["steps"] == 3
    assert math.isfinite(summary["train_loss"]) and summary["train_loss"] > 0
    after_model = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "final")
    after = after_model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    out = after_model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=2, do_sample=False)
    assert out.shape[1] == 5
    assert json.loads((tmp_path / "run" / "train_summary.json").read_text())["steps"] == 3


def test_parse_output():
    raw = '<think>\n\n</think>\n\n<tool_call>\n{"name": "check_stock", "arguments": {"link_id": 102}}\n</tool_call><|im_end|>'
    p = parse_output(raw)
    assert p.tool_calls == [{"name": "check_stock", "arguments": {"link_id": 102}}] and p.malformed == 0
    assert parse_output("<tool_call>\n{bad json}\n</tool_call>").malformed == 1
    assert parse_output("<think>\n</think>\n\nOnly 8 left.").text == "Only 8 left."


def test_export_serves_the_template_the_model_was_trained_on(small_model, tmp_path):
    from transformers import AutoTokenizer

    from training_jobs.tiny_model.build import qwen3_served_chat_template
    from training_jobs.tiny_model.pipeline import export

    dst = export(small_model, tmp_path / "exported")
    tok = AutoTokenizer.from_pretrained(dst)
    assert tok.chat_template == qwen3_served_chat_template() != qwen3_chat_template()
    history = [
        {"role": "user", "content": "[ann] price #101?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "load_skill", "arguments": '{"skill_id": "price_stock"}'}}]},
        {"role": "tool", "content": "body"},
    ]
    text = tok.apply_chat_template(history, add_generation_prompt=True, tokenize=False)
    # the earlier tool-call turn carries the empty think block, exactly as in training
    assert "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_second_stage_continues_a_checkpoint_and_records_its_lineage(small_model, tmp_path):
    from training_jobs.tiny_model.pipeline import run

    first = run(max_steps=2, train_samples=8, eval_n=1, work_dir=tmp_path / "w1", out_dir=tmp_path / "stage1",
                init_from=small_model, log=lambda *_: None)
    assert first["lineage"] == {"init_from": str(small_model), "previous_stages": []}  # a built model: no metrics
    second = run(max_steps=2, train_samples=8, eval_n=1, work_dir=tmp_path / "w2", out_dir=tmp_path / "stage2",
                 init_from=tmp_path / "stage1", learning_rate=1e-3, log=lambda *_: None)
    # same tokenizer (copied, not rebuilt) and the stage-1 weights as the starting point
    assert (tmp_path / "stage2" / "tokenizer.json").read_bytes() == (tmp_path / "stage1" / "tokenizer.json").read_bytes()
    assert second["lineage"]["init_from"] == str(tmp_path / "stage1")
    [previous] = second["lineage"]["previous_stages"]
    assert previous["command"] == first["command"]
    assert f"--init-from {tmp_path / 'stage1'}" in second["command"] and "--learning-rate 0.001" in second["command"]
    assert second["learning_rate"] == 1e-3
    card = (tmp_path / "stage2" / "MODEL_CARD.md").read_text()
    assert "trained in 2 stages" in card and first["command"] in card and second["command"] in card
    saved = json.loads((tmp_path / "stage2" / "metrics.json").read_text())
    assert set(saved["metrics_summary"]) >= {"right_tool_and_link_id", "right_link_id_by_name"}


# --- the gold data over several harnesses (the third stage: tiny room + glow-gadget) ---------------------------------


def test_a_tiny_room_only_mix_is_the_earlier_stages_data():
    from training_jobs.tiny_model.gold import generate, generate_mix

    for split in ("train", "heldout", "heldout_ids"):
        assert [t.messages for t in generate_mix(12, seed=0, split=split)] == \
            [t.messages for t in generate(12, seed=0, split=split)]


def test_a_mix_shares_out_samples_by_harness_with_earlier_turns_where_the_harness_sends_them():
    from training_jobs.tiny_model.gold import generate_mix, load_demo_manifest, parse_mix
    from training_jobs.tiny_model.train import dataset_rows

    mix = parse_mix("tiny_room=2,skincare_v1=1,skincare_v2=1")
    assert mix == {"tiny_room": 0.5, "skincare_v1": 0.25, "skincare_v2": 0.25}
    trajs = generate_mix(80, seed=0, mix=mix)
    assert [t.messages for t in trajs] == [t.messages for t in generate_mix(80, seed=0, mix=mix)]  # deterministic
    by = {name: [t for t in trajs if t.meta["harness"] == name] for name in mix}
    assert {name: len(ts) for name, ts in by.items()} == {"tiny_room": 40, "skincare_v1": 20, "skincare_v2": 20}
    for name, ts in by.items():
        tool_names = {tool["function"]["name"] for tool in ts[0].tools}
        assert tool_names == {t.name for t in load_demo_manifest(name).tools} | {"load_skill"}
    assert not any(t.meta["history_turns"] for t in by["tiny_room"])  # history_turns: 0 in its manifest
    with_history = [t for t in by["skincare_v1"] + by["skincare_v2"] if t.meta["history_turns"]]
    assert with_history and all(1 <= t.meta["history_turns"] <= 3 for t in with_history)
    t = with_history[0]
    assert [m["role"] for m in t.messages[1:1 + 2 * t.meta["history_turns"]]] == ["user", "assistant"] * \
        t.meta["history_turns"]
    rows = dataset_rows(8, 0, mix)
    assert len(rows) == 8 and all(json.loads(r["messages"])[0]["role"] == "system" for r in rows)


@pytest.mark.parametrize("text, error", [("nope=1", "no demo manifest 'nope'"), ("tiny_room=0", "must be > 0"),
                                         ("tiny_room=x", "not name=share"), ("", "no manifest named")])
def test_a_bad_mix_says_what_is_wrong(text, error):
    from training_jobs.tiny_model.gold import parse_mix

    with pytest.raises(ValueError, match=error):
        parse_mix(text)


def test_a_stage_on_glow_gadget_records_it_and_is_evaluated_on_it(small_model, tmp_path):
    """A stage whose mix adds glow-gadget: its held-out figures per harness, the manifests the whole lineage trained
    on (what the model registry tells the preview room), the command with its mix, and the card's table."""
    from training_jobs.tiny_model.pipeline import run

    first = run(max_steps=1, train_samples=4, eval_n=1, work_dir=tmp_path / "w1", out_dir=tmp_path / "stage1",
                init_from=small_model, log=lambda *_: None)
    assert first["trained_manifests"] == ["tiny_room"] and first["metrics"]["harnesses"] == {}
    mix = {"tiny_room": 0.5, "skincare_v1": 0.5}
    second = run(max_steps=1, train_samples=4, eval_n=1, work_dir=tmp_path / "w2", out_dir=tmp_path / "stage2",
                 init_from=tmp_path / "stage1", learning_rate=1e-3, mix=mix, log=lambda *_: None)
    assert second["trained_manifests"] == ["tiny_room", "skincare_v1"]
    assert "--mix tiny_room=0.5,skincare_v1=0.5" in second["command"]
    glow = second["metrics"]["harnesses"]["skincare_v1"]
    assert glow["harness"] == "skincare_v1" and glow["heldout_trajectories"] == 1
    card = (tmp_path / "stage2" / "MODEL_CARD.md").read_text()
    assert "flagship harness `glow-gadget`" in card and "| metric | skincare_v1 |" in card
    assert "trained in 2 stages" in card and second["command"] in card


def test_the_registry_reads_what_the_committed_checkpoint_trained_on(tmp_path, monkeypatch):
    from training_jobs import model_artefacts

    monkeypatch.setattr(model_artefacts, "_demo_dir", lambda: tmp_path)
    assert model_artefacts.demo_checkpoint_manifests() == ["tiny_room"]  # no metrics.json: the first recipe
    (tmp_path / "metrics.json").write_text(json.dumps({"trained_manifests": ["tiny_room", "skincare_v1"]}))
    assert model_artefacts.demo_checkpoint_manifests() == ["tiny_room", "skincare_v1"]
    slugs, hashes, words = model_artefacts._demo_checkpoint_record()
    assert len(hashes) == 2 and any("skincare_v1" in w for w in words)
