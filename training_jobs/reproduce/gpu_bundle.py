"""``reproduce_hat --budget gpu`` on a GPU host that has no network and no Django: what travels there and how.

The host (the device tool's ``nvidia-h200``: Python 3.12 at /opt/torch/.venv with torch, transformers 5.17,
accelerate, peft, safetensors, tokenizers, pyarrow, pandas, numpy, jinja2, pyyaml, ...; no trl, datasets, pydantic,
jsonschema, lm-eval, nltk, langdetect; nothing can be downloaded there) receives, per call, the repository's working
tree (tracked and untracked-not-ignored files, about 19 MB) plus at most 8 ignored ``carry`` paths, 64 MiB in all.
Ignored files a call left there stay for the next call while the machine is held (it goes back 30 s after a call,
or 30 minutes after it started), so the base travels in parts over consecutive calls.

``pack`` (here, once; CPU, about two minutes) writes ``var/gpu_bundle/`` (git-ignored, as all of ``var/``):

- the SmolLM2-135M base cast to bfloat16 (``torch`` ``.to(torch.bfloat16)``, round to nearest even: the very
  values ``from_pretrained(dtype=torch.bfloat16)`` gives every stage and the evaluation of the ``gpu`` budget, so
  training from it is training from the float32 build), compressed with xz (the weights are dequantised Q4_1, few
  distinct values per block: 63 % of 269 MB) and cut into parts;
- its config, tokenizer, chat template, ``build.json`` and card (``meta/``), NLTK's English punkt_tab
  (``nltk_data/``, IFEval's sentence checks) and the wheels the host lacks (``wheels/``, pinned in
  ``wheels/constraints.txt`` to the versions the project's .venv runs; :data:`WHEELS`);
- ``manifest.json``: the sha256 of every part, of the compressed stream and of the reassembled file, of every
  meta file, wheel and data file, and the calls with their ``carry`` lists and bytes.

Folder ``call1/`` holds the manifest, the extras and the first part; ``call2/`` ... one part each. Each call
carries exactly one of them (``carry: ["var/gpu_bundle/callN"]``); pack sizes the parts so that the working tree
measured then, plus the call's folder, plus a margin stays under 64 MiB; ``plan`` measures the tree again and says
if a call would not fit any more (the tree grew: pack again with a smaller ``--part-mib``).

``unpack`` (there) checks every sha256 (a damaged or short part is refused, naming the call to send again),
reassembles ``models/smollm2-135m/`` (bfloat16 weights + ``gpu_bundle.json``, which run.json records), puts the
punkt data in ``var/nltk_data`` and installs the wheels into a target folder for ``PYTHONPATH``
(``pip install --no-index --no-deps --target``). ``unpack --check`` only verifies the parts that have arrived.
``preflight`` (there) imports everything the gpu path imports, prints the versions the host gives against the
project's, and times a decode and a training step of a SmolLM2-shaped model to predict the run's wall time
(:mod:`training_jobs.reproduce.gpu_preflight`).

The plan (the lead session that is lent an H200; 15 minutes of device time in all, 10 minutes a command)::

    here:  python -m training_jobs.reproduce.gpu_bundle pack      # once; prints the calls below with sizes
           python -m training_jobs.reproduce.gpu_bundle plan      # again just before the calls: still fits?
    call 1 carry ["var/gpu_bundle/call1"]:
           python3 -m training_jobs.reproduce.gpu_bundle unpack --check --site /tmp/site \\
             && PYTHONPATH=/tmp/site python3 -m training_jobs.reproduce.gpu_bundle preflight
           (cold start 1-2 min; the check, the wheels and the preflight about 1 min)
    call 2 .. N-1 carry ["var/gpu_bundle/callK"], at once after the previous one (the machine stays 30 s):
           python3 -m training_jobs.reproduce.gpu_bundle unpack --check             (about 15 s each)
    call N carry ["var/gpu_bundle/callN"], timeout_s 600:
           HAT_GIT_COMMIT=<git rev-parse HEAD here> bash scripts/reproduce_gpu.sh
           (unpack, then the gpu budget under a 540 s limit, then the results into $OUT), then give_back.

Sizes as packed on 2026-12-01 (tree 18.6 MiB): the base 256.6 MiB in bfloat16, 162.7 MiB compressed, in 5 parts;
22 wheels 21.5 MiB (lm-eval alone 8.7 MiB); call 1 carries 39.4 MiB (manifest, meta 3.5 MiB, punkt, wheels and a
14 MiB part), calls 2-4 39.4 MiB each, call 5 30.1 MiB: 5 calls, 280.8 MiB sent in all, at most 58.0 MiB a call.

Estimated device time: the cold start 1-2 min; call 1's transfer, check, wheel install and preflight about
1.2 min (imports 20 s, timing 10 s, five decoding processes 25 s); calls 2-4 about 20 s each; call 5 the unpack
(10 s) and the run, stopped at 540 s (estimated 430 s: :func:`training_jobs.reproduce.gpu_preflight.estimate`,
budgets.py's docstring), then the
copy: about 13.5 minutes of the 15. If the preflight predicts more than 500 s, do not start the run in that
session (the machine goes back 30 s after call 1 if nothing follows; give_back at once): report what the
preflight printed, and size the budget from the measured figures. If call 1 shows a missing or broken package,
fetch its wheel here (README.md of the device tool), put it in an ignored folder and add that folder to the
carry list of call 2, with ``pip install --no-index --no-deps --target /tmp/site`` before the check.

Plain Python (no Django); torch is imported by ``pack`` (the cast) and ``preflight`` only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BUNDLE_DIR = REPO / "var" / "gpu_bundle"
MODEL_DIR = REPO / "models" / "smollm2-135m"
NLTK_DATA = REPO / "var" / "nltk_data"
MANIFEST = "manifest.json"
RECORD = "gpu_bundle.json"  # written into the unpacked model directory (run.json quotes it)
FORMAT = 1
MIB = 1 << 20
LIMIT_BYTES = 64 * MIB  # what one device call may send: working tree + carried paths
MARGIN_BYTES = 6 * MIB  # left free in every call for the tree to grow between pack and the calls
XZ_PRESET = 1  # xz level 1: about 60 % on these weights, a minute here, seconds there
WEIGHTS = "model.safetensors"
SITE = "/tmp/site"
Log = Callable[[str], None]

# What the gpu path imports that the host's image does not hold (found by importing the path in the project's
# .venv and mapping sys.modules to distributions; optional imports left out: redis, cryptography, opentelemetry,
# chardet, pytz, wcwidth). Pinned to the project's versions (pyproject.toml and its .venv). regex, tokenizers,
# peft, fsspec and typing-extensions exist there in unknown or other versions: the project's travel, so the
# judges' patterns, the tokenizer and datasets behave as here. langdetect has no wheel on PyPI: built here.
WHEELS: tuple[tuple[str, str], ...] = (
    ("trl", "1.16.0"), ("datasets", "5.2.0"), ("dill", "0.4.1"), ("multiprocess", "0.70.19"),
    ("fsspec", "2026.9.0"), ("pydantic", "2.14.4"), ("pydantic-core", "2.50.5"), ("annotated-types", "0.8.0"),
    ("typing-inspection", "0.4.5"), ("typing-extensions", "4.16.0"), ("jsonschema", "4.26.0"),
    ("jsonschema-specifications", "2025.9.1"), ("referencing", "0.37.0"), ("rpds-py", "2026.9.1"),
    ("lm-eval", "0.4.13"), ("immutabledict", "4.3.1"), ("langdetect", "1.0.9"), ("nltk", "3.10.4"),
    ("defusedxml", "0.7.1"), ("peft", "0.21.2"), ("regex", "2026.11.19"), ("tokenizers", "0.23.3"),
    ("google-re2", "1.1.20251105"),  # tool-schema patterns (harness_editor.schemas.safe_schema)
)
BUILT_HERE = frozenset({"langdetect"})  # sdist only on PyPI: a pure-Python wheel is built here
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
# Packages the host provides that the gpu path uses: preflight prints the host's version beside the project's.
HOST_PROVIDED = ("torch", "transformers", "accelerate", "safetensors", "huggingface_hub", "numpy", "pyarrow",
                 "pandas", "jinja2", "pyyaml", "httpx", "sacrebleu", "xxhash", "attrs")
# Every module of the gpu path whose import must work there (run.py's lazy imports included).
GPU_PATH_MODULES = (
    "training_jobs.reproduce.run", "training_jobs.reproduce.arms", "training_jobs.reproduce.data",
    "training_jobs.reproduce.evaluate", "training_jobs.reproduce.eval_serving", "training_jobs.reproduce.table",
    "training_jobs.reproduce.plots", "training_jobs.reproduce.claims", "training_jobs.hat.sft",
    "training_jobs.hat.distill", "training_jobs.hat.rl", "training_jobs.evals.build_t1",
    "training_jobs.evals.judging", "training_jobs.evals.t2", "training_jobs.evals.t3", "training_jobs.hsa.dataset",
    "trl", "datasets", "peft",
)


class BundleError(RuntimeError):
    """The bundle cannot be packed or unpacked as it is; the message names the file and what to do."""


def sha256_file(path: str | Path, chunk: int = 8 * MIB) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _files_under(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` by its path relative to ``root`` (POSIX)."""
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


