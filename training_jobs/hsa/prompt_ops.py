"""HSA operators on the system prompt (block order, layout, headings, numeric constraints) and on hooks (retry
limits, message wording, synthetic hook corrections). Split from :mod:`training_jobs.hsa.operators`."""

from __future__ import annotations

import random
from dataclasses import dataclass

from harness_editor.schemas import InteractionConstraints, RetryControlHook
from streams.engine import hooks as H
from training_jobs.hsa import names as N
from training_jobs.hsa.relabel import IDENTITY
from training_jobs.hsa.samples import Reply, Retry, Sample
from training_jobs.hsa.state import HarnessState, _edit_share, reword
from training_jobs.hsa.vocabulary import is_live_commerce

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


@dataclass(frozen=True)
class Needs:
    """What the gold turns a harness variant serves need from its numbers: a numeric move stays where every one
    of them stays legal (the move reads no sample itself: the builder passes the needs of the samples that share
    the variant, :func:`needs_of` merged)."""

    rounds: int = 0  # tool rounds: skill loads + tool calls
    requests: int = 1  # model requests: rounds + retries + the reply
    retries: int = 0
    longest_reply: int = 0
    shortest_reply: int | None = None
    sentences: int = 0

    def merge(self, other: Needs) -> Needs:
        short = [x for x in (self.shortest_reply, other.shortest_reply) if x is not None]
        return Needs(max(self.rounds, other.rounds), max(self.requests, other.requests),
                     max(self.retries, other.retries), max(self.longest_reply, other.longest_reply),
                     min(short) if short else None, max(self.sentences, other.sentences))


def needs_of(sample: Sample, *, extra_retry: bool = False) -> Needs:
    """The needs of one sample's target (``extra_retry``: a hook correction may add one retry to it)."""
    rounds = sum(1 for st in sample.target if not isinstance(st, (Retry, Reply)))
    retries = sum(1 for st in sample.target if isinstance(st, Retry)) + int(extra_retry)
    reply = sample.reply
    return Needs(rounds, rounds + retries + 1, retries, len(reply), len(reply), H.count_sentences(reply))


_NO_NEEDS = Needs()


def _move_numeric_constraints(state, rng, pool, s, needs: Needs | None = None):
    """Move the reply length range, tool rounds and the request limit within their legal ranges (bands
    around the current value), never below what the gold turns need (``needs``): a move never makes a gold turn
    illegal. The builder still re-checks each target against the new numbers."""
    n = needs or _NO_NEEDS
    c = dict(state["constraints"])
    p = s["share"]
    if rng.random() < p:
        lo = max(c["reply_min_chars"], LEGAL["reply_max_chars"][0], 40, n.longest_reply)
        hi = min(LEGAL["reply_max_chars"][1], max(lo, 2 * c["reply_max_chars"]))
        if lo > hi:
            pass  # no legal value fits the gold replies: leave it
        elif pool == "heldout":
            options = sorted(v for v in N.HELDOUT_REPLY_MAX_CHARS if lo <= v <= hi)
            if options:
                c["reply_max_chars"] = rng.choice(options)
        else:
            value = rng.randint(lo, hi)
            while value in N.HELDOUT_REPLY_MAX_CHARS:
                value += 1
            c["reply_max_chars"] = min(value, LEGAL["reply_max_chars"][1])
    if rng.random() < p:
        hi = min(30, c["reply_max_chars"], n.shortest_reply if n.shortest_reply is not None else 30)
        if hi >= LEGAL["reply_min_chars"][0]:
            c["reply_min_chars"] = rng.randint(LEGAL["reply_min_chars"][0], hi)
    if rng.random() < p:
        lo = max(1, LEGAL["max_tool_rounds"][0], n.rounds)
        c["max_tool_rounds"] = rng.randint(lo, max(lo, min(6, LEGAL["max_tool_rounds"][1])))
    if rng.random() < p:
        lo = max(2, LEGAL["turn_limit"][0], n.requests)
        c["turn_limit"] = rng.randint(lo, max(lo, min(10, LEGAL["turn_limit"][1])))
    if c == state["constraints"]:
        return state, IDENTITY
    return {**state, "constraints": c}, IDENTITY


# --- hooks ------------------------------------------------------------------------------------------------------------


def _fallbacks(state: HarnessState, pool: N.Pool) -> tuple[str, ...]:
    return N.FALLBACK_REPLIES[pool] if is_live_commerce(state) else N.GENERIC_FALLBACK_REPLIES[pool]


def _vary_hook_limits(state, rng, pool, s, needs: Needs | None = None):
    """Retry behaviour (retry_control max_retries, its fallback line; a retry_control hook is added where the
    harness relied on the default) and the reply_format sentence cap, within their legal ranges and never below
    what the gold turns need (``needs``: their retries and sentences)."""
    n = needs or _NO_NEEDS
    hooks = list(state["hooks"])
    retry_at = next((i for i, h in enumerate(hooks) if h["kind"] == "retry_control"), None)
    lo, hi = LEGAL_MAX_RETRIES
    lo = min(max(lo, n.retries), hi)
    fallbacks = _fallbacks(state, pool)
    if retry_at is None:
        ids = {h["id"] for h in hooks}
        hook_id = next(x for x in ("retry-policy", "retry-control", "retries") + tuple(f"retry-{i}" for i in range(60))
                       if x not in ids)
        if len(hooks) < 50:
            hooks.append({"id": hook_id, "kind": "retry_control", "enabled": True, "on_fail": "retry",
                          "message": "Fix the problems listed by the other checks and answer again.",
                          "max_retries": rng.randint(lo, hi),
                          "fallback_reply": rng.choice(fallbacks)})
    else:
        h = dict(hooks[retry_at])
        h["max_retries"] = rng.randint(lo, hi)
        if rng.random() < 0.5:
            h["fallback_reply"] = rng.choice(fallbacks)
        hooks[retry_at] = h
    for i, h in enumerate(hooks):
        if h["kind"] == "reply_format" and rng.random() < s["sentence_cap_share"]:
            cap_lo = min(max(LEGAL_MAX_SENTENCES[0], n.sentences), LEGAL_MAX_SENTENCES[1])
            cap = rng.choice((None, rng.randint(cap_lo, max(cap_lo, min(4, LEGAL_MAX_SENTENCES[1])))))
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


_GENERIC_PADDING = (" I hope this helps, and please do not hesitate to write again if anything else comes up.",
                    " Thank you for your patience while I looked into this for you, I really appreciate it.",
                    " Let me know if there is anything else at all that I can do for you today.")


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
        padding = _PADDING if is_live_commerce(state) else _GENERIC_PADDING
        while len(longer) <= c["reply_max_chars"]:
            longer += rng.choice(padding)
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

