"""A LoRA adapter merged into the model it was trained from: one plain checkpoint directory a server or the next
stage loads as it is. Used where an adapter is kept apart from its merged model (the committed glow-gadget adapter,
merged at install; reproduce_hat's kept stages, merged again when a run picks them up). Plain Python, no Django.

Merging a saved adapter into the reloaded start model is the computation a stage does in memory before it saves
(``merge_and_unload`` on the same float32 weights), so the merged weights are the same bytes.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from training_jobs.hat.stage import BESIDE_WEIGHTS

MERGE_RECORD = "merge.json"  # what a merged directory was made from (its idempotency check)


def merge_adapter(start_dir: str | Path, adapter_dir: str | Path, out: str | Path, *,
                  inputs: Mapping[str, Any] | None = None, log: Callable[[str], None] = print) -> Path:
    """``start_dir`` with the adapter in ``adapter_dir`` merged in, saved to ``out`` with the start model's tokenizer
    and the files that belong beside its weights (chat template, generation defaults). ``inputs``: what identifies
    the inputs (hashes); recorded in ``out/merge.json``, and a directory already made from the same inputs is left
    alone. The directory appears whole or not at all (built beside it, then renamed)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start_dir, adapter_dir, out = Path(start_dir), Path(adapter_dir), Path(out)
    record = dict(inputs) if inputs is not None else None
    if record is not None:
        try:
            if json.loads((out / MERGE_RECORD).read_text(encoding="utf-8")) == record and \
                    any(out.glob("*.safetensors")):
                log(f"{out}: up to date (made from this model and adapter)")
                return out
        except (OSError, ValueError):
            pass
    t0 = time.perf_counter()
    tmp = out.with_name(out.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    model = AutoModelForCausalLM.from_pretrained(str(start_dir), dtype=torch.float32)
    model = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    model.save_pretrained(str(tmp))
    AutoTokenizer.from_pretrained(str(start_dir)).save_pretrained(str(tmp))
    for name in BESIDE_WEIGHTS:
        if (start_dir / name).is_file() and not (tmp / name).exists():
            shutil.copyfile(start_dir / name, tmp / name)
    if record is not None:
        (tmp / MERGE_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    log(f"{out}: merged in {time.perf_counter() - t0:.1f} s")
    return out
