"""What a tool's call may do to the world, as far as the harness knows: read only, write, destroy, or unknown.

One reading for the editor, the review page, the importer's report and the live approval gate. Sources, first
that applies:

1. the tool's own ``annotations`` (MCP hints, carried by the importer or written in the manifest), read with MCP's
   defaults: ``readOnlyHint`` false, ``destructiveHint`` true (only meaningful when not read-only);
2. the binding, where it says so by itself: a fixture table never acts (read-only); a built-in binding of the
   live-commerce catalog is known (:data:`BUILTIN_EFFECTS`); an HTTP binding with method ``GET`` is read-only by
   HTTP's own definition of a safe method;
3. nothing: ``unknown``. MCP's default for a tool without hints is "not read-only, may be destructive", so an
   unknown tool is shown as such and is treated as destructive where that matters (the live approval gate).

Hints from a server are its claims: they decide what the console shows and asks, they are not a sandbox.
Plain Python, no Django.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness_editor.schemas.bindings import binding_kind
from harness_editor.schemas.manifest import Tool

Effect = Literal["read_only", "writes", "destructive", "unknown"]
EffectSource = Literal["annotations", "binding", "none"]

# The built-in catalog's bindings that change the room (a coupon issued, a card pinned): not destructive (nothing is
# deleted or overwritten); the others only read it. Held to streams.bindings by a test.
BUILTIN_EFFECTS: dict[str, Effect] = {
    "catalog.product_info": "read_only",
    "catalog.stock": "read_only",
    "policy.shipping": "read_only",
    "campaign.state": "read_only",
    "coupons.issue": "writes",
    "room.pin_product": "writes",
}

EFFECT_LABELS: dict[Effect, str] = {
    "read_only": "read-only",
    "writes": "writes",
    "destructive": "destructive",
    "unknown": "unknown: may be destructive",
}


@dataclass(frozen=True)
class ToolEffect:
    effect: Effect
    source: EffectSource
    why: str  # one line for pages and reports

    @property
    def read_only(self) -> bool:
        return self.effect == "read_only"

    @property
    def may_destroy(self) -> bool:
        """Destructive, or not known not to be (MCP's default for a tool without hints)."""
        return self.effect in ("destructive", "unknown")

    @property
    def label(self) -> str:
        return EFFECT_LABELS[self.effect]


def tool_effect(tool: Tool) -> ToolEffect:
    """The tool's effect (module docstring)."""
    a = tool.annotations
    if a is not None and (a.read_only is not None or a.destructive is not None):
        if a.read_only:
            return ToolEffect("read_only", "annotations", "its annotations say it is read-only")
        if a.destructive is False:
            return ToolEffect("writes", "annotations", "its annotations say it writes but destroys nothing")
        if a.destructive:
            return ToolEffect("destructive", "annotations", "its annotations say it is destructive")
        return ToolEffect("destructive", "annotations",
                          "its annotations say it is not read-only and do not say it is not destructive "
                          "(MCP's default: destructive)")
    kind = binding_kind(tool.binding)
    if kind == "fixture":
        return ToolEffect("read_only", "binding", "a fixture table answers it: nothing is called")
    if kind == "builtin" and tool.binding in BUILTIN_EFFECTS:
        effect = BUILTIN_EFFECTS[tool.binding]  # type: ignore[index]
        return ToolEffect(effect, "binding", f"the built-in binding {tool.binding} "
                          + ("only reads the room" if effect == "read_only" else "changes the room"))
    if kind == "http" and tool.binding.method == "GET":  # type: ignore[union-attr]
        return ToolEffect("read_only", "binding", "an HTTP GET (a safe method)")
    return ToolEffect("unknown", "none", "no annotations say what it does: MCP's default is that it may be "
                      "destructive")


def manifest_tool_effects(manifest) -> list[dict]:
    """Every tool of a manifest with its effect, the ones that may destroy first (the review page's list)."""
    from harness_editor.schemas.bindings import binding_label

    rows = [{"name": t.name, "binding": binding_label(t.binding) or "unbound", "effect": e.effect, "label": e.label,
             "why": e.why, "may_destroy": e.may_destroy, "title": t.annotations.title if t.annotations else None,
             "output_schema": t.output_schema is not None}
            for t in manifest.tools for e in [tool_effect(t)]]
    order = {"destructive": 0, "unknown": 1, "writes": 2, "read_only": 3}
    return sorted(rows, key=lambda r: order[r["effect"]])
