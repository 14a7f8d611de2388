"""The diff inside a tool's parameter schema, at any depth.

Walks both schemas side by side through ``properties``, ``items`` (and the draft-07 list form), ``prefixItems``,
``additionalProperties``, ``patternProperties``, ``anyOf`` / ``oneOf`` / ``allOf`` branches and local ``$ref``
(resolved into ``$defs`` / ``definitions``; the change is reported where the reference is used, under
``["$ref"]``, the way validation errors name it). Each change carries the schema path of the keyword that changed,
in the editor's path style: ``tools[find_orders].parameters.properties.items.items.properties.sku.type``.

A change is *breaking* when arguments a caller could send before may be refused now (the schema narrowed) or
mean nothing to the tool any more: a property removed, a new required property (at any depth: a caller that sends
the enclosing object breaks), a type narrowed, an enum value removed, a bound tightened, a pattern or format
added. Widening is not breaking: an optional property added, an enum widened, a bound loosened, a type widened
(``integer`` → ``number``, ``string`` → ``[string, null]``); neither are descriptions, titles, defaults and other
annotations. Composition branches are paired by likeness (:mod:`.matching`), not position.
"""

from __future__ import annotations

import json
from typing import Any

from harness_editor.diff.changes import Change, join_path, short, text_diff
from harness_editor.diff.matching import pair_by_score, schema_similarity
from harness_editor.schemas.tool_schema import local_ref_target

# Keywords that only describe: a change to them never breaks a caller.
ANNOTATIONS = frozenset({"title", "examples", "default", "$comment", "deprecated", "readOnly", "writeOnly",
                         "$schema", "$id", "$anchor", "contentMediaType", "contentEncoding"})
LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains")
UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains")
_DEFS = ("$defs", "definitions")
_HANDLED = frozenset({
    "type", "enum", "const", "description", "properties", "required", "items", "prefixItems",
    "additionalProperties", "patternProperties", "anyOf", "oneOf", "allOf", "$ref", *_DEFS,
    "pattern", "format", "multipleOf", "uniqueItems", "nullable", *LOWER_BOUNDS, *UPPER_BOUNDS, *ANNOTATIONS,
})
_MAX_DEPTH = 64


# --- what a schema accepts ---------------------------------------------------------------------------------


def _type_set(node: dict[str, Any]) -> frozenset[str] | None:
    t = node.get("type")
    if isinstance(t, str):
        return frozenset({t})
    if isinstance(t, list):
        return frozenset(str(x) for x in t)
    return None


def accepted_types(node: Any) -> frozenset[str] | None:
    """The JSON types a schema admits (None: any). ``type`` when present, else the union of its ``anyOf`` /
    ``oneOf`` branches when every branch names its types."""
    if not isinstance(node, dict):
        return None if node is not False else frozenset()
    own = _type_set(node)
    if own is not None:
        return own
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list) and branches:
            sets = [accepted_types(b) for b in branches]
            if all(s is not None for s in sets):
                return frozenset().union(*sets)  # type: ignore[arg-type]
    return None


def widens(old: frozenset[str] | None, new: frozenset[str] | None) -> bool:
    """Does ``new`` admit every type ``old`` did? (``number`` admits ``integer``.)"""
    if new is None:
        return True
    if old is None:
        return False
    return all(t in new or (t == "integer" and "number" in new) for t in old)


def _permissive(node: Any) -> bool:
    return node is True or node == {}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    """Equal, and in the same order (a dict's ``==`` ignores the order of ``properties``)."""
    return a == b and json.dumps(a, default=str) == json.dumps(b, default=str)


def _has_ref(node: Any) -> bool:
    return '"$ref"' in json.dumps(node, sort_keys=True, default=str)


def _resolve(root: Any, ref: str) -> Any:
    """The schema (an object or a boolean) a local ``$ref`` points to, or None."""
    node = local_ref_target(root, ref)
    return node if isinstance(node, (dict, bool)) else None


_NOT_ASSERTIONS = ANNOTATIONS | {"description", "anyOf", "oneOf", "allOf", *_DEFS}