def _size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.is_dir() else root.stat().st_size


def tree_bytes(repo: Path = REPO) -> int:
    """Bytes of what every device call sends besides ``carry``: tracked and untracked-not-ignored files (with the
    content they have now) and ``shared/`` when the checkout has one."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                                capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise BundleError(f"{repo}: cannot list the working tree with git ({exc}); give --tree-mib") from None
    paths = {repo / name for name in listed.decode("utf-8", "surrogateescape").split("\0") if name}
    shared = repo / "shared"
    if shared.is_dir():
        paths.update(shared.rglob("*"))
    return sum(p.stat().st_size for p in paths if p.is_file() and not p.is_symlink())


def _version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


# --- pack (here) --------------------------------------------------------------------------------------------------


def cast_to_bf16(src: Path, dst: Path) -> dict[str, Any]:
    """Write ``src`` (safetensors) with every floating tensor cast to bfloat16 as torch casts (round to nearest
    even), the keys and the file's metadata kept. Returns what was cast."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    tensors, dtypes = {}, {}
    with safe_open(str(src), framework="pt") as f:
        metadata = f.metadata() or {}
        for key in f.keys():
            t = f.get_tensor(key)
            name = str(t.dtype).removeprefix("torch.")
            dtypes[name] = dtypes.get(name, 0) + 1
            tensors[key] = t.to(torch.bfloat16).contiguous() if t.is_floating_point() else t
    save_file(tensors, str(dst), metadata={**metadata, "format": metadata.get("format", "pt")})
    return {"tensors": len(tensors), "source_dtypes": dtypes,
            "parameters": int(sum(t.numel() for t in tensors.values()))}


