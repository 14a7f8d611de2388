"""The flagship adapter's training chain (training_jobs.base_models.glow_adapter, plain Python): an adapter trained
further (``train --continue-from``) records what it started from, refuses an adapter of another base or with files
its metrics do not name, and its model card gives the whole chain and every command that reproduces it. (The
warm start itself is tested on the tiny model in test_hat_sft.py; the adapter's quality in
tests/streams/test_flagship_model.py.)"""

from __future__ import annotations

import json
import shutil

import pytest

from training_jobs.base_models import glow_adapter, smollm2

BASE = "b" * 64


def _kept(tmp_path, **extra):
    folder = tmp_path / "kept"
    folder.mkdir()
    for name in glow_adapter.ADAPTER_FILES:
        (folder / name).write_bytes(name.encode())
    metrics = {"base_weights_sha256": BASE, "steps": 120, "command": f"{glow_adapter.TRAIN_COMMAND} --steps 120",
               "commit": "abc", "wall_s": 2981.7, "train": {"train_loss": 0.339}, "spec": {"seed": 0},
               "adapter_sha256": {n: smollm2.sha256_file(folder / n) for n in glow_adapter.ADAPTER_FILES},
               "demo_room": {"answered": ["how much is #102?"], "of": 9}, **extra}
    (folder / glow_adapter.METRICS_FILE).write_text(json.dumps(metrics))
    return folder


def test_the_chain_of_a_kept_adapter(tmp_path):
    chain = glow_adapter._earlier_training(_kept(tmp_path), BASE)
    assert chain == [{"steps": 120, "command": f"{glow_adapter.TRAIN_COMMAND} --steps 120", "commit": "abc",
                      "wall_s": 2981.7, "adapter_sha256": chain[0]["adapter_sha256"], "train_loss": 0.339,
                      "seed": 0}]
    older = {"steps": 60, "command": "older", "seed": 3}
    shutil.rmtree(tmp_path / "kept")
    assert glow_adapter._earlier_training(_kept(tmp_path, earlier_training=[older]), BASE)[0] == older


def test_an_adapter_of_another_base_or_with_other_files_is_refused(tmp_path):
    kept = _kept(tmp_path)
    with pytest.raises(smollm2.BaseModelError, match="another base"):
        glow_adapter._earlier_training(kept, "c" * 64)
    (kept / "adapter_model.safetensors").write_bytes(b"changed")
    with pytest.raises(smollm2.BaseModelError, match="adapter_model.safetensors is not the file"):
        glow_adapter._earlier_training(kept, BASE)


def test_the_card_of_an_adapter_trained_further_gives_the_whole_chain(tmp_path):
    earlier = glow_adapter._earlier_training(_kept(tmp_path), BASE)
    metrics = {"steps": 100, "steps_total": 220, "wall_s": 2400.0, "spec": {"batch_size": 1, "seed": 1},
               "train": {"train_loss": 0.2, "final_loss": 0.1}, "earlier_training": earlier,
               "command": f"{glow_adapter.TRAIN_COMMAND} --steps 100 --seed 1 --continue-from kept"}
    card = glow_adapter.card_text(metrics)
    assert "- Data: 220 gold turns" in card and "before it, 120 steps on rows of seed 0" in card
    assert (f"`{glow_adapter.TRAIN_COMMAND} --steps 120` then `{glow_adapter.TRAIN_COMMAND} --steps 100 --seed 1 "
            "--continue-from kept` (about 90 minutes") in card
    assert "In the demo room" not in card  # measured of the old adapter, not of this one