def _lift(o: dict[str, Any], n: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A schema wrapped into alternatives on one side only — ``{type: string}`` → ``{anyOf: [{type: string},
    {type: null}]}`` — is compared as the one-branch ``anyOf`` it was (or became): the old schema pairs with its
    branch, and only the added (or removed) alternatives are changes, not a type removed and a branch added."""
    for key in ("anyOf", "oneOf"):
        if isinstance(n.get(key), list) and key not in o:
            moved = {k: v for k, v in o.items() if k not in _NOT_ASSERTIONS and k not in n}
            if moved:
                o = {**{k: v for k, v in o.items() if k not in moved}, key: [moved]}
        elif isinstance(o.get(key), list) and key not in n:
            moved = {k: v for k, v in n.items() if k not in _NOT_ASSERTIONS and k not in o}
            if moved:
                n = {**{k: v for k, v in n.items() if k not in moved}, key: [moved]}
    return o, n


# --- the walk ------------------------------------------------------------------------------------------------


class _SchemaWalk:
    def __init__(self, tool: str, old_root: Any, new_root: Any):
        self.tool = tool
        self.old_root, self.new_root = old_root, new_root
        o_defs = {k: old_root.get(k) for k in _DEFS} if isinstance(old_root, dict) else {}
        n_defs = {k: new_root.get(k) for k in _DEFS} if isinstance(new_root, dict) else {}
        # With the same definitions on both sides, equal sub-schemas are equal even when they hold a $ref.
        self.defs_equal = o_defs == n_defs
        self.out: list[Change] = []

    # reporting

    def add(self, kind: str, path: str, summary: str, breaking: bool, before: Any = None, after: Any = None,
            diff: list[str] | None = None) -> None:
        self.out.append(Change(component="tool", kind=kind, key=self.tool, path=path, breaking=breaking,
                               summary=f"tool '{self.tool}': {summary}", before=before, after=after,
                               text_diff=diff or []))

    @staticmethod
    def what(label: str) -> str:
        return f"parameter '{label}'" if label else "parameters"

    @staticmethod
    def sub(label: str, part: str) -> str:
        """A readable parameter label for summaries: ``items[].sku``, ``tags{*}``, ``contact<anyOf[1]>.number``."""
        if part.startswith(("[", "{", "<")):
            return f"{label}{part}"
        name = part.removeprefix(".")
        return f"{label}.{name}" if label else name

    # dereferencing

    def deref(self, node: Any, root: Any, seen: frozenset[str]) -> tuple[Any, frozenset[str], str | None]:
        """A node with a local ``$ref`` resolved (its own other keywords laid over the target)."""
        if not isinstance(node, dict):
            return node, seen, None
        ref = node.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#") or ref in seen:
            return node, seen, None
        target = _resolve(root, ref)
        if target is None:
            return node, seen, None
        if isinstance(target, bool):
            return target, seen | {ref}, ref
        merged = {**{k: v for k, v in target.items() if k not in _DEFS},
                  **{k: v for k, v in node.items() if k != "$ref"}}
        return merged, seen | {ref}, ref

    # one node

    def node(self, o: Any, n: Any, path: str, label: str, o_seen: frozenset[str] = frozenset(),
             n_seen: frozenset[str] = frozenset(), depth: int = 0) -> None:
        if _same(o, n) and (self.defs_equal or not _has_ref(o)):
            return
        if depth > _MAX_DEPTH:
            self.add("changed", path, f"{self.what(label)} schema changed", True, o, n)
            return
        o_ref = o.get("$ref") if isinstance(o, dict) else None
        n_ref = n.get("$ref") if isinstance(n, dict) else None
        o, o_seen, o_res = self.deref(o, self.old_root, o_seen)
        n, n_seen, n_res = self.deref(n, self.new_root, n_seen)
        if o_res or n_res:
            if o_ref != n_ref and o_res and n_res:
                self.add("changed", join_path(path, "$ref"),
                         f"{self.what(label)} refers to {short(n_ref)} instead of {short(o_ref)}", False, o_ref, n_ref)
            path = join_path(path, "$ref")
            if _same(o, n) and (self.defs_equal or not _has_ref(o)):
                return
        if not isinstance(o, dict) or not isinstance(n, dict):
            if o != n:
                self.add("changed", path, f"{self.what(label)} schema {short(o)} → {short(n)}",
                         not (_permissive(n) or o is False), o, n)
            return
        o, n = _lift(o, n)
        self.types(o, n, path, label)
        self.values(o, n, path, label)
        self.bounds(o, n, path, label)
        self.annotations(o, n, path, label)
        self.properties(o, n, path, label, o_seen, n_seen, depth)
        self.arrays(o, n, path, label, o_seen, n_seen, depth)
        self.branches(o, n, path, label, o_seen, n_seen, depth)
        self.others(o, n, path, label, depth)

    def types(self, o: dict[str, Any], n: dict[str, Any], path: str, label: str) -> None:
        if _type_set(o) == _type_set(n):
            return
        breaking = not widens(accepted_types(o), accepted_types(n))
        self.add("changed", join_path(path, "type"),
                 f"{self.what(label)} type {short(o.get('type'))} → {short(n.get('type'))}"
                 f"{'' if breaking else ' (widened)'}", breaking, o.get("type"), n.get("type"))

    def values(self, o: dict[str, Any], n: dict[str, Any], path: str, label: str) -> None:
        what = self.what(label)
        old_enum, new_enum = o.get("enum"), n.get("enum")
        if old_enum != new_enum:
            if isinstance(old_enum, list) and isinstance(new_enum, list):
                gone = [v for v in old_enum if v not in new_enum]
                new_vals = [v for v in new_enum if v not in old_enum]
                bits = ([f"removed {short(gone)}"] if gone else []) + ([f"added {short(new_vals)}"] if new_vals else [])
                summary, breaking = f"{what} enum {'; '.join(bits) or 'reordered'}", bool(gone)
            elif new_enum is None:
                summary, breaking = f"{what} no longer restricted to an enum", False
            else:
                summary, breaking = f"{what} now restricted to {short(new_enum)}", True
            self.add("changed", join_path(path, "enum"), summary, breaking, old_enum, new_enum)
        if o.get("const", ...) != n.get("const", ...):
            if "const" not in n:
                summary, breaking = f"{what} no longer a constant", False
            else:
                summary, breaking = f"{what} constant {short(o.get('const'))} → {short(n['const'])}", True
            self.add("changed", join_path(path, "const"), summary, breaking, o.get("const"), n.get("const"))

    def bounds(self, o: dict[str, Any], n: dict[str, Any], path: str, label: str) -> None:
        what = self.what(label)
        for key in (*LOWER_BOUNDS, *UPPER_BOUNDS):
            ov, nv = o.get(key), n.get(key)
            if ov == nv:
                continue
            if nv is None or nv is False:
                tighter = False
            elif ov is None or ov is False or not (_number(ov) and _number(nv)):
                tighter = True
            else:
                tighter = nv > ov if key in LOWER_BOUNDS else nv < ov
            self.add("changed", join_path(path, key),
                     f"{what} {key} {short(ov) if ov is not None else '(none)'} → "
                     f"{short(nv) if nv is not None else '(none)'} ({'tightened' if tighter else 'loosened'})",
                     tighter, ov, nv)
        for key in ("pattern", "format"):
            ov, nv = o.get(key), n.get(key)
            if ov != nv:
                verb = "removed" if nv is None else "added" if ov is None else "changed"
                self.add("changed", join_path(path, key), f"{what} {key} {verb}: {short(ov)} → {short(nv)}",
                         nv is not None, ov, nv)
        ov, nv = o.get("multipleOf"), n.get("multipleOf")
        if ov != nv:
            if nv is None:
                breaking = False
            elif _number(ov) and _number(nv) and nv:
                breaking = (ov / nv) != int(ov / nv)
            else:
                breaking = True
            self.add("changed", join_path(path, "multipleOf"), f"{what} multipleOf {short(ov)} → {short(nv)}",
                     breaking, ov, nv)
        ov, nv = o.get("nullable"), n.get("nullable")
        if bool(ov) != bool(nv):
            self.add("changed", join_path(path, "nullable"), f"{what} {'may now be' if nv else 'may no longer be'} null",
                     not nv, ov, nv)
        ov, nv = o.get("uniqueItems"), n.get("uniqueItems")
        if bool(ov) != bool(nv):
            self.add("changed", join_path(path, "uniqueItems"),
                     f"{what} items {'must now be' if nv else 'no longer need to be'} unique", bool(nv), ov, nv)

    def annotations(self, o: dict[str, Any], n: dict[str, Any], path: str, label: str) -> None:
        what = self.what(label)
        if o.get("description") != n.get("description"):
            od, nd = str(o.get("description") or ""), str(n.get("description") or "")
            self.add("changed", join_path(path, "description"), f"{what} description changed", False,
                     o.get("description"), n.get("description"), text_diff(od, nd, join_path(path, "description")))
        for key in sorted(ANNOTATIONS):
            if o.get(key) != n.get(key):
                self.add("changed", join_path(path, key), f"{what} {key} {short(o.get(key))} → {short(n.get(key))}",
                         False, o.get(key), n.get(key))

    def properties(self, o: dict[str, Any], n: dict[str, Any], path: str, label: str,
                   o_seen: frozenset[str], n_seen: frozenset[str], depth: int) -> None:
        op = o.get("properties") if isinstance(o.get("properties"), dict) else {}
        np_ = n.get("properties") if isinstance(n.get("properties"), dict) else {}
        oreq = {r for r in o.get("required") or [] if isinstance(r, str)} if isinstance(o.get("required"), list) else set()
        nreq = {r for r in n.get("required") or [] if isinstance(r, str)} if isinstance(n.get("required"), list) else set()
        base = join_path(path, "properties")
        for name, node in np_.items():
            if name in op:
                continue
            req = name in nreq
            self.add("added", join_path(base, name),
                     f"{'required' if req else 'optional'} parameter '{self.sub(label, '.' + name)}' added", req,
                     after=node)
        for name, node in op.items():
            sub_path, sub_label = join_path(base, name), self.sub(label, "." + name)
            if name not in np_:
                self.add("removed", sub_path, f"parameter '{sub_label}' removed", True, before=node)
                continue
            if (name in oreq) != (name in nreq):
                became = name in nreq
                self.add("changed", join_path(sub_path, "required"),
                         f"parameter '{sub_label}' became {'required' if became else 'optional'}", became,
                         name in oreq, became)
            self.node(node, np_[name], sub_path, sub_label, o_seen, n_seen, depth + 1)
        # ``required`` naming no property (validation flags it; a caller must still send the field)
        for name in sorted((nreq - oreq) - set(np_)):
            self.add("changed", join_path(path, "required"), f"{self.what(label)}: field '{name}' now required",
                     True, sorted(oreq), sorted(nreq))
        for name in sorted((oreq - nreq) - set(op)):
            self.add("changed", join_path(path, "required"), f"{self.what(label)}: field '{name}' no longer required",
                     False, sorted(oreq), sorted(nreq))
        common = [k for k in op if k in np_]
        if common != [k for k in np_ if k in op]:
            self.add("reordered", base, f"{self.what(label)} properties reordered", False, list(op), list(np_))
        self.schema_map(o, n, "patternProperties", path, label, o_seen, n_seen, depth)
        oa, na = o.get("additionalProperties", True), n.get("additionalProperties", True)
        self.node(oa, na, join_path(path, "additionalProperties"), self.sub(label, "{*}"), o_seen, n_seen,
                  depth + 1)

    def schema_map(self, o: dict[str, Any], n: dict[str, Any], key: str, path: str, label: str,
                   o_seen: frozenset[str], n_seen: frozenset[str], depth: int) -> None:
        om = o.get(key) if isinstance(o.get(key), dict) else {}
        nm = n.get(key) if isinstance(n.get(key), dict) else {}
        base = join_path(path, key)
        for pattern in nm:
            if pattern not in om:
                self.add("added", join_path(base, pattern), f"{self.what(label)} {key} {short(pattern)} added",
                         not _permissive(nm[pattern]), after=nm[pattern])
        for pattern, node in om.items():
            if pattern not in nm:
                self.add("removed", join_path(base, pattern), f"{self.what(label)} {key} {short(pattern)} removed",
                         False, before=node)
            else:
                self.node(node, nm[pattern], join_path(base, pattern), self.sub(label, f"{{{pattern}}}"),
                          o_seen, n_seen, depth + 1)

    def arrays(self, o: dict[str, Any], n: dict[str, Any], path: str, label: str,
               o_seen: frozenset[str], n_seen: frozenset[str], depth: int) -> None:
        oi, ni = o.get("items", True), n.get("items", True)
        if isinstance(oi, list) or isinstance(ni, list):  # draft-07 tuple form: like prefixItems
            self.tuple(oi if isinstance(oi, list) else [], ni if isinstance(ni, list) else [],
                       join_path(path, "items"), label, o_seen, n_seen, depth)
        else:
            self.node(oi, ni, join_path(path, "items"), self.sub(label, "[]"), o_seen, n_seen, depth + 1)
        op, np_ = o.get("prefixItems"), n.get("prefixItems")
        if op is not None or np_ is not None:
            self.tuple(op if isinstance(op, list) else [], np_ if isinstance(np_, list) else [],
                       join_path(path, "prefixItems"), label, o_seen, n_seen, depth)

    def tuple(self, ol: list[Any], nl: list[Any], base: str, label: str,
              o_seen: frozenset[str], n_seen: frozenset[str], depth: int) -> None:
        """Tuple positions are positional by definition: compared index by index."""
        for i in range(max(len(ol), len(nl))):
            sub_path, sub_label = join_path(base, i), self.sub(label, f"[{i}]")
            if i >= len(ol):
                self.add("added", sub_path, f"parameter '{sub_label}' (tuple position) added", False, after=nl[i])
            elif i >= len(nl):
                self.add("removed", sub_path, f"parameter '{sub_label}' (tuple position) removed", True, before=ol[i])
            else:
                self.node(ol[i], nl[i], sub_path, sub_label, o_seen, n_seen, depth + 1)

    def branches(self, o: dict[str, Any], n: dict[str, Any], path: str, label: str,
                 o_seen: frozenset[str], n_seen: frozenset[str], depth: int) -> None:
        what = self.what(label)
        for key in ("anyOf", "oneOf", "allOf"):
            ol, nl = o.get(key), n.get(key)
            if ol == nl and self.defs_equal:
                continue
            base = join_path(path, key)
            if not isinstance(ol, list) or not isinstance(nl, list):
                if ol is None and nl is None:
                    continue
                # (A schema wrapped into alternatives was lifted by _lift: what is left here adds conditions,
                # which narrows, or takes them away, which widens.)
                if nl is None:
                    self.add("changed", base, f"{what} {key} removed", False, ol, None)
                else:
                    self.add("changed", base, f"{what} {key} {'added' if ol is None else 'changed'}", True, ol, nl)
                continue
            # An added alternative widens (anyOf / oneOf), an added conjunct narrows (allOf); removal the reverse.
            widening = key != "allOf"
            pairs = pair_by_score(list(enumerate(ol)), list(enumerate(nl)),
                                  lambda a, b: schema_similarity(a[1], b[1]), 0.3)
            paired_old = {i for (i, _), _ in pairs}
            paired_new = {j for _, (j, _) in pairs}
            for i, node in enumerate(ol):
                if i not in paired_old:
                    self.add("removed", join_path(base, i), f"{what} {key} branch {i} removed", widening, before=node)
            for j, node in enumerate(nl):
                if j not in paired_new:
                    self.add("added", join_path(base, j), f"{what} {key} branch {j} added", not widening, after=node)
            for (i, ob), (j, nb) in pairs:
                self.node(ob, nb, join_path(base, j), self.sub(label, f"<{key}[{j}]>"), o_seen, n_seen, depth + 1)

    def others(self, o: dict[str, Any], n: dict[str, Any], path: str, label: str, depth: int) -> None:
        """Keywords this walk does not enter (``not``, ``if``/``then``/``else``, ``contains``, vendor ``x-`` keys):
        compared whole; adding or changing one is breaking unless it is an ``x-`` annotation."""
        for key in dict.fromkeys([*o, *n]):
            if key in _HANDLED or (depth == 0 and key in _DEFS) or o.get(key) == n.get(key):
                continue
            annotation = key.startswith("x-")
            verb = "removed" if key not in n else "added" if key not in o else "changed"
            self.add("changed", join_path(path, key), f"{self.what(label)} {key} {verb}",
                     not annotation and key in n, o.get(key), n.get(key))


def schema_changes(tool: str, old: Any, new: Any, base: str) -> list[Change]:
    """Every change from ``old`` to ``new`` (a tool's ``parameters``), paths under ``base``."""
    walk = _SchemaWalk(tool, old, new)
    walk.node(old, new, base, "")
    return walk.out