def _compress(src: Path, dst: Path, preset: int) -> str:
    """xz-compress ``src`` into ``dst``; returns the sha256 of the compressed bytes."""
    digest = hashlib.sha256()
    compressor = lzma.LZMACompressor(format=lzma.FORMAT_XZ, preset=preset)
    with open(src, "rb") as f, open(dst, "wb") as out:
        while block := f.read(4 * MIB):
            data = compressor.compress(block)
            digest.update(data)
            out.write(data)
        data = compressor.flush()
        digest.update(data)
        out.write(data)
    return digest.hexdigest()


def _split(stream: Path, first: int, rest: int, dest: Callable[[int], Path]) -> list[dict[str, Any]]:
    """Cut ``stream`` into a part of ``first`` bytes, then parts of ``rest`` bytes; ``dest(i)``: part i's path."""
    parts, index = [], 0
    with open(stream, "rb") as f:
        while True:
            block = f.read(first if index == 0 else rest)
            if not block:
                break
            path = dest(index)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(block)
            parts.append({"name": path.name, "call": path.parent.name, "bytes": len(block),
                          "sha256": hashlib.sha256(block).hexdigest()})
            index += 1
    return parts


def download_wheels(dest: Path, wheels: Sequence[tuple[str, str]] = WHEELS, *, python: str = sys.executable,
                    log: Log = print) -> None:
    """Fetch the pinned wheels for CPython 3.12 on manylinux x86-64 (one ``pip download`` per package, no
    dependencies: :data:`WHEELS` is the whole list) and build the sdist-only ones; writes constraints.txt."""
    dest.mkdir(parents=True, exist_ok=True)
    platform_args = [a for p in PLATFORMS for a in ("--platform", p)]
    for name, version in wheels:
        spec = f"{name}=={version}"
        if name in BUILT_HERE:
            cmd = [python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), spec]
        else:
            cmd = [python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
                   "3.12", "--implementation", "cp", *platform_args, "-d", str(dest), spec]
        log(f"wheel {spec}")
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise BundleError(f"pip could not fetch {spec} for CPython 3.12 manylinux x86-64: "
                              f"{(done.stderr or done.stdout).strip()[-800:]}")
    (dest / "constraints.txt").write_text("".join(f"{n}=={v}\n" for n, v in wheels), encoding="utf-8")


