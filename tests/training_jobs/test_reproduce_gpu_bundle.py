"""The GPU host's path of reproduce_hat: the bundle that carries the base there in parts (pack / check / unpack,
on a tiny fake model), the plain-Python command line (no Django), the script that runs it there, and the gpu
budget's estimate. Plain Python: no database, no GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from training_jobs.reproduce import gpu_bundle as G
from training_jobs.reproduce import gpu_preflight as P
from training_jobs.reproduce import run as R
from training_jobs.reproduce.budgets import budget_for

REPO = Path(__file__).resolve().parents[2]
KIB = 1024
LIMIT = 1024 * KIB  # a "64 MiB" of this test: every call's tree + carried folder must fit


def _fake_model(root: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    model = root / "model"
    model.mkdir()
    g = torch.Generator().manual_seed(0)
    save_file({"embed.weight": torch.randn(1500, 1024, generator=g), "norm.weight": torch.ones(1024),
               "layer.bias": torch.randn(333, generator=g) * 1e-3, "position_ids": torch.arange(16)},
              str(model / "model.safetensors"), metadata={"format": "pt"})
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 1024}))
    (model / "tokenizer.json").write_text("{}" + "x" * 5000)
    (model / "chat_template.jinja").write_text("{{ messages }}")
    (model / "build.json").write_text(json.dumps({"weights_sha256": "f" * 64}))
    return model


@pytest.fixture
def packed(tmp_path):
    model = _fake_model(tmp_path)
    nltk = tmp_path / "nltk" / "tokenizers" / "punkt_tab" / "english"
    nltk.mkdir(parents=True)
    (nltk / "abbrev_types.txt").write_text("dr\nmr\n")
    wheels = tmp_path / "wheels_src"
    wheels.mkdir()
    (wheels / "foo-1.0-py3-none-any.whl").write_bytes(b"PK not really a wheel")
    (wheels / "constraints.txt").write_text("foo==1.0\n")
    lines: list[str] = []
    manifest = G.pack(model, tmp_path / "bundle", nltk_data=tmp_path / "nltk", wheels_from=wheels,
                      wheels=(("foo", "1.0"),), limit=LIMIT, margin=16 * KIB, tree=100 * KIB, log=lines.append)
    return {"model": model, "bundle": tmp_path / "bundle", "manifest": manifest, "log": lines, "tmp": tmp_path}


def test_pack_cuts_the_bf16_base_into_parts_that_fit_each_call(packed):
    m, bundle = packed["manifest"], packed["bundle"]
    assert len(m["parts"]) >= 3
    assert [c["call"] for c in m["calls"]] == [f"call{i}" for i in range(1, len(m["parts"]) + 1)]
    assert m["model"]["dtype"] == "bfloat16" and m["model"]["source_dtypes"] == {"float32": 3, "int64": 1}
    assert sum(p["bytes"] for p in m["parts"]) == m["stream"]["bytes"] < m["model"]["bytes"]
    for call in m["calls"]:
        folder = bundle / call["call"]
        sent = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        assert sent + m["tree_bytes"] <= LIMIT - 16 * KIB  # the margin is kept, the manifest included
        assert call["carry"] == [f"var/gpu_bundle/{call['call']}"]
    for part in m["parts"]:
        assert G.sha256_file(bundle / part["call"] / part["name"]) == part["sha256"]
    assert set(m["meta"]) == {"config.json", "tokenizer.json", "chat_template.jinja", "build.json"}
    assert set(m["wheels"]) == {"foo-1.0-py3-none-any.whl", "constraints.txt"} and m["pins"] == ["foo==1.0"]
    assert json.loads((bundle / "call1" / G.MANIFEST).read_text()) == m
    assert not (bundle.parent / "bundle.packing").exists()
    assert any(line.startswith("  call 1: carry") and "(ok)" in line for line in packed["log"])


def test_unpack_reassembles_the_base_in_bf16_and_checks_every_sha256(packed, tmp_path):
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file

    target, nltk = tmp_path / "models" / "smollm2-135m", tmp_path / "var" / "nltk_data"
    lines: list[str] = []
    done = G.unpack(packed["bundle"], target, nltk_data=nltk, log=lines.append)
    assert done["model_dir"] == str(target) and done["missing"] == []
    source, cast = load_file(str(packed["model"] / "model.safetensors")), load_file(str(target / "model.safetensors"))
    assert set(cast) == set(source)
    for key, tensor in source.items():
        want = tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor
        assert cast[key].dtype == want.dtype and torch.equal(cast[key], want)
    with safe_open(str(target / "model.safetensors"), framework="pt") as f:
        assert f.metadata() == {"format": "pt"}
    for name in packed["manifest"]["meta"]:
        assert (target / name).read_bytes() == (packed["model"] / name).read_bytes()
    record = json.loads((target / G.RECORD).read_text())
    assert record["model"]["sha256"] == G.sha256_file(target / "model.safetensors")
    assert record["model"]["sha256"] == packed["manifest"]["model"]["sha256"]
    assert record["source"]["weights_sha256"] == G.sha256_file(packed["model"] / "model.safetensors")
    assert (nltk / "tokenizers" / "punkt_tab" / "english" / "abbrev_types.txt").read_text() == "dr\nmr\n"
    assert R._bundle_record(target)["gpu_bundle"]["model"]["dtype"] == "bfloat16" and R._bundle_record(tmp_path) == {}
    again: list[str] = []
    G.unpack(packed["bundle"], target, nltk_data=None, log=again.append)
    assert any("already this bundle's base" in line for line in again)


def test_a_part_that_has_not_arrived_is_named_with_its_call(packed, tmp_path):
    bundle, last = packed["bundle"], packed["manifest"]["calls"][-1]["call"]
    (bundle / last).rename(tmp_path / "later")
    lines: list[str] = []
    state = G.unpack(bundle, tmp_path / "m", nltk_data=None, check_only=True, log=lines.append)
    assert state["missing"] == [last] and f"({last})" in lines[0]
    with pytest.raises(G.BundleError, match=f"missing \\(send {last}: carry var/gpu_bundle/{last}\\)"):
        G.unpack(bundle, tmp_path / "m", nltk_data=None)
    assert not (tmp_path / "m").exists()


def test_a_damaged_or_short_part_is_refused_naming_the_call_to_send_again(packed, tmp_path):
    bundle, part = packed["bundle"], packed["manifest"]["parts"][1]
    path = bundle / part["call"] / part["name"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(G.BundleError, match=f"damaged in transfer; send {part['call']} again"):
        G.unpack(bundle, tmp_path / "m", nltk_data=None)
    path.write_bytes(bytes(data[:-10]))
    with pytest.raises(G.BundleError, match=f"cut short or damaged in transfer; send {part['call']} again"):
        G.check(bundle)
    (bundle / "call1" / "meta" / "config.json").write_text("{}")
    with pytest.raises(G.BundleError, match="meta/config.json was damaged in transfer; send call1 again"):
        G.check(bundle)
    assert not (tmp_path / "m").exists()


def test_without_call_1_or_with_another_format_unpack_says_what_to_do(packed, tmp_path):
    with pytest.raises(G.BundleError, match="call 1, carry var/gpu_bundle/call1, has not arrived"):
        G.check(tmp_path / "nowhere")
    path = packed["bundle"] / "call1" / G.MANIFEST
    path.write_text(json.dumps({**packed["manifest"], "format": 99}))
    with pytest.raises(G.BundleError, match="format 99, this code reads 1: pack again"):
        G.read_manifest(packed["bundle"])


def test_the_plan_says_when_the_tree_outgrew_the_parts(packed):
    m = packed["manifest"]
    assert all("(ok)" in line for line in G.plan_lines(m, tree=m["tree_bytes"])[1:])
    over = G.plan_lines(m, tree=m["tree_bytes"] + 200 * KIB)
    assert "OVER the 1 MiB limit: pack again with --part-mib" in over[1]
    assert "bash scripts/reproduce_gpu.sh" in over[-1] and "preflight" in over[1]


def test_pack_refuses_a_tree_that_leaves_no_room_and_a_model_that_is_not_built(tmp_path):
    model = _fake_model(tmp_path)
    with pytest.raises(G.BundleError, match="leaves no room"):
        G.pack(model, tmp_path / "b", nltk_data=None, download=False, limit=LIMIT, tree=LIMIT, margin=0)
    with pytest.raises(G.BundleError, match="no config.json or model.safetensors"):
        G.pack(tmp_path / "empty", tmp_path / "b", nltk_data=None, download=False)
    with pytest.raises(G.BundleError, match="foo: want 2.0, found \\['1.0'\\]"):
        wheels = tmp_path / "w"
        wheels.mkdir()
        (wheels / "foo-1.0-py3-none-any.whl").write_bytes(b"x")
        G.pack(model, tmp_path / "b", nltk_data=None, wheels_from=wheels, wheels=(("foo", "2.0"),), limit=LIMIT,
               tree=0, margin=0)
    assert not (tmp_path / "b").exists()


def test_the_pinned_wheels_are_one_version_each_and_the_tree_is_measured():
    names = [G._norm(n) for n, _ in G.WHEELS]
    assert len(names) == len(set(names)) and {"trl", "datasets", "pydantic", "lm_eval", "nltk"} <= set(names)
    assert 5 * G.MIB < G.tree_bytes() < G.LIMIT_BYTES


def test_the_gpu_budget_fits_the_device_command_and_the_first_one_did_not():
    from dataclasses import replace

    b = budget_for("gpu", "smol")
    assert b.eval_workers == 5 and b.dtype == "bfloat16" and not b.lora
    assert P.estimate(b)["total"] <= 480  # the script stops the run at 540 s; a command may run 600 s
    first = replace(b, sft_steps=200, distill_steps=40, rl_steps=12, train_samples=1600, k=4, n_t1=256, n_t2=256,
                    n_t3_per_level=50, n_t4=541, eval_workers=1)
    assert P.estimate(first)["evaluation"] > 10 * 3600
    # the cpu budget: two single-threaded processes on the two cores
    assert budget_for("cpu", "smol").eval_workers == 2 and budget_for("smoke", "tiny").eval_workers == 1
    with pytest.raises(ValueError, match="eval_workers must be at least 1"):
        replace(b, eval_workers=0)


def test_models_evaluated_in_processes_give_what_one_after_the_other_gives(tmp_path):
    """eval_workers (the gpu budget's 5): the same cases, seeds and replies as one process, on demo-tiny (CPU)."""
    from dataclasses import replace

    from training_jobs.reproduce.evaluate import evaluate_models

    demo = REPO / "models" / "demo-tiny"
    models = {"base": demo, "fixed_sft": demo}
    small = replace(budget_for("smoke", "tiny"), k=1, n_t1=1, n_t2=1, n_t3_per_level=1, n_t4=1, eval_max_new_tokens=24)
    got = {}
    for workers in (1, 2):
        lines: list[str] = []
        out = tmp_path / f"w{workers}"
        results = evaluate_models(models=models, budget=replace(small, eval_workers=workers), out_dir=out, seed=5,
                                  log=lines.append)
        replies = {name: [(json.loads(line)["case_id"], json.loads(line)["reply"])
                          for part in sorted((out / "samples" / name).glob("*.jsonl"))
                          for line in part.read_text().splitlines()] for name in models}
        means = {name: [results["models"][name][s]["accuracy"]["mean"] for s in ("t1", "t2")]
                 + [results["models"][name]["t4"]["prompt_strict"]["mean"]] for name in models}
        got[workers] = (results["sets"], replies, means, lines)
    assert got[1][:3] == got[2][:3] and len(got[1][1]["base"]) == 1 + 1 + 5 + 1
    assert "evaluating base, fixed_sft in 2 processes" in got[2][3]
    assert sum(line.startswith(("base: T1", "fixed_sft: T1")) for line in got[2][3]) == 2


def test_a_model_evaluated_in_its_own_process_is_kept_when_another_fails(tmp_path):
    """With --keep, each model's evaluation is kept as it ends, not when the last one ends: a run that stops
    half-way (a failure, the end of a sitting) keeps what it finished."""
    from dataclasses import replace

    from training_jobs.reproduce.evaluate import evaluate_models, evaluation_key, select_cases
    from training_jobs.reproduce.parts import Parts

    demo = REPO / "models" / "demo-tiny"
    broken = tmp_path / "not-a-model"
    broken.mkdir()
    budget = replace(budget_for("smoke", "tiny"), k=1, n_t1=1, n_t2=1, n_t3_per_level=1, n_t4=1,
                     eval_max_new_tokens=16, eval_workers=2)
    parts = Parts(tmp_path / "keep")
    lines: list[str] = []
    with pytest.raises(FileNotFoundError, match="not a model directory"):
        evaluate_models(models={"broken": broken, "base": demo}, budget=budget, out_dir=tmp_path / "out", seed=2,
                        log=lines.append, parts=parts)
    key = evaluation_key(demo, select_cases(budget, 2), budget=budget, seed=2, serving="inprocess")
    assert parts.find_eval("base", key) is not None and not parts.eval_dir("broken").exists()
    assert any(line.startswith("broken: evaluation failed: FileNotFoundError") for line in lines)
    assert any(line.startswith("base: evaluation kept at") for line in lines)


# --- the plain command line (no Django) ----------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--budget", "gpu"], "the following arguments are required: --base"),
    (["--base", "huge", "--budget", "gpu"], "argument --base: invalid choice: 'huge'"),
    (["--base", "smol", "--budget", "huge"], "argument --budget: invalid choice: 'huge'"),
    (["--base", "smol", "--budget", "gpu", "--seed", "-1"], "--seed: 0 to 4294967295"),
    (["--base", "smol", "--budget", "gpu", "--seed", "4294967296"], "--seed: 0 to 4294967295"),
    (["--base", "smol", "--budget", "gpu", "--seed", "x"], "argument --seed: invalid int value: 'x'"),
])
def test_the_plain_command_refuses_bad_arguments(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(R, "reproduce", lambda **kw: pytest.fail("ran"))
    with pytest.raises(SystemExit) as exc:
        R.main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_the_plain_command_refuses_a_base_that_is_not_built(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(R.BASE_DIRS, "smol", tmp_path / "smollm2-135m")
    monkeypatch.setattr(R, "reproduce", lambda **kw: pytest.fail("ran"))
    assert R.main(["--base", "smol", "--budget", "gpu"]) == 1
    assert "the base 'smol'" in (err := capsys.readouterr().err) and "is not built (no config.json)" in err


def test_the_plain_command_runs_the_budget_into_the_data_dir(tmp_path, capsys, monkeypatch):
    calls = []
    monkeypatch.setenv("HAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(R, "base_model_dir", lambda base: tmp_path)
    monkeypatch.setattr(R, "reproduce", lambda **kw: calls.append(kw) or {"wall_s": {"total": 1.5}})
    assert R.main(["--base", "tiny", "--budget", "smoke", "--seed", "7"]) == 0
    out = tmp_path / "data" / "reproduce" / "tiny-smoke-seed7"
    (kw,) = calls
    assert (kw["base"], kw["budget"], kw["seed"], kw["out_dir"]) == ("tiny", "smoke", 7, out)
    assert kw["command"] == f"HF_HUB_OFFLINE=1 python -m training_jobs.reproduce.run --base tiny --budget smoke " \
                            f"--seed 7 --out {out}"
    assert f"done in 1.5 s: {out / 'run.json'}" in capsys.readouterr().out
    monkeypatch.delenv("HAT_DATA_DIR")
    assert R.default_out_dir("smol", "gpu", 0) == REPO / "var" / "reproduce" / "smol-gpu-seed0"


def test_the_gpu_path_and_the_bundle_import_no_django():
    code = ("import sys, training_jobs.reproduce.run, training_jobs.reproduce.gpu_bundle; "
            "bad = sorted({m.split('.')[0] for m in sys.modules} & {'django', 'rest_framework', 'channels', "
            "'celery', 'console'}); print(bad); sys.exit(bool(bad))")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=180,
                          env=env)
    assert done.returncode == 0, done.stdout + done.stderr


# --- the script the GPU host runs ------------------------------------------------------------------------------------

FAKE_PYTHON = """#!/usr/bin/env bash
# stands in for python3 on the GPU host: "-m MODULE ARGS..."
case "$2" in
  training_jobs.reproduce.gpu_bundle) [ -n "${FAIL_UNPACK:-}" ] && { echo "error: part-01 damaged" >&2; exit 2; }
     echo "bundle: 5 of 5 part(s) present and intact"; echo "site=$5" ;;
  training_jobs.reproduce.run)
     out=${@: -1}; mkdir -p "$out/samples/base" "$out/data" "$out/hsa_sft/sft"
     for f in results.json table.md table.csv run.json evaluation.json data/data.json hsa_sft/sft/stage.json \\
              samples/base/t1.jsonl accuracy.svg gap.svg ifeval.svg robustness.svg; do echo "{}" >"$out/$f"; done
     echo "run $*"; echo "PYTHONPATH=$PYTHONPATH" ;;
esac
"""


def _script(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return subprocess.run(["bash", str(REPO / "scripts" / "reproduce_gpu.sh")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={"PATH": os.environ["PATH"], "PYTHON": str(fake),
                                                      "OUT": str(tmp_path / "out"), "RUN_DIR": str(tmp_path / "run"),
                                                      "SITE": str(tmp_path / "site"), **env})


def test_the_gpu_script_runs_the_budget_and_brings_back_at_most_8_files(tmp_path):
    done = _script(tmp_path, HAT_GIT_COMMIT="abc")
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted([
        "run.log", "results.json", "table.md", "table.csv", "run.json", "plots.tar.gz", "extras.tar.gz"])
    log = (out / "run.log").read_text()
    assert "5 of 5 part(s)" in log and f"site={tmp_path / 'site'}" in log
    assert f"run -m training_jobs.reproduce.run --base smol --budget gpu --seed 0 --out {tmp_path / 'run'}" in log
    assert f"PYTHONPATH={tmp_path / 'site'}" in log and "== exit 0" in log
    with tarfile.open(out / "plots.tar.gz") as t:
        assert sorted(t.getnames()) == ["accuracy.svg", "gap.svg", "ifeval.svg", "robustness.svg"]
    with tarfile.open(out / "extras.tar.gz") as t:
        names = set(t.getnames())
    assert {"./evaluation.json", "./data/data.json", "./hsa_sft/sft/stage.json", "./samples/base/t1.jsonl"} <= names


def test_the_gpu_script_runs_nothing_when_the_unpack_fails(tmp_path):
    done = _script(tmp_path, FAIL_UNPACK="1")
    assert done.returncode == 3
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["run.log"]
    log = (tmp_path / "out" / "run.log").read_text()
    assert "part-01 damaged" in log and "nothing was run" in log and "reproduce_hat" not in log
