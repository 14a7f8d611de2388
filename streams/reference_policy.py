"""REFERENCE POLICY — a rule-based gold-data tool, NOT a model.

It knows the ground truth of a scenario (the room dict and the intent of each comment) and writes the gold
trajectory a good host would produce, in OpenAI chat-message format, under any manifest:

1. assistant calls ``load_skill`` with the reply skill that fits the intent;
2. tool result: the skill body exactly as :func:`harness_editor.render.render_skill_body` returns it;
3. (intents that need facts) assistant calls the manifest tool bound to the right implementation, found by
   its *binding id*, so renamed tools and reshaped argument paths still work;
4. tool result from the REAL binding (:mod:`streams.tool_bindings`, the engine's dispatcher), run on the room dict;
5. a one-sentence speakable reply built from that tool result (the exact price, stock, days or code).

It is used to make supervised training data (training_jobs.tiny_model) and to check the plumbing. It is
never served as a model and never presented as one: every trajectory it writes carries
``REFERENCE_POLICY_LABEL`` in its metadata.

Plain Python: no Django imports.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from harness_editor.render import render_prompt, render_skill_body
from harness_editor.schemas import LOAD_SKILL_TOOL, Manifest, Tool, argument_path_set

# How a reply names a product ('Barrier Repair Ceramide Moisturizer 50 ml' -> 'Barrier Repair Ceramide
# Moisturizer'): one implementation, shared with the reply rules that recognise the names.
from streams.engine.rules.entities import short_title
from streams.tool_bindings import EMPTY_RUNTIME, ToolRuntime, call_bound_tool

REFERENCE_POLICY_LABEL = "reference-policy (rule-based gold-data tool, not a model)"

Intent = Literal["price", "stock", "shipping", "coupon", "chit_chat", "compliance"]
INTENTS: tuple[Intent, ...] = ("price", "stock", "shipping", "coupon", "chit_chat", "compliance")

# Which implementation an intent needs (None: no product tool, only a reply skill).
INTENT_BINDING: dict[str, str | None] = {
    "price": "catalog.product_info",
    "stock": "catalog.stock",
    "shipping": "policy.shipping",
    "coupon": "campaign.state",
    "chit_chat": None,
    "compliance": "catalog.product_info",
}

# Words that point at a reply skill, tried against skill id and description, in order of preference.
_SKILL_HINTS: dict[str, tuple[str, ...]] = {
    "price": ("price", "stock", "deal"),
    "stock": ("stock", "price"),
    "shipping": ("shipping", "delivery", "return"),
    "coupon": ("coupon", "deal", "discount", "price"),
    "chit_chat": ("chit", "chat", "greet", "small talk"),
    "compliance": ("efficacy", "complian", "skin", "health", "work for"),
}


class ReferencePolicyError(ValueError):
    """The manifest cannot express the gold behaviour for this intent (no fitting skill or tool)."""


@dataclass(frozen=True)
class GoldComment:
    """One viewer comment with the ground truth the reference policy needs."""

    text: str
    intent: Intent
    viewer: str = "viewer"
    link_id: int | None = None  # price, stock, compliance
    region: str = ""  # shipping; "" for the default policy
    condition: str = ""  # compliance: the skin/health problem asked about


@dataclass
class GoldTrajectory:
    """Messages (system + user + the gold assistant/tool turns) and tools, exactly as the renderer makes them."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    intent: Intent
    skill_id: str
    tool_name: str | None
    tool_arguments: dict[str, Any] | None
    tool_result: dict[str, Any] | None
    reply: str
    facts: list[str]  # the exact strings (numbers, codes) the reply must state
    meta: dict[str, Any] = field(default_factory=lambda: {"source": REFERENCE_POLICY_LABEL})


# --- manifest lookups -------------------------------------------------------------------------------------


def pick_reply_skill(manifest: Manifest, intent: str) -> str:
    """The reply skill for an intent: first reply skill whose id/description matches the intent's hints."""
    reply_skills = [s for s in manifest.skills if s.kind == "reply"]
    for hint in _SKILL_HINTS[intent]:
        for s in reply_skills:
            if hint in s.id.lower():
                return s.id
        for s in reply_skills:
            if hint in s.description.lower():
                return s.id
    raise ReferencePolicyError(f"no reply skill fits intent {intent!r}")


def tool_for_binding(manifest: Manifest, binding_id: str) -> Tool:
    for t in manifest.tools:
        if t.binding == binding_id:
            return t
    raise ReferencePolicyError(f"the manifest has no tool bound to {binding_id!r}")


def tool_arguments(tool: Tool, impl_args: dict[str, Any]) -> dict[str, Any]:
    """Implementation keyword arguments → the tool's own argument shape (through ``argument_map``)."""
    out: dict[str, Any] = {}
    for impl_name, value in impl_args.items():
        path = tool.argument_map.get(impl_name)
        if path is not None:
            argument_path_set(out, path, value)
    return out


