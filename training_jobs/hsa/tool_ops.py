"""HSA operators on tool definitions: rename tools and parameters, reword descriptions, reshape schemas (order,
nesting, id types), add optional parameters and decoy tools. Split from :mod:`training_jobs.hsa.operators`."""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from harness_editor.schemas import TOOL_NAME_RE, ManifestError, parse_manifest
from harness_editor.schemas.bindings import BUILTIN_BINDINGS as BINDINGS
from training_jobs.hsa import names as N
from training_jobs.hsa import vocabulary as V
from training_jobs.hsa.relabel import IDENTITY, TO_STRING, RenameMap, moved_path
from training_jobs.hsa.state import _edit_share, _frame, _share, rename_in_texts, reword

_DECOY_NAMES = frozenset(n for pool in N.POOLS for n, _, _ in N.DECOY_TOOLS[pool])
_TEMPLATE_RE = re.compile(r"\{([^{}]+)\}")

# --- tools -----------------------------------------------------------------------------------------------------------


def leaf_paths(schema: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of the leaf properties of an object schema (nested objects with properties are walked)."""
    out: list[str] = []
    for key, node in (schema.get("properties") or {}).items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(node, dict) and isinstance(node.get("properties"), dict) and node["properties"]:
            out.extend(leaf_paths(node, path))
        else:
            out.append(path)
    return out


def _is_decoy(tool: Mapping[str, Any]) -> bool:
    return tool["name"] in _DECOY_NAMES or tool.get("binding") == N.DECOY_FIXTURE


def _builtin(tool: Mapping[str, Any]) -> str | None:
    b = tool.get("binding")
    return b if isinstance(b, str) and b in BINDINGS else None


def moved_binding(tool: Mapping[str, Any], moves: Mapping[str, str]) -> dict[str, Any] | None:
    """The tool with its binding following argument path moves, or None when the binding cannot follow them.

    A built-in binding reads arguments through ``argument_map`` (its paths move); a fixture matches ``when`` paths
    (they move); an http binding names argument paths in its path and query templates (they move) unless it sends
    the arguments themselves as the body; an MCP server gets the arguments as they are (nothing can follow, so the
    tool keeps its shape); an unbound tool has nothing to follow."""
    if not moves:
        return dict(tool)
    b = tool.get("binding")
    if isinstance(b, str):
        return {**tool, "argument_map": {impl: moved_path(moves, p) for impl, p in tool["argument_map"].items()}}
    if b is None:
        return dict(tool)
    kind = b.get("kind")
    if kind == "fixture":
        cases = [{**c, "when": {moved_path(moves, k): v for k, v in (c.get("when") or {}).items()}}
                 for c in b.get("cases") or []]
        return {**tool, "binding": {**b, "cases": cases}}
    if kind == "http" and b.get("body", "none") == "none":
        def sub(m: re.Match[str]) -> str:
            return "{" + moved_path(moves, m.group(1).strip()) + "}"

        query = {k: _TEMPLATE_RE.sub(sub, v) for k, v in (b.get("query") or {}).items()}
        return {**tool, "binding": {**b, "path": _TEMPLATE_RE.sub(sub, b.get("path") or ""), "query": query}}
    return None


def _can_move(tool: Mapping[str, Any]) -> bool:
    return moved_binding(tool, {"\0": "\0"}) is not None


def _rename_tools(state, rng, pool, s):
    taken = {t["name"] for t in state["tools"]}
    mapping: dict[str, str] = {}
    for t in _share(rng, [t for t in state["tools"] if not _is_decoy(t)], s["share"]):
        if V.uses_live_commerce_table(t):
            table = N.TOOL_NAMES[pool][t["binding"]]
        else:  # any other domain: from the tool's own words and the generic verbs and nouns
            table = V.tool_name_options(t["name"], pool)
        options = [o for o in table if o not in taken]
        if not options:
            continue
        new = rng.choice(options)
        if TOOL_NAME_RE.fullmatch(new):
            taken.add(new)
            mapping[t["name"]] = new
    if not mapping:
        return state, IDENTITY
    tools = []
    for t in state["tools"]:
        if t["name"] in mapping:
            b = t.get("binding")
            if isinstance(b, dict) and b.get("kind") == "mcp" and not b.get("tool"):
                t = {**t, "binding": {**b, "tool": t["name"]}}  # the server's tool keeps its name
            t = {**t, "name": mapping[t["name"]]}
        tools.append(t)
    skills = [{**sk, "allowed_tools": [mapping.get(n, n) for n in sk["allowed_tools"]]} for sk in state["skills"]]
    return rename_in_texts({**state, "tools": tools, "skills": skills}, mapping), RenameMap(tools=mapping)


def _rename_props(node: dict[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    props = node.get("properties")
    if not isinstance(props, dict):
        return node
    new_props = {}
    for key, child in props.items():
        if isinstance(child, dict) and isinstance(child.get("properties"), dict):
            child = _rename_props(child, mapping)
        new_props[mapping.get(key, key)] = child
    out = {**node, "properties": new_props}
    if isinstance(node.get("required"), list):
        out["required"] = [mapping.get(r, r) for r in node["required"]]
    return out


def _rename_tool_params(state, rng, pool, s):
    table = N.PARAM_NAMES[pool]
    commerce = V.is_live_commerce(state)  # the live room renames from its table only; any other domain also
    present: dict[str, list[int]] = {}    # from the parameters' own words
    for i, t in enumerate(state["tools"]):
        if not _can_move(t):
            continue  # an MCP server, or an http body, gets the arguments as they are: keep the shape
        for path in leaf_paths(t["parameters"]):
            leaf = path.rsplit(".", 1)[-1]
            if leaf in table or not commerce:
                present.setdefault(leaf, []).append(i)
    if not present:
        return state, IDENTITY
    mapping: dict[str, str] = {}
    for leaf in _share(rng, sorted(present), s["share"]):
        siblings = set()
        for i in present[leaf]:
            siblings.update(p.rsplit(".", 1)[-1] for p in leaf_paths(state["tools"][i]["parameters"]))
        options = table[leaf] if leaf in table else V.param_name_options(
            leaf, [state["tools"][i]["name"] for i in present[leaf]], pool)
        options = [o for o in options if o not in siblings and o not in mapping.values() and o not in present]
        if options:
            mapping[leaf] = rng.choice(options)
    if not mapping:
        return state, IDENTITY
    tools = []
    paths: dict[str, dict[str, str]] = {}
    for t in state["tools"]:
        old_paths = leaf_paths(t["parameters"])
        if not any(p.rsplit(".", 1)[-1] in mapping for p in old_paths) or not _can_move(t):
            tools.append(t)
            continue
        params = _rename_props(t["parameters"], mapping)
        moved = {p: ".".join(mapping.get(seg, seg) for seg in p.split(".")) for p in old_paths}
        moved = {p: q for p, q in moved.items() if p != q}
        paths[t["name"]] = moved
        t = moved_binding(t, moved)
        assert t is not None
        tools.append({**t, "parameters": params})
    state = {**state, "tools": tools}
    return rename_in_texts(state, mapping), RenameMap(paths=paths)


def _rewrite_tool_descriptions(state, rng, pool, s):
    return _edit_share(state, "tools", rng, s["share"], "description",
                       lambda text: _frame(reword(text, rng, pool, s["density"]), rng, pool), max_len=1000), IDENTITY


def _shuffled_props(node: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    props = node.get("properties")
    if not isinstance(props, dict) or not props:
        return node
    keys = list(props)
    rng.shuffle(keys)
    new_props = {k: _shuffled_props(props[k], rng) if isinstance(props[k], dict) else props[k] for k in keys}
    out = {**node, "properties": new_props}
    if isinstance(node.get("required"), list) and len(node["required"]) > 1:
        req = list(node["required"])
        rng.shuffle(req)
        out["required"] = req
    return out


def _reorder_tool_properties(state, rng, pool, s):
    tools = [_shuffled_props(t["parameters"], rng) for t in state["tools"]]
    tools = [{**t, "parameters": p} if p is not t["parameters"] else t for t, p in zip(state["tools"], tools)]
    if s["reorder_tools"] and len(tools) > 1:
        rng.shuffle(tools)
    return {**state, "tools": tools}, IDENTITY


def _wrapped(params: Mapping[str, Any]) -> bool:
    props = params.get("properties") or {}
    return len(props) == 1 and all(isinstance(v, dict) and "properties" in v for v in props.values())


def _wrap_tool_arguments(state, rng, pool, s):
    eligible = [t for t in state["tools"] if (t["parameters"].get("properties") and not _wrapped(t["parameters"])
                                                and not _is_decoy(t) and _can_move(t))]
    if not eligible:
        return state, IDENTITY
    picked = {id(x) for x in _share(rng, eligible, s["share"])}
    tools = []
    paths: dict[str, dict[str, str]] = {}
    for t in state["tools"]:
        if id(t) not in picked:
            tools.append(t)
            continue
        params = t["parameters"]
        key = rng.choice(N.WRAP_KEYS[pool])
        inner = {"type": "object", "description": "The call's arguments.", "properties": params["properties"]}
        for k in ("required", "additionalProperties"):
            if k in params:
                inner[k] = params[k]
        outer: dict[str, Any] = {k: v for k, v in params.items() if k not in ("properties", "required")}
        outer["properties"] = {key: inner}
        if params.get("required"):
            outer["required"] = [key]
        # every argument moves inside the wrapper, including the keys a call puts inside an untyped object
        # parameter (a leaf here: relabel.moved_path carries what is below it along)
        moves = {p: f"{key}.{p}" for p in leaf_paths(params)}
        paths[t["name"]] = moves
        t = moved_binding(t, moves)
        assert t is not None
        tools.append({**t, "parameters": outer})
    return {**state, "tools": tools}, RenameMap(paths=paths)


DIGIT_STRING_SCHEMA: Mapping[str, Any] = {"type": "string", "pattern": "^[0-9]+$"}


@lru_cache(maxsize=None)
def _string_id_schema_allowed(binding_id: str, impl_param: str) -> bool:
    """Does the manifest validator accept a plain digit-string parameter (:data:`DIGIT_STRING_SCHEMA`) for this
    integer binding parameter? True only where the binding declares it coerces digit strings
    (``BindingParam.coerces_digit_strings``); asked of ``parse_manifest`` itself, so the operator never emits
    a schema the validator would refuse."""
    if not BINDINGS[binding_id].params[impl_param].coerces_digit_strings:
        return False
    probe = {
        "name": "probe", "skills": [{"id": "s", "kind": "reply", "description": "d", "body": "b"}],
        "tools": [{"name": "t", "description": "d", "binding": binding_id,
                   "parameters": {"type": "object", "properties": {
                       p.name: (dict(DIGIT_STRING_SCHEMA) if p.name == impl_param else {"type": p.json_type})
                       for p in BINDINGS[binding_id].params.values()}},
                   "argument_map": {p.name: p.name for p in BINDINGS[binding_id].params.values()}}],
        "prompt": {"blocks": [{"id": "p", "role": "persona", "title": "P"}]}, "constraints": {},
    }
    try:
        parse_manifest(probe)
    except ManifestError:
        return False
    return True


def _string_id_node(node: Mapping[str, Any]) -> dict[str, Any]:
    desc = str(node.get("description") or "The id").rstrip(".") + ", as a string of digits."
    return {**DIGIT_STRING_SCHEMA, "description": desc}


def _get_node(schema: Mapping[str, Any], dotted: str) -> Mapping[str, Any] | None:
    node: Any = schema
    for seg in dotted.split("."):
        node = (node.get("properties") or {}).get(seg) if isinstance(node, Mapping) else None
        if node is None:
            return None
    return node


def _set_node(schema: dict[str, Any], dotted: str, new: dict[str, Any]) -> dict[str, Any]:
    seg, _, rest = dotted.partition(".")
    props = dict(schema["properties"])
    props[seg] = _set_node(props[seg], rest, new) if rest else new
    return {**schema, "properties": props}


def _switch_id_types(state, rng, pool, s):
    """Integer ids (link ids) travel as digit strings (a plain ``type: string`` schema with a digits-only
    pattern), only for the binding parameters that declare they coerce digit strings."""
    eligible = []
    for t in state["tools"]:
        if _is_decoy(t) or _builtin(t) is None:
            continue  # only built-in parameters declare that they coerce digit strings
        params = BINDINGS[t["binding"]].params
        for impl, path in t["argument_map"].items():
            node = _get_node(t["parameters"], path)
            if (params[impl].json_type == "integer" and node is not None and node.get("type") == "integer"
                    and _string_id_schema_allowed(t["binding"], impl)):
                eligible.append((t["name"], impl, path))
    if not eligible:
        return state, IDENTITY
    picked = _share(rng, eligible, s["share"])
    by_tool: dict[str, list[tuple[str, str]]] = {}
    for name, impl, path in picked:
        by_tool.setdefault(name, []).append((impl, path))
    tools = []
    conversions: dict[str, dict[str, str]] = {}
    for t in state["tools"]:
        if t["name"] not in by_tool:
            tools.append(t)
            continue
        params = t["parameters"]
        for impl, path in by_tool[t["name"]]:
            node = _get_node(params, path)
            assert node is not None
            params = _set_node(params, path, _string_id_node(node))
            conversions.setdefault(t["name"], {})[path] = TO_STRING
        tools.append({**t, "parameters": params})
    return {**state, "tools": tools}, RenameMap(conversions=conversions)


def _add_optional_params(state, rng, pool, s):
    eligible = [t for t in state["tools"] if not _is_decoy(t)]
    if not eligible:
        return state, IDENTITY
    picked = {id(x) for x in _share(rng, eligible, s["share"])}
    tools = []
    changed = False
    for t in state["tools"]:
        if id(t) not in picked:
            tools.append(t)
            continue
        params = t["parameters"]
        names_now = set(params.get("properties") or {})
        options = [(n, sch) for n, sch in N.OPTIONAL_PARAMS[pool] if n not in names_now]
        k = min(rng.randint(1, s["max_added"]), len(options))
        if k <= 0:
            tools.append(t)
            continue
        items = list((params.get("properties") or {}).items())
        for n, sch in rng.sample(options, k):
            items.insert(rng.randint(0, len(items)), (n, dict(sch)))
        tools.append({**t, "parameters": {**params, "properties": dict(items)}})
        changed = True
    return ({**state, "tools": tools} if changed else state), IDENTITY


def _add_decoy_tools(state, rng, pool, s):
    taken = {t["name"] for t in state["tools"]}
    commerce = V.is_live_commerce(state)
    pool_decoys = N.DECOY_TOOLS[pool] if commerce else V.domain_decoys(state, pool)
    options = [d for d in pool_decoys if d[0] not in taken]
    n = min(rng.randint(1, s["max_added"]), len(options), 100 - len(state["tools"]))
    if n <= 0:
        return state, IDENTITY
    tools = list(state["tools"])
    # live room: the read-only campaign state; any other domain: a fixture that finds nothing
    binding = "campaign.state" if commerce else None
    for name, desc, props in rng.sample(options, n):
        decoy = {"name": name, "description": desc, "argument_map": {},
                 "binding": binding or copy.deepcopy(N.DECOY_FIXTURE),
                 "parameters": {"type": "object", "properties": {k: dict(v) for k, v in props.items()},
                                "additionalProperties": False}}
        tools.insert(rng.randint(0, len(tools)), decoy)
    return {**state, "tools": tools}, IDENTITY

