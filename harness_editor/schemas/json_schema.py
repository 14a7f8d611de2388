"""The manifest's own JSON Schema, generated from the models (so it never drifts from what the parser accepts), and
the same as OpenAPI 3.0 components for the API document.

What a JSON Schema cannot say (unique ids, references between skills and tools, bindings against their signatures,
tool schemas against the meta-schema) is the semantic pass's (:mod:`.semantics`); the schema's description says so.
Plain Python, no Django.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any

from harness_editor.schemas.bindings import BUILTIN_BINDINGS, OPEN_BINDING_KINDS
from harness_editor.schemas.manifest import Manifest

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
DESCRIPTION = (
    "A harness manifest: skills, tools, hooks, the system prompt, the interaction constraints (and optional "
    "conventions). Structure only: parse_manifest also checks what one field cannot see alone: unique ids, "
    "skills' allowed_tools naming tools of the manifest, each tool's parameters against the JSON Schema 2020-12 "
    "meta-schema (unknown keywords are errors), and each binding against its signature (GET /api/bindings). "
    "Every error is reported at once with its path, e.g. tools[3].parameters.properties.sku.type."
)
BINDING_DESCRIPTION = (
    "What a call of this tool runs. One of: a built-in binding id (a string; its parameters are filled through "
    "argument_map); {kind: http, ...} an endpoint of the administrator's allow-list; {kind: fixture, ...} "
    "deterministic answers from a table of argument patterns; {kind: mcp, ...} a tool of an allow-listed MCP "
    "server; null: unbound (validation warns, and a call gets the tool fault 'unbound', never another tool's data). "
    "GET /api/bindings lists the built-in ids with their signatures and each open kind's schema."
)


def _document_bindings(schema: dict[str, Any]) -> None:
    binding = schema["$defs"]["Tool"]["properties"]["binding"]
    binding["description"] = BINDING_DESCRIPTION
    for member in binding.get("oneOf", binding.get("anyOf", [])):
        if member.get("type") == "string":
            member.update(title="BuiltinBindingId", enum=sorted(BUILTIN_BINDINGS),
                          description="the id of a built-in binding")
    argument_map = schema["$defs"]["Tool"]["properties"]["argument_map"]
    argument_map["description"] = ("built-in bindings only: implementation parameter -> tool parameter path "
                                   "(dotted through properties, e.g. 'args.sku')")


@lru_cache(maxsize=1)
def _manifest_json_schema() -> dict[str, Any]:
    schema = Manifest.model_json_schema(mode="validation")
    _document_bindings(schema)
    return {"$schema": SCHEMA_DIALECT, **schema, "description": DESCRIPTION}


def manifest_json_schema() -> dict[str, Any]:
    """The manifest's JSON Schema (2020-12, definitions under ``$defs``), a fresh copy."""
    return copy.deepcopy(_manifest_json_schema())


def binding_kind_schemas() -> dict[str, dict[str, Any]]:
    """Each open binding kind's JSON Schema (2020-12), from the manifest's."""
    defs = _manifest_json_schema()["$defs"]
    names = {"http": "HttpBinding", "fixture": "FixtureBinding", "mcp": "McpBinding"}
    out: dict[str, dict[str, Any]] = {}
    for kind in OPEN_BINDING_KINDS:
        schema = copy.deepcopy(defs[names[kind]])
        used = {ref.rsplit("/", 1)[-1] for ref in _refs(schema)}
        if used:
            schema["$defs"] = {name: copy.deepcopy(defs[name]) for name in sorted(used)}
        out[kind] = {"$schema": SCHEMA_DIALECT, **schema}
    return out


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


# --- OpenAPI 3.0 ---------------------------------------------------------------------------------------------


def _is_null(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") == "null" and len(node) == 1


def _to_oas30(node: Any, ref_prefix: str) -> Any:
    """A 2020-12 schema as an OpenAPI 3.0 schema: ``null`` members become ``nullable``, ``const`` a one-value
    ``enum``, numeric ``exclusiveMinimum``/``exclusiveMaximum`` the boolean form, refs point at components."""
    if isinstance(node, list):
        return [_to_oas30(v, ref_prefix) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
            out[key] = ref_prefix + value[len("#/$defs/"):]
        elif key == "$schema":
            continue
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "discriminator" and isinstance(value, dict):
            out[key] = {**value, "mapping": {k: ref_prefix + v[len("#/$defs/"):] if v.startswith("#/$defs/") else v
                                             for k, v in value.get("mapping", {}).items()}}
        elif key in ("anyOf", "oneOf") and isinstance(value, list) and any(_is_null(v) for v in value):
            rest = [_to_oas30(v, ref_prefix) for v in value if not _is_null(v)]
            out["nullable"] = True
            if len(rest) == 1 and "$ref" not in rest[0]:
                out.update(rest[0])
            elif len(rest) == 1:
                out["allOf"] = rest
            else:
                out[key] = rest
        elif key == "type" and value == "null":
            out["nullable"] = True
            out["enum"] = [None]
        elif key in ("properties", "$defs", "patternProperties") and isinstance(value, dict):
            out[key] = {k: _to_oas30(v, ref_prefix) for k, v in value.items()}
        else:
            out[key] = _to_oas30(value, ref_prefix)
    if out.get("default", 0) is None and not out.get("nullable"):
        del out["default"]
    return out


def manifest_openapi_components(prefix: str = "Manifest") -> dict[str, dict[str, Any]]:
    """The manifest's schema as OpenAPI 3.0 components: ``{prefix: root, prefix + Def: ...}`` (``ManifestTool``,
    ``ManifestHttpBinding``, ...), refs between them rewritten."""
    schema = copy.deepcopy(_manifest_json_schema())
    defs = schema.pop("$defs")
    ref_prefix = f"#/components/schemas/{prefix}"
    components = {prefix: _to_oas30(schema, ref_prefix)}
    for name, sub in defs.items():
        components[prefix + name] = _to_oas30(sub, ref_prefix)
    return components