def _check_wheels(wheels_dir: Path, wheels: Sequence[tuple[str, str]]) -> None:
    """One wheel per pinned package, at its version, and nothing else (two versions stop the whole install)."""
    found: dict[str, list[str]] = {}
    for path in wheels_dir.glob("*.whl"):
        name, version = path.name.split("-")[:2]
        found.setdefault(_norm(name), []).append(version)
    problems = []
    for name, version in wheels:
        have = found.pop(_norm(name), [])
        if have != [version]:
            problems.append(f"{name}: want {version}, found {have or 'none'}")
    problems += [f"{name}: not pinned ({versions})" for name, versions in found.items()]
    if problems:
        raise BundleError(f"{wheels_dir}: the wheels do not match the pins: " + "; ".join(problems))


def _norm(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def pack(model_dir: Path = MODEL_DIR, out: Path = BUNDLE_DIR, *, nltk_data: Path | None = NLTK_DATA,
         wheels_from: Path | None = None, wheels: Sequence[tuple[str, str]] = WHEELS, download: bool = True,
         limit: int = LIMIT_BYTES, margin: int = MARGIN_BYTES, tree: int | None = None, part_bytes: int | None = None,
         preset: int = XZ_PRESET, log: Log = print) -> dict[str, Any]:
    """Write the bundle (see the module docstring) into ``out``, replacing what was there; returns the manifest.

    ``wheels_from``: a folder of wheels to take instead of downloading (``download=False`` and no folder: no wheels,
    for tests). ``tree``: bytes of the working tree (default: measured with git). ``part_bytes``: what each call
    may carry (default ``limit - tree - margin``); the first call's extras come out of its part."""
    model_dir, out = Path(model_dir), Path(out)
    weights = model_dir / WEIGHTS
    if not (model_dir / "config.json").is_file() or not weights.is_file():
        raise BundleError(f"{model_dir}: no config.json or {WEIGHTS} (build the base first: make install)")
    tree = tree_bytes() if tree is None else tree
    capacity = part_bytes if part_bytes is not None else limit - tree - margin
    if capacity <= 0:
        raise BundleError(f"the working tree ({tree / MIB:.1f} MiB) leaves no room under {limit / MIB:.0f} MiB")
    t0 = time.perf_counter()
    work = out.with_name(out.name + ".packing")
    shutil.rmtree(work, ignore_errors=True)
    first = work / "call1"
    (first / "meta").mkdir(parents=True)
    try:
        for path in sorted(model_dir.iterdir()):
            if path.is_file() and path.suffix != ".safetensors":
                shutil.copy2(path, first / "meta" / path.name)
        if nltk_data is not None:
            if not (nltk_data / "tokenizers" / "punkt_tab" / "english").is_dir():
                raise BundleError(f"{nltk_data}: no punkt_tab/english (make install writes it; IFEval needs it)")
            shutil.copytree(nltk_data, first / "nltk_data")
        if wheels_from is not None:
            shutil.copytree(wheels_from, first / "wheels")
        elif download:
            download_wheels(first / "wheels", wheels, log=log)
        if (first / "wheels").is_dir():
            _check_wheels(first / "wheels", wheels)
        source_sha = sha256_file(weights)
        log(f"casting {weights} ({weights.stat().st_size / MIB:.1f} MiB) to bfloat16")
        cast_file = work / WEIGHTS
        cast = cast_to_bf16(weights, cast_file)
        model_sha, model_bytes = sha256_file(cast_file), cast_file.stat().st_size
        log(f"compressing ({model_bytes / MIB:.1f} MiB, xz -{preset})")
        stream = work / (WEIGHTS + ".xz")
        stream_sha = _compress(cast_file, stream, preset)
        cast_file.unlink()
        extras = _size(first) + 64 * 1024  # and the manifest
        if capacity - extras <= 0:
            raise BundleError(f"call 1's extras ({extras / MIB:.1f} MiB) leave no room for a part in "
                              f"{capacity / MIB:.1f} MiB")
        parts = _split(stream, capacity - extras, capacity, lambda i: work / f"call{i + 1}" / f"part-{i:02d}")
        stream_bytes = stream.stat().st_size
        stream.unlink()
        calls = []
        for part in parts:
            folder = work / part["call"]
            calls.append({"call": part["call"], "carry": [f"var/gpu_bundle/{part['call']}"],
                          "bytes": _size(folder) + (64 * 1024 if part["call"] == "call1" else 0)})
        manifest = {
            "format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "source": {"dir": _shown(model_dir), "weights_sha256": source_sha,
                       "build": _json_or_none(model_dir / "build.json")},
            "model": {"file": WEIGHTS, "dtype": "bfloat16", "bytes": model_bytes, "sha256": model_sha,
                      "cast": "torch .to(torch.bfloat16), round to nearest even: what from_pretrained(dtype="
                              "torch.bfloat16) makes of the float32 build", **cast},
            "stream": {"format": "xz", "preset": preset, "bytes": stream_bytes, "sha256": stream_sha},
            "parts": parts,
            "meta": _files_under(first / "meta"),
            "nltk_data": _files_under(first / "nltk_data") if (first / "nltk_data").is_dir() else {},
            "wheels": _files_under(first / "wheels") if (first / "wheels").is_dir() else {},
            "pins": [f"{n}=={v}" for n, v in wheels] if (first / "wheels").is_dir() else [],
            "project_versions": {name: _version(name) for name in HOST_PROVIDED},  # the packing .venv's
            "limit_bytes": limit, "tree_bytes": tree, "capacity_bytes": capacity, "calls": calls,
        }
        (first / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        work.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"packed {out} in {time.perf_counter() - t0:.0f} s")
    for line in plan_lines(manifest, tree=tree):
        log(line)
    return manifest


