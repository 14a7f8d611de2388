"""Mechanical label preservation: the rename map between two harness states, and what it does to a target.

An operator that renames a skill, a tool or a parameter, wraps arguments in an object or switches an integer id
to a digit string returns a :class:`RenameMap` from the names *before* it to the names *after* it. Maps compose
along an operator chain (:meth:`RenameMap.then`) and invert (:meth:`RenameMap.inverse`); :func:`relabel`
rewrites a target's ``load_skill`` ids, tool names and arguments with one. The invariant the tests prove::

    canonical(relabel(relabel(target, m), m.inverse())) == canonical(target)

Arguments are addressed by dotted leaf paths ("link_id", "args.link_id"), the same paths as a tool's
``argument_map``, so a wrap is a path move and nothing here knows about JSON Schema.

:func:`streams.bound_calls.implementation_arguments` is the independent check: it reads a call's arguments through the tool's
``argument_map`` exactly like :func:`streams.reference_policy.call_tool`, and coerces them as the binding does
(integer parameters that declare ``coerces_digit_strings`` accept integer-looking strings), so a relabelled call
can be shown to reach the same binding with the same implementation arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from harness_editor.schemas import Manifest, argument_path_set
from streams.bound_calls import binding_key

_EMPTY: Mapping[str, Any] = MappingProxyType({})

# Value conversions a path can carry: "str" = an integer id now travels as a digit string.
TO_STRING = "str"
TO_INT = "int"
_INVERSE_CONVERSION = {TO_STRING: TO_INT, TO_INT: TO_STRING}


def _convert(value: Any, how: str) -> Any:
    if how == TO_STRING and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if how == TO_INT and isinstance(value, str) and value.isdigit():
        return int(value)
    return value


@dataclass(frozen=True)
class RenameMap:
    """Names before → names after. ``paths`` and ``conversions`` are keyed by the tool name *before*."""

    skills: Mapping[str, str] = field(default_factory=dict)
    tools: Mapping[str, str] = field(default_factory=dict)
    paths: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # tool → {path before: path after}
    conversions: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # tool → {path before: how}
    _inverse: list = field(default_factory=list, repr=False, compare=False)  # memo (a list: frozen class)

    @property
    def empty(self) -> bool:
        return not (self.skills or self.tools or self.paths or self.conversions)

    def tool(self, name: str) -> str:
        return self.tools.get(name, name)

    def skill(self, skill_id: str) -> str:
        return self.skills.get(skill_id, skill_id)

    def path(self, tool: str, path: str) -> str:
        return self.paths.get(tool, _EMPTY).get(path, path)

    def inverse(self) -> RenameMap:
        """Names after → names before (exact: every map an operator returns is one-to-one)."""
        if self._inverse:
            return self._inverse[0]
        paths: dict[str, dict[str, str]] = {}
        for tool, moves in self.paths.items():
            paths[self.tool(tool)] = {new: old for old, new in moves.items()}
        conversions: dict[str, dict[str, str]] = {}
        for tool, conv in self.conversions.items():
            conversions[self.tool(tool)] = {self.path(tool, p): _INVERSE_CONVERSION[how] for p, how in conv.items()}
        inv = RenameMap(
            skills={new: old for old, new in self.skills.items()},
            tools={new: old for old, new in self.tools.items()},
            paths=paths,
            conversions=conversions,
        )
        self._inverse.append(inv)
        inv._inverse.append(self)
        return inv

    def then(self, later: RenameMap) -> RenameMap:
        """This map followed by ``later`` (whose keys are this map's results), as one map."""
        if later.empty:
            return self
        if self.empty:
            return later
        skills = _chain(self.skills, later.skills)
        tools = _chain(self.tools, later.tools)
        paths: dict[str, dict[str, str]] = {}
        conversions: dict[str, dict[str, str]] = {}
        for tool in set(self.paths) | set(self.conversions) | set(self.tools) | set(later.paths) | set(
                later.conversions) | set(later.tools):
            mid = self.tool(tool)
            if tool not in self.tools and tool in self.tools.values():
                continue  # this name was created by the first map (another tool was renamed to it)
            first = self.paths.get(tool, _EMPTY)
            second = later.paths.get(mid, _EMPTY)
            moved = {p: second.get(q, q) for p, q in first.items()}
            for q, r in second.items():  # paths the first map left alone
                if q not in first and q not in first.values():
                    moved[q] = r
            moved = {p: q for p, q in moved.items() if p != q}
            if moved:
                paths[tool] = moved
            conv: dict[str, str] = {}
            first_conv = self.conversions.get(tool, _EMPTY)
            second_conv = later.conversions.get(mid, _EMPTY)
            for p, how in first_conv.items():
                conv[p] = how
            inverse_first = {q: p for p, q in first.items()}
            for q, how in second_conv.items():
                p = inverse_first.get(q, q)
                if p in conv and conv[p] == _INVERSE_CONVERSION[how]:
                    del conv[p]  # switched and switched back
                else:
                    conv[p] = how
            if conv:
                conversions[tool] = conv
        return RenameMap(skills=skills, tools=tools, paths=paths, conversions=conversions)


def _chain(first: Mapping[str, str], second: Mapping[str, str]) -> dict[str, str]:
    out = {a: second.get(b, b) for a, b in first.items()}
    created = set(first.values())
    for b, c in second.items():
        if b not in first and b not in created:
            out[b] = c
    return {a: c for a, c in out.items() if a != c}


IDENTITY = RenameMap()


# --- arguments ---------------------------------------------------------------------------------------------


def leaves(args: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, value) of every non-object value and every empty object, in key order."""
    out: list[tuple[str, Any]] = []
    for key, value in args.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, Mapping) and value:
            out.extend(leaves(value, path))
        else:
            out.append((path, dict(value) if isinstance(value, Mapping) else value))
    return out


def moved_path(moves: Mapping[str, str], path: str) -> str:
    """Where ``path`` goes: its own move, else the move of its longest moved ancestor. A map's paths are the
    schema's leaf properties; an untyped object parameter (``{"type": "object"}`` without properties) is one such
    leaf, and the keys a call puts inside it travel with it (``filters.status`` -> ``args.filters.status``)."""
    hit = moves.get(path)
    if hit is not None:
        return hit
    head = path
    while "." in head:
        head, _, _ = head.rpartition(".")
        hit = moves.get(head)
        if hit is not None:
            return hit + path[len(head):]
    return path


def relabel_arguments(m: RenameMap, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments under the map (``tool`` is the name before)."""
    moves = m.paths.get(tool, _EMPTY)
    conv = m.conversions.get(tool, _EMPTY)
    if not moves and not conv:
        return dict(args)
    out: dict[str, Any] = {}
    for path, value in leaves(args):
        if path in conv:
            value = _convert(value, conv[path])
        argument_path_set(out, moved_path(moves, path), value)
    return out


# --- the independent check -----------------------------------------------------------------------------------


# implementation_arguments and binding_key: the runtime's reading of a call (streams.bound_calls), one copy for
# HSA's checks, the reply rules and evaluation.


def binding_of(manifest: Manifest, tool_name: str) -> str | None:
    t = manifest.tool(tool_name)
    return binding_key(t) if t is not None else None


def undeclared_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Argument paths a tool's JSON Schema does not declare (where an object node lists its properties), whatever
    its ``additionalProperties``: a relabelled call must put every argument where the augmented schema has it."""
    props = schema.get("properties")
    if not isinstance(props, Mapping) or not props:
        return []  # an untyped object: anything goes inside it
    out: list[str] = []
    for key, value in arguments.items():
        path = f"{prefix}.{key}" if prefix else key
        node = props.get(key)
        if not isinstance(node, Mapping):
            out.append(path)
        elif isinstance(value, Mapping):
            out.extend(undeclared_arguments(node, value, path))
    return out
