"""Serve profiles produce the vLLM and local command lines: kind "vllm" is vLLM's OpenAI server from the project's
vLLM environment (streams.vllm_cpu.vllm_argv: the same flags on CPU and GPU hosts)."""

from __future__ import annotations

import json
import shlex

import pytest
from pydantic import ValidationError

from streams import vllm_cpu
from streams.serve_profiles import LoraAdapter, ServeProfile, ServeSpec, local_demo_profile, vllm_demo_spec


def test_vllm_plain():
    p = ServeProfile(name="qwen", kind="vllm", model="/models/qwen3-8b", port=8001)
    argv = p.argv()
    assert argv[:3] == [vllm_cpu.vllm_python(), "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--model") + 1] == "/models/qwen3-8b"
    assert argv[argv.index("--port") + 1] == "8001"
    assert "--enable-auto-tool-choice" in argv
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes"
    assert "--speculative-config" not in argv and "--enable-lora" not in argv
    assert p.base_url == "http://127.0.0.1:8001/v1"
    assert argv == vllm_cpu.vllm_argv("/models/qwen3-8b", port=8001)  # the one source of the flags


def test_vllm_with_mtp():
    p = ServeProfile(name="mtp", kind="vllm", model="m", mtp_speculative_tokens=2, dtype="bfloat16")
    argv = p.argv(python="python")
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {"method": "mtp", "num_speculative_tokens": 2}
    assert argv[argv.index("--dtype") + 1] == "bfloat16"
    line = p.command_line(python="python")
    assert """--speculative-config '{"method":"mtp","num_speculative_tokens":2}'""" in line
    assert shlex.split(line)[-len(argv):] == argv


def test_vllm_with_lora():
    p = ServeProfile(
        name="lora", kind="vllm", model="m", enable_lora=True, runtime_lora_updating=True, max_lora_rank=16,
        lora_adapters=[LoraAdapter(name="hat-v1", path="/adapters/hat-v1")],
    )
    argv = p.argv(python="python")
    assert "--enable-lora" in argv and argv[argv.index("--max-lora-rank") + 1] == "16"
    assert argv[argv.index("--lora-modules") + 1] == "hat-v1=/adapters/hat-v1"
    assert p.env()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert p.full_env()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in p.command_line()


def test_invalid_combinations():
    with pytest.raises(ValidationError):
        ServeProfile(name="x", kind="local", model="m", mtp_speculative_tokens=2)
    with pytest.raises(ValidationError):
        ServeProfile(name="x", kind="vllm", model="m", lora_adapters=[LoraAdapter(name="a", path="/a")])
    with pytest.raises(ValidationError):
        ServeProfile(name="x", kind="vllm", model="m", bogus=1)
    with pytest.raises(ValidationError):
        ServeSpec(kind="vllm", port=0)


def test_local_profile():
    p = local_demo_profile(port=8123)
    argv = p.argv(python="py")
    assert argv[:3] == ["py", "-m", "training_jobs.tiny_model.serve"]
    assert argv[argv.index("--port") + 1] == "8123" and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert p.model.endswith("models/demo-tiny") and p.request_model == p.model


def test_a_stored_spec_serves_a_model_as_make_run_does():
    profile = vllm_demo_spec().for_model("/work/m", name="cpu-default")
    argv = profile.argv(port=8011)
    assert argv == vllm_cpu.vllm_argv("/work/m", port=8011, enable_lora=True, max_lora_rank=16)
    assert profile.full_env()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert ServeSpec.model_validate(vllm_demo_spec().model_dump(mode="json", exclude_defaults=True)) == vllm_demo_spec()
