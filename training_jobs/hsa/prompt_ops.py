"""HSA operators on the system prompt (block order, layout, headings, numeric constraints) and on hooks (retry
limits, message wording, synthetic hook corrections). Split from :mod:`training_jobs.hsa.operators`."""

from __future__ import annotations

import random

from harness_editor.schemas import InteractionConstraints, RetryControlHook
from streams.engine import hooks as H
from training_jobs.hsa import names as N
from training_jobs.hsa.relabel import IDENTITY
from training_jobs.hsa.samples import Retry, Sample
from training_jobs.hsa.state import HarnessState, _edit_share, reword

# --- system prompt ------------------------------------------------------------------------------------------------------


def _reorder_prompt_blocks(state, rng, pool, s):
    blocks = list(state["prompt"]["blocks"])
    if len(blocks) > 1 and rng.random() < s["block_share"]:
        rng.shuffle(blocks)
    out = []
    for b in blocks:
        if len(b["items"]) > 1 and rng.random() < s["item_share"]:
            items = list(b["items"])
            rng.shuffle(items)
            b = {**b, "items": items}
        out.append(b)
    if out == state["prompt"]["blocks"]:
        return state, IDENTITY
    return {**state, "prompt": {**state["prompt"], "blocks": out}}, IDENTITY


def _change_prompt_layout(state, rng, pool, s):
    prompt = state["prompt"]
    layouts = [x for x in N.LAYOUTS if x != prompt["layout"]]
    layout = rng.choice(layouts) if rng.random() < s["layout_share"] else prompt["layout"]
    blocks = []
    for b in prompt["blocks"]:
        titles = [t for t in N.BLOCK_TITLES[pool].get(b["role"], ()) if t != b["title"]]
        if titles and rng.random() < s["title_share"]:
            b = {**b, "title": rng.choice(titles)}
        blocks.append(b)
    if layout == prompt["layout"] and blocks == prompt["blocks"]:
        return state, IDENTITY
    return {**state, "prompt": {"layout": layout, "blocks": blocks}}, IDENTITY


def _legal(model: type, name: str) -> tuple[int, int]:
    """The (ge, le) bounds a pydantic field declares: the harness's legal range for that number."""
    lo, hi = None, None
    for meta in model.model_fields[name].metadata:
        lo = getattr(meta, "ge", lo) if getattr(meta, "ge", None) is not None else lo
        hi = getattr(meta, "le", hi) if getattr(meta, "le", None) is not None else hi
    assert lo is not None and hi is not None, f"{model.__name__}.{name} declares no range"
    return int(lo), int(hi)


LEGAL = {n: _legal(InteractionConstraints, n)
         for n in ("reply_min_chars", "reply_max_chars", "turn_limit", "max_tool_rounds")}
LEGAL_MAX_RETRIES = _legal(RetryControlHook, "max_retries")
LEGAL_MAX_SENTENCES = (1, 20)  # ReplyFormatHook.max_sentences (an Optional field: bounds read below)


def _move_numeric_constraints(state, rng, pool, s):
    """Move the reply length range, tool rounds and the request limit within their legal ranges (bands
    around the current value). The builder re-checks each target against the new numbers."""
    c = dict(state["constraints"])
    p = s["share"]
    if rng.random() < p:
        lo = max(c["reply_min_chars"], LEGAL["reply_max_chars"][0], 40)
        hi = min(LEGAL["reply_max_chars"][1], max(lo, 2 * c["reply_max_chars"]))
        if pool == "heldout":
            options = sorted(v for v in N.HELDOUT_REPLY_MAX_CHARS if lo <= v <= hi)
            if options:
                c["reply_max_chars"] = rng.choice(options)
        else:
            value = rng.randint(lo, hi)
            while value in N.HELDOUT_REPLY_MAX_CHARS:
                value += 1
            c["reply_max_chars"] = min(value, LEGAL["reply_max_chars"][1])
    if rng.random() < p:
        c["reply_min_chars"] = rng.randint(LEGAL["reply_min_chars"][0], min(30, c["reply_max_chars"]))
    if rng.random() < p:
        c["max_tool_rounds"] = rng.randint(max(1, LEGAL["max_tool_rounds"][0]), min(6, LEGAL["max_tool_rounds"][1]))
    if rng.random() < p:
        c["turn_limit"] = rng.randint(max(2, LEGAL["turn_limit"][0]), min(10, LEGAL["turn_limit"][1]))
    if c == state["constraints"]:
        return state, IDENTITY
    return {**state, "constraints": c}, IDENTITY