def _shown(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _json_or_none(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_manifest(bundle: Path = BUNDLE_DIR) -> dict[str, Any]:
    path = Path(bundle) / "call1" / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        raise BundleError(f"{path}: missing (call 1, carry var/gpu_bundle/call1, has not arrived; or run pack "
                          f"here)") from None
    except ValueError as exc:
        raise BundleError(f"{path}: unreadable ({exc}): send call 1 again") from None
    if manifest.get("format") != FORMAT:
        raise BundleError(f"{path}: format {manifest.get('format')}, this code reads {FORMAT}: pack again")
    return manifest


def plan_lines(manifest: dict[str, Any], *, tree: int) -> list[str]:
    """The calls, their carry lists and bytes against the limit, with the tree as it is now."""
    limit = manifest["limit_bytes"]
    total = sum(c["bytes"] for c in manifest["calls"]) + tree * len(manifest["calls"])
    lines = [f"base: {manifest['model']['bytes'] / MIB:.1f} MiB bfloat16 -> {manifest['stream']['bytes'] / MIB:.1f}"
             f" MiB xz in {len(manifest['parts'])} part(s); {sum(n.endswith('.whl') for n in manifest['wheels'])} "
             f"wheel(s); working tree "
             f"{tree / MIB:.1f} MiB per call; {len(manifest['calls'])} call(s), {total / MIB:.1f} MiB sent in all"]
    for i, call in enumerate(manifest["calls"], 1):
        sent = tree + call["bytes"]
        verdict = "ok" if sent <= limit else f"OVER the {limit / MIB:.0f} MiB limit: pack again with --part-mib"
        what = "unpack --check --site /tmp/site && preflight" if i == 1 else (
            "unpack --check" if i < len(manifest["calls"]) else "bash scripts/reproduce_gpu.sh")
        lines.append(f"  call {i}: carry {json.dumps(call['carry'])}: {call['bytes'] / MIB:.1f} MiB + tree = "
                     f"{sent / MIB:.1f} MiB ({verdict}); then {what}")
    return lines


# --- unpack (there) -------------------------------------------------------------------------------------------------


def _verify(path: Path, want_sha: str, want_bytes: int | None, what: str, call: str) -> str | None:
    """None when ``path`` (present) has the bytes and sha256 it must; else the problem, naming the call to send
    again."""
    size = path.stat().st_size
    if want_bytes is not None and size != want_bytes:
        return (f"{path}: {size} bytes, the manifest records {want_bytes}: {what} was cut short or damaged in "
                f"transfer; send {call} again (carry var/gpu_bundle/{call})")
    actual = sha256_file(path)
    if actual != want_sha:
        return (f"{path}: sha256 {actual}, the manifest records {want_sha}: {what} was damaged in transfer; send "
                f"{call} again (carry var/gpu_bundle/{call})")
    return None


def check(bundle: Path = BUNDLE_DIR) -> dict[str, Any]:
    """Verify what has arrived: every extra of call 1 and every part present (size and sha256). BundleError for
    anything damaged; returns the manifest and the parts present and missing."""
    bundle = Path(bundle)
    manifest = read_manifest(bundle)
    problems = []
    first = bundle / "call1"
    for kind in ("meta", "nltk_data", "wheels"):
        for name, digest in manifest[kind].items():
            path = first / kind / name
            if not path.is_file():
                problems.append(f"{path}: missing from call 1; send call1 again (carry var/gpu_bundle/call1)")
            elif (problem := _verify(path, digest, None, f"{kind}/{name}", "call1")):
                problems.append(problem)
    present, missing = [], []
    for part in manifest["parts"]:
        path = bundle / part["call"] / part["name"]
        if not path.is_file():
            missing.append(part)
            continue
        if (problem := _verify(path, part["sha256"], part["bytes"], f"part {part['name']}", part["call"])):
            problems.append(problem)
        else:
            present.append(part)
    if problems:
        raise BundleError("the bundle is damaged: " + "; ".join(problems))
    return {"manifest": manifest, "present": present, "missing": missing}


def _reassemble(bundle: Path, manifest: dict[str, Any], dst: Path) -> None:
    stream_digest, model_digest = hashlib.sha256(), hashlib.sha256()
    decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    with open(dst, "wb") as out:
        for part in manifest["parts"]:
            with open(bundle / part["call"] / part["name"], "rb") as f:
                while block := f.read(4 * MIB):
                    stream_digest.update(block)
                    data = decompressor.decompress(block)
                    model_digest.update(data)
                    out.write(data)
    stream, model = manifest["stream"], manifest["model"]
    if stream_digest.hexdigest() != stream["sha256"] or not decompressor.eof:
        raise BundleError(f"the parts joined give sha256 {stream_digest.hexdigest()}, the manifest records "
                          f"{stream['sha256']}: pack again here and send every call again")
    if model_digest.hexdigest() != model["sha256"] or dst.stat().st_size != model["bytes"]:
        raise BundleError(f"{dst}: sha256 {model_digest.hexdigest()}, the manifest records {model['sha256']}: "
                          f"pack again here")


def install_wheels(wheels_dir: Path, site: str | Path, *, python: str = sys.executable) -> None:
    """``pip install --no-index --no-deps --target site`` of every wheel in ``wheels_dir`` (no network)."""
    wheels = sorted(str(p) for p in Path(wheels_dir).glob("*.whl"))
    if not wheels:
        raise BundleError(f"{wheels_dir}: no wheels")
    done = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--no-cache-dir", "--upgrade", "--target", str(site), *wheels],
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise BundleError(f"pip could not install the wheels into {site}: {(done.stderr or done.stdout)[-1500:]}")


def unpack(bundle: Path = BUNDLE_DIR, model_dir: Path = MODEL_DIR, *, site: str | Path | None = None,
           nltk_data: Path | None = NLTK_DATA, check_only: bool = False, python: str = sys.executable,
           log: Log = print) -> dict[str, Any]:
    """Check the bundle; unless ``check_only``, reassemble the base into ``model_dir`` (kept as it is when it is
    already this bundle's), copy the punkt data to ``nltk_data`` and install the wheels into ``site`` (when given).
    BundleError names what is damaged or missing and the call to send again."""
    bundle, model_dir = Path(bundle), Path(model_dir)
    t0 = time.perf_counter()
    state = check(bundle)
    manifest = state["manifest"]
    missing = state["missing"]
    log(f"bundle: {len(state['present'])} of {len(manifest['parts'])} part(s) present and intact"
        + (f"; missing: {', '.join(p['name'] + ' (' + p['call'] + ')' for p in missing)}" if missing else ""))
    if site is not None and manifest["wheels"]:
        install_wheels(bundle / "call1" / "wheels", site, python=python)
        log(f"wheels: {len(manifest['wheels']) - ('constraints.txt' in manifest['wheels'])} installed into {site} "
            f"(export PYTHONPATH={site})")
    if nltk_data is not None and manifest["nltk_data"]:
        shutil.copytree(bundle / "call1" / "nltk_data", nltk_data, dirs_exist_ok=True)
    if check_only:
        return {"present": len(state["present"]), "missing": [p["call"] for p in missing], "model_dir": None}
    if missing:
        raise BundleError("cannot reassemble the base: " + ", ".join(
            f"{p['name']} missing (send {p['call']}: carry var/gpu_bundle/{p['call']})" for p in missing))
    record = _json_or_none(model_dir / RECORD)
    weights = model_dir / WEIGHTS
    if (record and record.get("model", {}).get("sha256") == manifest["model"]["sha256"] and weights.is_file()
            and weights.stat().st_size == manifest["model"]["bytes"]
            and sha256_file(weights) == manifest["model"]["sha256"]):
        log(f"{model_dir}: already this bundle's base")
        return {"present": len(state["present"]), "missing": [], "model_dir": str(model_dir)}
    tmp = model_dir.with_name(model_dir.name + ".unpacking")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _reassemble(bundle, manifest, tmp / WEIGHTS)
        for name in manifest["meta"]:
            shutil.copy2(bundle / "call1" / "meta" / name, tmp / name)
        (tmp / RECORD).write_text(json.dumps({
            "model": manifest["model"], "source": {k: v for k, v in manifest["source"].items() if k != "build"},
            "stream": manifest["stream"], "packed": manifest["created"],
            "unpacked": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=2) + "\n", encoding="utf-8")
        if model_dir.exists():
            shutil.rmtree(model_dir)
        tmp.rename(model_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"{model_dir}: bfloat16 base reassembled and checked (sha256 {manifest['model']['sha256'][:16]}...) in "
        f"{time.perf_counter() - t0:.1f} s")
    return {"present": len(state["present"]), "missing": [], "model_dir": str(model_dir)}


# --- the command line ---------------------------------------------------------------------------------------------


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training_jobs.reproduce.gpu_bundle",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="here: write var/gpu_bundle (base in bf16, parts, wheels, manifest)")
    p.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    p.add_argument("--out", type=Path, default=BUNDLE_DIR)
    p.add_argument("--wheels-from", type=Path, default=None, help="take the wheels from this folder, not pip")
    p.add_argument("--part-mib", type=float, default=None, help="MiB each call carries (default: 64 - tree - 6)")
    p.add_argument("--preset", type=int, default=XZ_PRESET, choices=range(10), help="xz level")
    p = sub.add_parser("plan", help="here: the calls, with the working tree measured now")
    p.add_argument("--bundle", type=Path, default=BUNDLE_DIR)
    p = sub.add_parser("unpack", help="there: check the parts, reassemble the base, install the wheels")
    p.add_argument("--bundle", type=Path, default=BUNDLE_DIR)
    p.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    p.add_argument("--site", default=None, help=f"install the wheels into this folder (e.g. {SITE})")
    p.add_argument("--check", action="store_true", help="only verify the parts that have arrived")
    p = sub.add_parser("preflight", help="there: versions, imports, CUDA, timing and the run's estimate")
    p.add_argument("--bundle", type=Path, default=BUNDLE_DIR)
    p.add_argument("--model-dir", type=Path, default=None)
    p.add_argument("--no-timing", action="store_true", help="versions and imports only (no GPU work)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        if args.command == "pack":
            pack(args.model_dir, args.out, wheels_from=args.wheels_from,
                 part_bytes=int(args.part_mib * MIB) if args.part_mib else None, preset=args.preset)
        elif args.command == "plan":
            manifest = read_manifest(args.bundle)
            for line in plan_lines(manifest, tree=tree_bytes()):
                print(line)
            weights = MODEL_DIR / WEIGHTS
            if weights.is_file() and sha256_file(weights) != manifest["source"]["weights_sha256"]:
                print(f"{weights} changed since the bundle was packed: pack again")
                return 1
        elif args.command == "unpack":
            unpack(args.bundle, args.model_dir, site=args.site, check_only=args.check)
        else:
            from training_jobs.reproduce.gpu_preflight import preflight

            preflight(args.model_dir, bundle=args.bundle, timing=not args.no_timing)
    except BundleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