def call_tool(manifest: Manifest, room: dict[str, Any], name: str, arguments: dict[str, Any],
              tools: ToolRuntime = EMPTY_RUNTIME) -> dict[str, Any]:
    """Run a manifest tool through its REAL binding: the one dispatcher the turn engine uses
    (:func:`streams.tool_bindings.call_bound_tool`), so an unbound tool gets the fault ``unbound`` here too."""
    tool = manifest.tool(name)
    if tool is None:
        return {"error": f"unknown tool {name!r}", "code": "not_found"}
    return call_bound_tool(tool, room, arguments, tools)


# --- replies ------------------------------------------------------------------------------------------------


def num(value: Any) -> str:
    """12.0 → "12", 24.9 → "24.9" (the renderer's spoken number form)."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.6f}".rstrip("0").rstrip(".")
    return str(value)


def _reply(intent: str, comment: GoldComment, result: dict[str, Any] | None, cur: str) -> tuple[str, list[str]]:
    name = comment.viewer
    if result is not None and "error" in result:
        return (f"Sorry {name}, I could not find that link, please check the number on the card.", [])
    if intent == "price":
        assert result is not None
        title = short_title(result.get("title", ""))
        sale = result.get("flash_sale")
        if sale:
            p = num(sale["price"])
            return (f"{title} is {cur}{p} in the flash sale until minute {num(sale['ends_at_minute'])}.", [p])
        p = num(result["price"])
        return (f"{title} is {cur}{p} right now, down from {cur}{num(result.get('list_price'))}.", [p])
    if intent == "stock":
        assert result is not None
        title = short_title(result.get("title", ""))
        units = num(result["stock"])
        if result["stock"] == 0:
            return (f"{title} is sold out right now, 0 left.", [units])
        if result.get("low_stock"):
            return (f"Only {units} left of {title}, so be quick.", [units])
        return (f"We have {units} of {title} left.", [units])
    if intent == "shipping":
        assert result is not None
        where = f"to {result['region']}" if result.get("region_override") else ""
        days = str(result.get("delivery_days") or "")
        free = num(result.get("free_over"))
        text = f"Delivery {where} takes {days}, free over {cur}{free}.".replace("  ", " ")
        return (text, [days, free])
    if intent == "coupon":
        assert result is not None
        coupons = result.get("coupons") or []
        if not coupons:
            return (f"No coupons right now, {name}, but keep watching.", [])
        c = coupons[0]
        return (
            f"Use code {c['code']} for {cur}{num(c['discount'])} off orders from {cur}{num(c['min_spend'])}.",
            [str(c["code"]), num(c["discount"])],
        )
    if intent == "compliance":
        assert result is not None
        title = short_title(result.get("title", ""))
        cond = comment.condition or "that"
        return (
            f"{title} is a cosmetic, so I cannot promise it fixes {cond}; please ask a dermatologist.",
            [],
        )
    return (f"Hi {name}, welcome to the room!", [name])


# --- the policy -----------------------------------------------------------------------------------------------


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                # JSON string, as OpenAI sends it (and as datasets need it: STACK.md)
                "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
            }
        ],
    }


def _tool_msg(call_id: str, name: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def tool_result_text(result: dict[str, Any]) -> str:
    """How a tool result is put into the conversation: compact JSON."""
    return json.dumps(result, ensure_ascii=False, separators=(", ", ": "))


def gold_trajectory(manifest: Manifest, room: dict[str, Any], comment: GoldComment,
                    history: Sequence[dict[str, Any]] = ()) -> GoldTrajectory:
    """The gold turn for one comment. The room is deep-copied: bindings may mutate their room. ``history``: earlier
    turns as the preview room and live sessions send them (plain user/assistant messages, the renderer puts them
    between the system message and this comment)."""
    room = copy.deepcopy(room)
    intent = comment.intent
    rendered = render_prompt(manifest, room=room, comments=[{"viewer": comment.viewer, "text": comment.text}],
                             history=history)
    messages = list(rendered.messages)

    skill_id = pick_reply_skill(manifest, intent)
    messages.append(_call("call_0", LOAD_SKILL_TOOL, {"skill_id": skill_id}))
    body = render_skill_body(manifest, skill_id)
    assert body is not None
    messages.append(_tool_msg("call_0", LOAD_SKILL_TOOL, body))

    tool_name = None
    args = None
    result = None
    binding_id = INTENT_BINDING[intent]
    if binding_id is not None:
        tool = tool_for_binding(manifest, binding_id)
        impl_args: dict[str, Any] = {}
        if intent in ("price", "stock", "compliance"):
            if comment.link_id is None:
                raise ReferencePolicyError(f"intent {intent!r} needs a link id")
            impl_args["link_id"] = comment.link_id
        elif intent == "shipping" and comment.region:
            impl_args["region"] = comment.region
        args = tool_arguments(tool, impl_args)
        tool_name = tool.name
        messages.append(_call("call_1", tool.name, args))
        result = call_tool(manifest, room, tool.name, args)
        messages.append(_tool_msg("call_1", tool.name, tool_result_text(result)))

    reply, facts = _reply(intent, comment, result, str(room.get("currency") or ""))
    messages.append({"role": "assistant", "content": reply})
    return GoldTrajectory(
        messages=messages,
        tools=rendered.tools,
        intent=intent,
        skill_id=skill_id,
        tool_name=tool_name,
        tool_arguments=args,
        tool_result=result,
        reply=reply,
        facts=facts,
    )
