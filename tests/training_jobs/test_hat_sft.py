"""Stage 1 (HSA-SFT) for real with TRL on the project's tiny model, on a dataset the HSA builder wrote: a few
steps train (finite loss, weights change), checkpoints resume, a cooperative stop saves a checkpoint and a
resumed run finishes the same schedule, and the final directory loads and generates. All training tests of
this stage are in this one module (TRL's import cost)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from training_jobs.hat.config import LoraSettings, SFTStageConfig
from training_jobs.hat.sft import load_sft_dataset, run_sft
from training_jobs.hat.stage import latest_checkpoint, launch_command
from training_jobs.hsa.dataset import Recipe, build_to_disk
from training_jobs.hsa.samples import tiny_model_samples
from training_jobs.tiny_model.pipeline import DEMO_MODEL_DIR

FAST = dict(max_steps=6, per_device_batch_size=2, learning_rate=5e-3, save_steps=3, max_length=512, threads=2)


class Recorder:
    def __init__(self, stop_at_step: int | None = None):
        self.points, self.lines, self.stop_at_step = [], [], stop_at_step

    def report(self, point):
        self.points.append(point)

    def log(self, line):
        self.lines.append(line)

    def should_stop(self):
        return self.stop_at_step is not None and bool(self.points) and self.points[-1]["step"] >= self.stop_at_step


@pytest.fixture(scope="module")
def hsa_dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hsa") / "ds"
    build_to_disk(tiny_model_samples(24, seed=5), Recipe(variants_per_sample=2, harness_pool_size=4), out)
    return out / "dataset"


def _weights(model_dir):
    from safetensors.torch import load_file

    return load_file(str(Path(model_dir) / "model.safetensors"))


def test_a_few_steps_train_save_and_reload(hsa_dataset, tmp_path):
    rec = Recorder()
    result = run_sft(SFTStageConfig(**FAST), model_dir=DEMO_MODEL_DIR, dataset_dir=hsa_dataset, out_dir=tmp_path,
                     reporter=rec)
    assert (result.steps, result.max_steps, result.stopped) == (6, 6, False)
    losses = [p["loss"] for p in rec.points if "loss" in p]
    assert losses and all(0 < x < 50 for x in losses)
    assert [p["step"] for p in rec.points if "loss" in p] == list(range(1, 7))
    assert all("learning_rate" in p for p in rec.points if "loss" in p) and "eta_s" in rec.points[-2]
    before, after = _weights(DEMO_MODEL_DIR), _weights(result.final_dir)
    assert before.keys() == after.keys()
    assert any(not (before[k] == after[k]).all() for k in before)  # parameters changed
    assert latest_checkpoint(tmp_path).name == "checkpoint-6"
    assert (result.final_dir / "chat_template.jinja").exists() and (result.final_dir / "tokenizer.json").exists()
    stage = json.loads((tmp_path / "stage.json").read_text())
    assert stage["config"]["max_steps"] == 6 and stage["metrics"]["samples_per_s"] > 0

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(result.final_dir)
    model = AutoModelForCausalLM.from_pretrained(result.final_dir)
    ids = tok.apply_chat_template([{"role": "user", "content": "how much is #101?"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]


def test_a_stop_saves_a_checkpoint_and_resume_finishes_the_schedule(hsa_dataset, tmp_path):
    config = SFTStageConfig(**{**FAST, "save_steps": 100})
    stopped = run_sft(config, model_dir=DEMO_MODEL_DIR, dataset_dir=hsa_dataset, out_dir=tmp_path,
                      reporter=Recorder(stop_at_step=2))
    assert stopped.stopped and stopped.final_dir is None and 2 <= stopped.steps < 6
    assert stopped.checkpoint_dir.name == f"checkpoint-{stopped.steps}" and not (tmp_path / "final").exists()
    rec = Recorder()
    resumed = run_sft(config, model_dir=DEMO_MODEL_DIR, dataset_dir=hsa_dataset, out_dir=tmp_path, reporter=rec)
    assert not resumed.stopped and resumed.steps == 6 and resumed.final_dir.is_dir()
    assert any(line.startswith(f"resuming from checkpoint-{stopped.steps}") for line in rec.lines)
    assert [p["step"] for p in rec.points if "loss" in p][0] == stopped.steps + 1  # continues, not restarts
    assert resumed.metrics["steps_this_run"] == 6 - stopped.steps


def test_lora_adapters_are_merged_into_the_final_model(hsa_dataset, tmp_path):
    config = SFTStageConfig(**{**FAST, "max_steps": 2}, lora=LoraSettings(r=4, alpha=8, target_modules=["q_proj",
                                                                                                        "v_proj"]))
    result = run_sft(config, model_dir=DEMO_MODEL_DIR, dataset_dir=hsa_dataset, out_dir=tmp_path)
    weights = _weights(result.final_dir)
    assert not any("lora" in k for k in weights) and weights.keys() == _weights(DEMO_MODEL_DIR).keys()


def test_an_adapter_kept_apart_merges_into_the_same_weights_as_the_stage_s_own_merge(hsa_dataset, tmp_path):
    """merge_adapter (the committed glow-gadget adapter at install, reproduce_hat's kept stages) on the saved
    adapter gives the bytes the stage writes when it merges in memory (same seed, same steps)."""
    import torch

    from training_jobs.hat.merge import MERGE_RECORD, merge_adapter

    lora = dict(r=4, alpha=8, target_modules=["q_proj", "v_proj"])
    merged = run_sft(SFTStageConfig(**{**FAST, "max_steps": 2}, lora=LoraSettings(**lora)),
                     model_dir=DEMO_MODEL_DIR, dataset_dir=hsa_dataset, out_dir=tmp_path / "merged")
    apart = run_sft(SFTStageConfig(**{**FAST, "max_steps": 2}, lora=LoraSettings(**lora, merge=False)),
                    model_dir=DEMO_MODEL_DIR, dataset_dir=hsa_dataset, out_dir=tmp_path / "apart")
    assert sorted(p.name for p in apart.final_dir.glob("adapter_*")) == ["adapter_config.json",
                                                                        "adapter_model.safetensors"]
    lines: list[str] = []
    out = merge_adapter(DEMO_MODEL_DIR, apart.final_dir, tmp_path / "remerged", inputs={"adapter": "a"},
                        log=lines.append)
    ours, theirs = _weights(out), _weights(merged.final_dir)
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert (out / "chat_template.jinja").is_file() and json.loads((out / MERGE_RECORD).read_text()) == {"adapter": "a"}
    assert merge_adapter(DEMO_MODEL_DIR, apart.final_dir, out, inputs={"adapter": "a"}, log=lines.append) == out
    assert "up to date" in lines[-1]  # the same inputs: left alone
    merge_adapter(DEMO_MODEL_DIR, apart.final_dir, out, inputs={"adapter": "b"}, log=lines.append)
    assert "merged in" in lines[-1] and not out.with_name("remerged.building").exists()


def test_rows_cut_before_any_assistant_token_are_a_clear_error(hsa_dataset, tmp_path):
    with pytest.raises(ValueError, match="raise max_length"):
        run_sft(SFTStageConfig(**{**FAST, "max_length": 32}), model_dir=DEMO_MODEL_DIR, dataset_dir=hsa_dataset,
                out_dir=tmp_path)


def test_a_dataset_without_conversations_is_refused(tmp_path):
    from datasets import Dataset

    Dataset.from_dict({"text": ["hello"]}).save_to_disk(str(tmp_path / "plain"))
    with pytest.raises(ValueError, match="no messages, tools column"):
        load_sft_dataset(tmp_path / "plain")


def test_several_gpus_launch_through_accelerate():
    one = launch_command("sft", SFTStageConfig(), ["--config", "c.json"], python="py")
    assert one == ["py", "-m", "training_jobs.hat.cli", "sft", "--config", "c.json"]
    four = launch_command("sft", SFTStageConfig(device="cuda", bf16=True, num_processes=4), ["--config", "c.json"],
                          python="py", port=29511)
    assert four[:3] == ["py", "-m", "accelerate.commands.launch"]
    assert four[-5:] == ["-m", "training_jobs.hat.cli", "sft", "--config", "c.json"]
    from accelerate.commands.launch import launch_command_parser  # what accelerate itself makes of it

    args = launch_command_parser().parse_args(four[3:])
    assert (args.multi_gpu, args.num_processes, args.num_machines, args.mixed_precision) == (True, 4, 1, "bf16")
    assert (args.main_process_port, args.module, args.cpu) == (29511, True, False)
    assert (args.training_script, args.training_script_args) == ("training_jobs.hat.cli", ["sft", "--config", "c.json"])
    on_cpu = launch_command_parser().parse_args(
        launch_command("sft", SFTStageConfig(num_processes=2, threads=3), [], python="py")[3:])
    assert (on_cpu.num_processes, on_cpu.mixed_precision, on_cpu.num_cpu_threads_per_process) == (2, "no", 3)
    assert 1024 < on_cpu.main_process_port < 65536  # a free port: two jobs on one host do not meet


def test_two_processes_train_stop_together_and_resume(hsa_dataset, tmp_path):
    """Data parallel for real: ``accelerate launch`` with two processes (gloo on this CPU; NCCL on GPUs is the
    same code). A stop request reaches both and they stop at the same step (or one would wait for the other
    forever); a second launch resumes from that checkpoint and the main process alone writes the final model."""
    import sys

    from training_jobs.hat.stage import run_launched

    config = SFTStageConfig(**{**FAST, "max_steps": 200, "save_steps": 1000, "threads": 1, "num_processes": 2})
    (tmp_path / "c.json").write_text(config.model_dump_json())
    args = ["--config", str(tmp_path / "c.json"), "--model", str(DEMO_MODEL_DIR), "--dataset", str(hsa_dataset),
            "--out", str(tmp_path / "o")]
    rec = Recorder(stop_at_step=2)
    stopped = run_launched(launch_command("sft", config, args, python=sys.executable), rec, stop_grace_s=120)
    assert stopped.stopped and 2 <= stopped.steps < 200 and stopped.checkpoint_dir.name == f"checkpoint-{stopped.steps}"
    assert rec.points[-1]["samples_per_s"] > 0
    state = json.loads((stopped.checkpoint_dir / "trainer_state.json").read_text())
    assert state["train_batch_size"] == 2 and state["global_step"] == stopped.steps

    short = config.model_copy(update={"max_steps": stopped.steps + 2})  # the rest of a shorter schedule
    (tmp_path / "c.json").write_text(short.model_dump_json())
    rec = Recorder()
    done = run_launched(launch_command("sft", short, args, python=sys.executable), rec, stop_grace_s=120)
    assert not done.stopped and done.steps == stopped.steps + 2
    assert f"resuming from checkpoint-{stopped.steps}" in rec.lines
    assert [p["step"] for p in rec.points if "loss" in p] == [stopped.steps + 1, stopped.steps + 2]
    assert (done.final_dir / "model.safetensors").exists() and (tmp_path / "o" / "stage.json").exists()
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(str(done.final_dir))


def test_the_cli_reports_json_lines_and_stops_on_sigterm(hsa_dataset, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    config = tmp_path / "sft.json"
    config.write_text(SFTStageConfig(**{**FAST, "max_steps": 500, "save_steps": 1000}).model_dump_json())
    proc = subprocess.Popen([sys.executable, "-m", "training_jobs.hat.cli", "sft", "--config", str(config),
                             "--model", str(DEMO_MODEL_DIR), "--dataset", str(hsa_dataset), "--out", str(tmp_path / "o")],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            cwd=Path(__file__).resolve().parents[2])
    events = []
    for line in proc.stdout:
        events.append(json.loads(line))
        if events[-1]["event"] == "progress" and events[-1].get("step", 0) >= 2 and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            break
    events += [json.loads(line) for line in proc.stdout]
    assert proc.wait(timeout=120) == 0
    result = events[-1]
    assert result["event"] == "result" and result["stopped"] is True and result["final_dir"] is None
    assert 2 <= result["steps"] < 500 and Path(result["checkpoint_dir"]).name == f"checkpoint-{result['steps']}"
    assert any(e["event"] == "log" and "stopping at step" in e["line"] for e in events)


def test_a_launched_stage_is_followed_and_stopped_through_its_json_lines(hsa_dataset, tmp_path):
    """The worker's path for several GPUs (here the one-process command, as no GPU is here): progress and log lines
    reach the reporter, a stop request SIGTERMs the process, which saves a checkpoint and reports its result."""
    import sys

    from training_jobs.hat.stage import run_launched

    config = SFTStageConfig(**{**FAST, "max_steps": 500, "save_steps": 1000})
    (tmp_path / "c.json").write_text(config.model_dump_json())
    command = launch_command("sft", config, ["--config", str(tmp_path / "c.json"), "--model", str(DEMO_MODEL_DIR),
                                             "--dataset", str(hsa_dataset), "--out", str(tmp_path / "o")],
                             python=sys.executable)
    rec = Recorder(stop_at_step=2)
    result = run_launched(command, rec)
    assert result.stopped and 2 <= result.steps < 500 and result.checkpoint_dir.name == f"checkpoint-{result.steps}"
    assert [p["step"] for p in rec.points if "loss" in p][:2] == [1, 2]
    assert any("stopping at step" in line for line in rec.lines)


def test_a_launched_stage_that_dies_says_why(tmp_path):
    from training_jobs.hat.stage import run_launched

    with pytest.raises(RuntimeError, match="invalid config"):
        run_launched([sys_executable(), "-m", "training_jobs.hat.cli", "sft", "--config", str(tmp_path / "none.json"),
                      "--model", "m", "--dataset", "d", "--out", str(tmp_path)], Recorder())


def sys_executable() -> str:
    import sys

    return sys.executable


def test_bf16_stages_keep_float32_master_weights():
    """bf16 is autocast in the trainer, not the weights' dtype: loaded in bfloat16, an Adam step at a fine-tuning
    learning rate is about one bfloat16 rounding step and most updates would be lost."""
    import torch

    from training_jobs.hat.stage import load_model
    from training_jobs.tiny_model.pipeline import DEMO_MODEL_DIR

    model, _ = load_model(DEMO_MODEL_DIR, SFTStageConfig(device="cuda", bf16=True))
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    w = torch.tensor(1.0, dtype=torch.bfloat16)
    assert w + 1e-3 == w  # why: a 0.1 % update vanishes in bfloat16


def test_a_kept_adapter_is_trained_further_from_its_own_weights(hsa_dataset, tmp_path):
    """init_adapter starts the LoRA from a saved adapter (the glow-gadget adapter's --continue-from): at a learning
    rate of 1e-12 the result is that adapter (not a fresh LoRA, whose B is zero and A random); an adapter of
    another shape is refused."""
    import torch
    from safetensors.torch import load_file

    def _adapter(d):
        return load_file(str(Path(d) / "adapter_model.safetensors"))

    lora = dict(r=4, alpha=8, target_modules=["q_proj", "v_proj"], merge=False)
    first = run_sft(SFTStageConfig(**{**FAST, "max_steps": 2}, lora=LoraSettings(**lora)),
                    model_dir=DEMO_MODEL_DIR, dataset_dir=hsa_dataset, out_dir=tmp_path / "first")
    still = run_sft(SFTStageConfig(**{**FAST, "max_steps": 1, "learning_rate": 1e-12}, lora=LoraSettings(**lora)),
                    model_dir=DEMO_MODEL_DIR, dataset_dir=hsa_dataset, out_dir=tmp_path / "still",
                    init_adapter=first.final_dir)
    before, after = _adapter(first.final_dir), _adapter(still.final_dir)
    assert before.keys() == after.keys() and any(k.endswith("lora_B.weight") for k in before)
    assert all(torch.allclose(before[k], after[k], rtol=0, atol=1e-9) for k in before)
    assert any(before[k].abs().sum() > 0 for k in before if k.endswith("lora_B.weight"))  # a fresh LoRA's B is 0
    further = run_sft(SFTStageConfig(**{**FAST, "max_steps": 2}, lora=LoraSettings(**lora)),
                      model_dir=DEMO_MODEL_DIR, dataset_dir=hsa_dataset, out_dir=tmp_path / "further",
                      init_adapter=first.final_dir)
    assert not all(torch.allclose(before[k], _adapter(further.final_dir)[k], rtol=0, atol=1e-6) for k in before)
    with pytest.raises(ValueError, match="r=4 alpha=8 .* but this stage asks for r=8"):
        run_sft(SFTStageConfig(**{**FAST, "max_steps": 1}, lora=LoraSettings(**{**lora, "r": 8})),
                model_dir=DEMO_MODEL_DIR, dataset_dir=hsa_dataset, out_dir=tmp_path / "wrong",
                init_adapter=first.final_dir)
    with pytest.raises(ValueError, match="merge=False"):
        run_sft(SFTStageConfig(**{**FAST, "max_steps": 1}, lora=LoraSettings(**{**lora, "merge": True})),
                model_dir=DEMO_MODEL_DIR, dataset_dir=hsa_dataset, out_dir=tmp_path / "merging",
                init_adapter=first.final_dir)