# --- hooks ------------------------------------------------------------------------------------------------------------


def _vary_hook_limits(state, rng, pool, s):
    """Retry behaviour (retry_control max_retries, its fallback line; a retry_control hook is added where the
    harness relied on the default) and the reply_format sentence cap, within their legal ranges."""
    hooks = list(state["hooks"])
    retry_at = next((i for i, h in enumerate(hooks) if h["kind"] == "retry_control"), None)
    lo, hi = LEGAL_MAX_RETRIES
    if retry_at is None:
        ids = {h["id"] for h in hooks}
        hook_id = next(x for x in ("retry-policy", "retry-control", "retries") + tuple(f"retry-{i}" for i in range(60))
                       if x not in ids)
        if len(hooks) < 50:
            hooks.append({"id": hook_id, "kind": "retry_control", "enabled": True, "on_fail": "retry",
                          "message": "Fix the problems listed by the other checks and answer again.",
                          "max_retries": rng.randint(lo, hi),
                          "fallback_reply": rng.choice(N.FALLBACK_REPLIES[pool])})
    else:
        h = dict(hooks[retry_at])
        h["max_retries"] = rng.randint(lo, hi)
        if rng.random() < 0.5:
            h["fallback_reply"] = rng.choice(N.FALLBACK_REPLIES[pool])
        hooks[retry_at] = h
    for i, h in enumerate(hooks):
        if h["kind"] == "reply_format" and rng.random() < s["sentence_cap_share"]:
            cap = rng.choice((None, rng.randint(LEGAL_MAX_SENTENCES[0], min(4, LEGAL_MAX_SENTENCES[1]))))
            hooks[i] = {**h, "max_sentences": cap}
    return {**state, "hooks": hooks}, IDENTITY


def _reword_hook_messages(state, rng, pool, s):
    def reframed(message: str) -> str:
        base = reword(message, rng, pool, s["density"])
        return rng.choice(N.HOOK_MESSAGE_FRAMES[pool]).replace("{m}", base)

    return _edit_share(state, "hooks", rng, s["share"], "message", reframed, max_len=500), IDENTITY


_PADDING = (" It is one of the most loved items in the room tonight and people keep coming back for it.",
            " So many of you asked about this today, and I love how excited everyone in the room is about it.",
            " Stay with us, there is plenty more coming up in the next few minutes of the show.")


def _speakable(state: HarnessState) -> bool:
    return state["constraints"]["speakable"] or any(
        h["kind"] == "reply_format" and h["enabled"] and h.get("speakable", True) for h in state["hooks"])


def _failed_attempts(state: HarnessState, sample: Sample, rng: random.Random) -> list[str]:
    """Candidate first replies that a before-reply hook of this harness rejects (retry, not block)."""
    reply = sample.reply
    c = state["constraints"]
    enabled = {h["kind"]: h for h in state["hooks"] if h["enabled"] and h["on_fail"] == "retry"}
    blocking = {h["kind"] for h in state["hooks"] if h["enabled"] and h["on_fail"] == "block"}
    out: list[str] = []
    if _speakable(state) and "reply_format" not in blocking:
        out.append(rng.choice((f"**{reply}**", f"- {reply}", f"{reply} 😊")))
    if c["reply_max_chars"] <= 250 and "reply_format" not in blocking:  # longer padding costs the hooks more
        longer = reply
        while len(longer) <= c["reply_max_chars"]:
            longer += rng.choice(_PADDING)
        out.append(longer)
    if "banned_phrases" in enabled:
        phrase = rng.choice(enabled["banned_phrases"]["phrases"])
        out.append(f"{reply} Honestly, {phrase}!")
    if "factual_risk" in enabled and "price" in enabled["factual_risk"]["check"]:
        backed = H.backed_numbers([t.result for t in sample.tool_calls()])
        n = next(v for v in range(rng.randint(3, 60), 10_000) if float(v) not in backed)
        out.append(f"{reply} Only ${n} today.")
    return out


def _synthesise_hook_correction(state, sample: Sample, rng, pool, s):
    """A hook-triggered recovery: a first reply that a hook rejects, the hook's feedback, the gold reply.
    The feedback text is rendered from the harness (so later wording changes show); the builder re-checks
    that the attempt still fails and the retry limit allows it."""
    if any(isinstance(st, Retry) for st in sample.target):
        return sample
    attempts = _failed_attempts(state, sample, rng)
    if not attempts:
        return sample
    target = list(sample.target)
    target.insert(len(target) - 1, Retry(rng.choice(attempts)))
    return sample.with_target(tuple(target))

