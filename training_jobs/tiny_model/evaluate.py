"""Held-out evaluation of a tiny model on the REAL rendered prompts (the served chat template, not the
training variant).

For each held-out gold trajectory (reference policy, held-out phrasings, viewer names and link ids) the model
is asked for every assistant step with the gold history before it (teacher-forced prefix, greedy decoding):

- ``well_formed_tool_calls``: of the steps where the gold answer is a tool call, the share where the model
  wrote one ``<tool_call>{json}</tool_call>`` naming a tool from the request's tool list with an object of
  arguments;
- ``right_tool_and_link_id``: of the product-tool steps (price, stock, compliance), the share with the gold
  tool name and the exact gold link id;
- ``exact_value_replies``: of the final replies whose gold states a price or stock, the share that contain
  that exact number (as the reply states it) from the tool result;
- ``right_tool_and_link_id_by_link``: the same, only where the comment gives the link id;
- ``right_link_id_by_name``: the same, only where the viewer named the product ("the serum") and the model had
  to find its link id in the room block;
- ``right_skill``: share of ``load_skill`` steps loading the gold reply skill (extra figure);
- ``end_to_end_exact``: free-running turns (no gold history): the model's own tool calls are executed (skill
  bodies from the renderer, tools through the real bindings) for up to 4 rounds; share of price/stock turns
  whose final reply states the exact number (extra figure, the one a viewer would notice).

Each figure is per demo manifest (``harness``): the tiny room, and the flagship glow-gadget versions, whose held-out
samples carry earlier turns in a share of them as the preview room sends them (only the last comment's steps are
scored).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PRODUCT_INTENTS = ("price", "stock", "compliance")
TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
THINK_RE = re.compile(r"<think>.*?</think>\s*", re.S)


@dataclass
class ParsedOutput:
    text: str  # visible text (think block and tool calls removed)
    tool_calls: list[dict[str, Any]]  # {"name", "arguments"} per well-formed call
    malformed: int  # tool-call blocks that did not parse


def parse_output(raw: str) -> ParsedOutput:
    raw = raw.replace("<|im_end|>", "").replace("<|endoftext|>", "")
    raw = THINK_RE.sub("", raw)
    if "<think>" in raw and "</think>" not in raw:  # unclosed think block: nothing visible
        raw = raw.split("<think>")[0]
    calls, bad = [], 0
    for block in TOOL_CALL_RE.findall(raw):
        try:
            obj = json.loads(block)
        except json.JSONDecodeError:
            bad += 1
            continue
        args = obj.get("arguments") if isinstance(obj, dict) else None
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not isinstance(args, dict):
            bad += 1
            continue
        calls.append({"name": obj["name"], "arguments": args})
    if "<tool_call>" in raw and not TOOL_CALL_RE.search(raw):
        bad += 1
    text = TOOL_CALL_RE.sub("", raw).strip()
    return ParsedOutput(text=text, tool_calls=calls, malformed=bad)


class Generator:
    """Greedy generation with a local checkpoint through its own (served) chat template."""

    def __init__(self, model_dir: str | Path, threads: int | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_new_tokens: int = 80) -> str:
        enc = self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        with self.torch.no_grad():
            out = self.model.generate(
                **enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=self.tokenizer.pad_token_id
            )
        return self.tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=False)


class ServedGenerator:
    """The same greedy generation through a running OpenAI-compatible server (vLLM: a 135M model's 2,000-token
    prompt is a prefix-cache hit after the first request, where in-process generation pays for it every step).
    The prompt is rendered here with the checkpoint's own template and sent as raw text to ``/completions``, so
    the server sees exactly what :class:`Generator` would feed the model, and the raw output (tool-call blocks and
    all) comes back unparsed."""

    def __init__(self, base_url: str, model: str, tokenizer_dir: str | Path, timeout: float = 300.0):
        from transformers import AutoTokenizer

        self.url, self.model, self.timeout = f"{base_url.rstrip('/')}/completions", model, timeout
        self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_new_tokens: int = 80) -> str:
        import httpx

        prompt = self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        response = httpx.post(self.url, timeout=self.timeout, json={
            "model": self.model, "prompt": prompt, "max_tokens": max_new_tokens, "temperature": 0,
            "skip_special_tokens": False, "stop": ["<|im_end|>"], "include_stop_str_in_output": True})
        response.raise_for_status()
        return response.json()["choices"][0]["text"]


def run_turn(gen: Generator | ServedGenerator, manifest, room: dict[str, Any], messages: list[dict[str, Any]],
             tools: list[dict[str, Any]], max_rounds: int = 4) -> str:
    """Free-running agent loop with the model's own calls; returns the final visible reply ("" if none)."""
    import copy

    from harness_editor.render import render_skill_body
    from streams.reference_policy import call_tool, tool_result_text

    room = copy.deepcopy(room)
    messages = list(messages)
    for r in range(max_rounds):
        parsed = parse_output(gen(messages, tools))
        if not parsed.tool_calls:
            return parsed.text
        call = parsed.tool_calls[0]
        cid = f"call_{r}"
        messages.append({"role": "assistant", "content": "", "tool_calls": [{"id": cid, "type": "function",
                         "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]})
        if call["name"] == "load_skill":
            body = render_skill_body(manifest, str(call["arguments"].get("skill_id")))
            content = body if body is not None else tool_result_text({"error": "unknown skill", "code": "not_found"})
        else:
            content = tool_result_text(call_tool(manifest, room, call["name"], call["arguments"]))
        messages.append({"role": "tool", "tool_call_id": cid, "name": call["name"], "content": content})
    return ""


def _states(text: str, facts: list[str]) -> bool:
    from streams.engine.rules.judge import states  # the one reading of a stated fact

    return all(states(text, f) for f in facts)


def evaluate(model_dir: str | Path, n: int = 60, seed: int = 0, threads: int | None = None,
             split: str = "heldout", gen: Generator | ServedGenerator | None = None,
             harness: str = "tiny_room") -> dict[str, Any]:
    """Held-out figures on one demo manifest (``harness``: ``tiny_room``, ``skincare_v1``, …), each on its own
    random stream of the gold generator (the tiny room's is the one every stage was measured on)."""
    from training_jobs.tiny_model.gold import generate_harness, load_demo_manifest

    gen = gen or Generator(model_dir, threads)
    trajs = generate_harness(harness, n, seed=seed, split=split)  # type: ignore[arg-type]
    wf_num = wf_den = tl_num = tl_den = ev_num = ev_den = sk_num = sk_den = 0
    by_name_num = by_name_den = 0
    examples = []
    for t in trajs:
        tool_names = {tool["function"]["name"] for tool in t.tools}
        comment_at = max(i for i, m in enumerate(t.messages) if m["role"] == "user")  # after any history
        for i, msg in enumerate(t.messages):
            if msg["role"] != "assistant" or i < comment_at:
                continue
            raw = gen(t.messages[:i], t.tools)
            parsed = parse_output(raw)
            gold_calls = msg.get("tool_calls") or []
            if gold_calls:
                gold = gold_calls[0]["function"]
                gold_args = json.loads(gold["arguments"])
                wf_den += 1
                ok = (
                    parsed.malformed == 0
                    and len(parsed.tool_calls) >= 1
                    and parsed.tool_calls[0]["name"] in tool_names
                )
                wf_num += ok
                call = parsed.tool_calls[0] if parsed.tool_calls else None
                if gold["name"] == "load_skill":
                    sk_den += 1
                    sk_num += bool(call and call["name"] == "load_skill" and call["arguments"] == gold_args)
                elif t.intent in PRODUCT_INTENTS:  # the product tool (its argument may be named item_id)
                    tl_den += 1
                    right = bool(call and call["name"] == gold["name"] and call["arguments"] == gold_args)
                    tl_num += right
                    if t.meta.get("mention") == "name":
                        by_name_den += 1
                        by_name_num += right
            else:
                numeric = t.intent in ("price", "stock") and t.facts
                if numeric:
                    ev_den += 1
                    ev_num += _states(parsed.text, t.facts)
                if len(examples) < 8:
                    examples.append({"comment": t.meta["comment"], "gold": msg["content"], "model": parsed.text})

    manifest = load_demo_manifest(harness)
    e2e_num = e2e_den = 0
    for t in trajs:
        if t.intent in ("price", "stock") and t.facts:
            e2e_den += 1
            first = next(i for i, m in enumerate(t.messages) if m["role"] == "assistant")  # system, history, comment
            reply = run_turn(gen, manifest, t.meta["room"], t.messages[:first], t.tools)
            e2e_num += _states(reply, t.facts)

    def share(a: int, b: int) -> float | None:
        return round(a / b, 3) if b else None

    return {
        "split": split,
        "harness": harness,
        "heldout_trajectories": len(trajs),
        "with_history": sum(1 for t in trajs if t.meta.get("history_turns")),
        "well_formed_tool_calls": share(wf_num, wf_den),
        "right_tool_and_link_id": share(tl_num, tl_den),
        "right_tool_and_link_id_by_link": share(tl_num - by_name_num, tl_den - by_name_den),
        "right_link_id_by_name": share(by_name_num, by_name_den),
        "exact_value_replies": share(ev_num, ev_den),
        "right_skill": share(sk_num, sk_den),
        "end_to_end_exact": share(e2e_num, e2e_den),
        "counts": {
            "end_to_end_turns": e2e_den,
            "tool_call_steps": wf_den,
            "product_tool_steps": tl_den,
            "product_named_steps": by_name_den,
            "numeric_replies": ev_den,
            "load_skill_steps": sk_den,
        },
        "examples": examples,
        "protocol": "held-out phrasings, viewer names and link ids; gold history before each step; greedy; "
        "served qwen3 chat template",
    }


def main(argv: list[str] | None = None) -> None:
    import argparse
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(description="Evaluate a tiny model on held-out gold turns.")
    p.add_argument("model_dir")
    p.add_argument("-n", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None)
    p.add_argument("--harness", default="tiny_room", help="demo manifest: tiny_room, skincare_v1, …")
    p.add_argument("--split", default="heldout")
    a = p.parse_args(argv)
    res = evaluate(a.model_dir, a.n, a.seed, a.threads, split=a.split, harness=a.harness)
    text = json.dumps(res, indent=2)
    if a.out:
        Path(a.out).write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
