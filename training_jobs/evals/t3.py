"""T3 Tool and prompt robustness: T1 tasks under noisy tools and prompts, and under tool faults.

Perturbation levels, after RoTBench (Ye et al., 2024: noise in tool names, descriptions and parameters). Here
each level keeps everything of the level below and adds more, so a model's row reads as growing noise; a
*rate* is the share of eligible items (tools, parameter names, descriptions) a noise kind touches:

- **Clean** — the harness as it is.
- **Slight** — character-level typos (a letter inserted, dropped or replaced) in tool names (0.5) and parameter
  names (0.5), case changes (``lookup_product`` → ``lookupProduct`` / ``LOOKUP_PRODUCT``, 0.3 each), typos in
  tool and parameter descriptions (0.5).
- **Medium** — Slight, plus reversed names (``tcudorp_pukool``, 0.3) and nonsense names (``fn_q7k2xa``, 0.3)
  for tools and parameters, parameter descriptions dropped and tool descriptions cut to their first sentence
  (0.5), properties and tools reordered, the system prompt in another layout (markdown/xml/json/plain) with its
  blocks and items reordered.
- **Heavy** — Medium, plus two tools exchanging their names (the names now mislead; the descriptions and
  bindings stay true), extra optional parameters with meaningless names (0.5), arguments wrapped in a nested
  object (0.5), integer ids taken as digit strings where the binding accepts them (0.5), block titles shouted
  or misspelt (0.5).
- **Union** — every kind at rate 1: every tool and parameter name is noisy (one kind each, drawn evenly).

The bindings keep working under every level: tools bind by binding id and ``argument_map``, which follow every
rename and reshape, and skills' ``allowed_tools`` and prose mentions follow tool renames (``operators.
rename_in_texts``). Every perturbed harness passes ``parse_manifest`` (the harness validators).

Tool faults (``streams.engine.faults``): ``timeout``, ``malformed`` (garbage instead of JSON),
``permission_denied`` and ``slow`` (2.5 s, then the real result) on the one call a single-question task needs.
Under the first three the call returns nothing usable, so the case has no gold facts, every figure of that
kind is forbidden (``allowed`` is empty) and the gold reply says the host cannot check right now; ``slow``
keeps the T1 labels.

:func:`build_t3` makes the set, :func:`perturbed_manifest` the harness a case runs under. Plain Python.
"""

from __future__ import annotations

import hashlib
import random
import re
import string
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from harness_editor.schemas import TOOL_NAME_RE, Manifest, content_hash, manifest_to_json
from streams.engine.faults import ToolFault
from training_jobs.evals.build_t1 import harness_manifest
from training_jobs.evals.cases import PERTURBATION_LEVELS, EvalCase, ForbiddenClaim, HarnessVariant
from training_jobs.hsa.operators import (
    _is_decoy,
    harness_state,
    leaf_paths,
    operator,
    rename_in_texts,
    validate_state,
)
from training_jobs.hsa.tool_ops import _can_move, moved_binding

DEFAULT_SEED = 0
BASE_CASES = 50  # T1 tasks seen at every level
FAULT_CASES_PER_KIND = 10
SLOW_MS = 2500
FAULT_REPLY = "Sorry, I can't check that right now, the product card on screen has the latest details."

_SLIGHT = {"name_typo": 0.5, "name_case": 0.3, "param_typo": 0.5, "param_case": 0.3, "desc_typo": 0.5}
_MEDIUM = {**_SLIGHT, "name_reverse": 0.3, "name_nonsense": 0.3, "param_reverse": 0.3, "param_nonsense": 0.3,
           "desc_drop": 0.5, "reorder": 1.0, "layout": 1.0}
_HEAVY = {**_MEDIUM, "exchange": 1.0, "addendum": 0.5, "wrap": 0.5, "id_strings": 0.5, "title_noise": 0.5}
LEVELS: dict[str, dict[str, float]] = {
    "clean": {},
    "slight": _SLIGHT,
    "medium": _MEDIUM,
    "heavy": _HEAVY,
    "union": {k: 1.0 for k in _HEAVY},
}
assert tuple(LEVELS) == PERTURBATION_LEVELS
NOISE_KINDS: tuple[str, ...] = tuple(_HEAVY)
NAME_NOISES = ("typo", "case", "reverse", "nonsense")
WRAP_KEYS = ("data", "body", "fields")  # none of them is an HSA pool name
FAULT_KINDS = ("timeout", "malformed", "permission_denied", "slow")


# --- name and text noise -------------------------------------------------------------------------------------


def char_typo(name: str, rng: random.Random) -> str:
    """One character inserted, dropped or replaced (never the first one, so the name stays a name)."""
    if len(name) < 3:
        return name + rng.choice(string.ascii_lowercase)
    i = rng.randrange(1, len(name))
    how = rng.choice(("insert", "omit", "substitute"))
    letter = rng.choice(string.ascii_lowercase)
    if how == "insert":
        return name[:i] + letter + name[i:]
    if how == "omit":
        return name[:i] + name[i + 1:]
    return name[:i] + (letter if letter != name[i] else "x") + name[i + 1:]


def case_change(name: str, rng: random.Random) -> str:
    parts = [p for p in re.split(r"[_\-]", name) if p]
    style = rng.choice(("camel", "pascal", "upper"))
    if style == "upper" or len(parts) < 2 and style == "camel":
        return name.upper() if name.upper() != name else name.lower()
    if style == "pascal":
        return "".join(p[:1].upper() + p[1:] for p in parts)
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def nonsense(rng: random.Random) -> str:
    return "fn_" + "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(6))


def noisy_name(name: str, kind: str, rng: random.Random) -> str:
    if kind == "typo":
        return char_typo(name, rng)
    if kind == "case":
        return case_change(name, rng)
    if kind == "reverse":
        rev = name[::-1]
        return rev if rev[0].isalpha() or rev[0] == "_" else "r_" + rev
    return nonsense(rng)


def _name_map(names: Sequence[str], noise: Mapping[str, float], prefix: str, rng: random.Random,
              valid: re.Pattern[str], taken: set[str]) -> dict[str, str]:
    """A noisy name for some of ``names``: each name draws every kind with its rate and, if any hit, one of
    them evenly."""
    out: dict[str, str] = {}
    for name in names:
        kinds = [k for k in NAME_NOISES if rng.random() < noise.get(f"{prefix}_{k}", 0.0)]
        if not kinds:
            continue
        new = noisy_name(name, rng.choice(kinds), rng)
        if new == name or new in taken or not valid.fullmatch(new):
            continue
        taken.add(new)
        out[name] = new
    return out


_WORD_RE = re.compile(r"\b[a-zA-Z]{5,}\b")


def text_typos(text: str, rng: random.Random) -> str:
    """Typos in about one long word in six (at least one), outside `code spans` (they name tools)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        words = list(_WORD_RE.finditer(parts[i]))
        if not words:
            continue
        hit = {m.start() for m in words if rng.random() < 1 / 6} or {rng.choice(words).start()}
        parts[i] = _WORD_RE.sub(lambda m: char_typo(m.group(0), rng) if m.start() in hit else m.group(0), parts[i])
    return "`".join(parts)


# --- the harness edits -------------------------------------------------------------------------------------------


_PARAM_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def _rename_tools(state: dict[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    tools = [{**t, "name": mapping.get(t["name"], t["name"])} for t in state["tools"]]
    skills = [{**s, "allowed_tools": [mapping.get(n, n) for n in s["allowed_tools"]]} for s in state["skills"]]
    return rename_in_texts({**state, "tools": tools, "skills": skills}, mapping)


def _rename_props(node: dict[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    props = node.get("properties")
    if not isinstance(props, dict):
        return node
    new = {mapping.get(k, k): (_rename_props(v, mapping) if isinstance(v, dict) else v) for k, v in props.items()}
    out = {**node, "properties": new}
    if isinstance(node.get("required"), list):
        out["required"] = [mapping.get(r, r) for r in node["required"]]
    return out


def _rename_params(state: dict[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    tools = []
    for t in state["tools"]:
        paths = leaf_paths(t["parameters"])
        if not {p.rsplit(".", 1)[-1] for p in paths} & set(mapping) or not _can_move(t):
            tools.append(t)  # an MCP server or an http body gets the arguments as they are: keep the shape
            continue
        # the binding follows (a built-in's argument map, a fixture's ``when`` paths, an http template)
        moves = {p: ".".join(mapping.get(seg, seg) for seg in p.split(".")) for p in paths}
        moved = moved_binding(t, {p: q for p, q in moves.items() if p != q})
        tools.append({**moved, "parameters": _rename_props(t["parameters"], mapping)})  # type: ignore[dict-item]
    return rename_in_texts({**state, "tools": tools}, mapping)


def _descriptions(state: dict[str, Any], noise: Mapping[str, float], rng: random.Random) -> dict[str, Any]:
    typo_rate, drop_rate = noise.get("desc_typo", 0.0), noise.get("desc_drop", 0.0)

    def params(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if k == "description" and isinstance(v, str):
                    if rng.random() < drop_rate:
                        continue
                    out[k] = text_typos(v, rng) if rng.random() < typo_rate else v
                else:
                    out[k] = params(v)
            return out
        if isinstance(node, list):
            return [params(v) for v in node]
        return node

    tools = []
    for t in state["tools"]:
        desc = t["description"]
        if rng.random() < drop_rate:
            first = re.split(r"(?<=[.!?])\s", desc, maxsplit=1)[0]
            desc = first if first.strip() else desc
        if rng.random() < typo_rate:
            desc = text_typos(desc, rng)
        props = t["parameters"].get("properties")
        parameters = {**t["parameters"], "properties": params(props)} if isinstance(props, dict) else t["parameters"]
        tools.append({**t, "description": desc, "parameters": parameters})
    return {**state, "tools": tools}


def _exchange(state: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], dict[str, str]]:
    tools = [t["name"] for t in state["tools"] if not _is_decoy(t)]
    if len(tools) < 2:
        return state, {}
    a, b = rng.sample(tools, 2)
    swap = {a: b, b: a}
    return _rename_tools(state, swap), swap


def _addendum(state: dict[str, Any], rate: float, rng: random.Random) -> dict[str, Any]:
    tools = []
    for t in state["tools"]:
        props = t["parameters"].get("properties")
        if not isinstance(props, dict) or rng.random() >= rate:
            tools.append(t)
            continue
        items = list(props.items())
        for _ in range(rng.randint(1, 2)):
            name = "x_" + "".join(rng.choice(string.ascii_lowercase) for _ in range(5))
            schema = rng.choice(({"type": "string"}, {"type": "boolean"}, {"type": "integer", "minimum": 0}))
            if name not in props:
                items.insert(rng.randint(0, len(items)), (name, dict(schema)))
        tools.append({**t, "parameters": {**t["parameters"], "properties": dict(items)}})
    return {**state, "tools": tools}


def _wrap(state: dict[str, Any], rate: float, rng: random.Random) -> dict[str, Any]:
    tools = []
    for t in state["tools"]:
        params = t["parameters"]
        props = params.get("properties")
        if not props or rng.random() >= rate or any(isinstance(v, dict) and "properties" in v
                                                    for v in props.values()) or not _can_move(t):
            tools.append(t)
            continue
        key = rng.choice(WRAP_KEYS)
        inner = {"type": "object", "properties": props}
        for k in ("required", "additionalProperties"):
            if k in params:
                inner[k] = params[k]
        outer = {k: v for k, v in params.items() if k not in ("properties", "required")}
        outer["properties"] = {key: inner}
        if params.get("required"):
            outer["required"] = [key]
        if isinstance(t.get("binding"), str):
            moved = {**t, "argument_map": {impl: f"{key}.{p}" for impl, p in t["argument_map"].items()}}
        else:  # a fixture's ``when`` paths, an http template: every argument moves inside the wrapper
            moved = moved_binding(t, {p: f"{key}.{p}" for p in leaf_paths(params)})  # type: ignore[assignment]
        tools.append({**moved, "parameters": outer})
    return {**state, "tools": tools}


def _titles(state: dict[str, Any], rate: float, rng: random.Random) -> dict[str, Any]:
    blocks = []
    for b in state["prompt"]["blocks"]:
        if rng.random() < rate:
            b = {**b, "title": b["title"].upper() if rng.random() < 0.5 else text_typos(b["title"], rng)}
        blocks.append(b)
    return {**state, "prompt": {**state["prompt"], "blocks": blocks}}


def _hsa(state: dict[str, Any], name: str, rng: random.Random, **settings: Any) -> dict[str, Any]:
    """A name-free HSA operator (reordering, layout, id types): the project's own code, no pool names."""
    new, _ = operator(name, **settings).edit_harness(state, rng)
    return new


def perturb(base: Manifest, noise: Mapping[str, float], seed: int) -> tuple[Manifest, dict[str, str]]:
    """The harness under ``noise`` (rates per kind, :data:`NOISE_KINDS`), drawn from ``seed``; returns it and
    the tool renames (base name → new name)."""
    unknown = set(noise) - set(NOISE_KINDS)
    if unknown:
        raise ValueError(f"unknown noise kinds {sorted(unknown)}; known: {', '.join(NOISE_KINDS)}")
    rng = random.Random(seed)
    state = harness_state(base)
    if not noise:
        return base, {}
    tool_names = [t["name"] for t in state["tools"]]
    tool_map = _name_map(tool_names, noise, "name", rng, TOOL_NAME_RE, set(tool_names) | {"load_skill"})
    state = _rename_tools(state, tool_map) if tool_map else state
    if rng.random() < noise.get("exchange", 0.0):
        state, swap = _exchange(state, rng)
        tool_map = {old: swap.get(tool_map.get(old, old), tool_map.get(old, old)) for old in tool_names}
        tool_map = {k: v for k, v in tool_map.items() if k != v}
    params = sorted({p.rsplit(".", 1)[-1] for t in state["tools"] for p in leaf_paths(t["parameters"])})
    param_map = _name_map(params, noise, "param", rng, _PARAM_NAME_RE, set(params))
    state = _rename_params(state, param_map) if param_map else state
    state = _descriptions(state, noise, rng)
    if noise.get("addendum"):
        state = _addendum(state, noise["addendum"], rng)
    if noise.get("id_strings"):
        state = _hsa(state, "switch_id_types", rng, share=noise["id_strings"])
    if noise.get("wrap"):
        state = _wrap(state, noise["wrap"], rng)
    if rng.random() < noise.get("reorder", 0.0):
        state = _hsa(state, "reorder_tool_properties", rng)
    if rng.random() < noise.get("layout", 0.0):
        state = _hsa(state, "change_prompt_layout", rng, layout_share=1.0, title_share=0.0)
        state = _hsa(state, "reorder_prompt_blocks", rng, block_share=1.0, item_share=1.0)
    if noise.get("title_noise"):
        state = _titles(state, noise["title_noise"], rng)
    return validate_state(state), tool_map


@lru_cache(maxsize=512)
def _perturbed(base_json: str, variant_json: str) -> tuple[Manifest, dict[str, str]]:
    hv = HarnessVariant.model_validate_json(variant_json)
    return perturb(Manifest.model_validate_json(base_json), hv.noise, hv.seed)


def perturbed_manifest(case: EvalCase, base_manifest: Manifest) -> Manifest:
    """The harness a T3 case runs under: its perturbation applied to ``base_manifest`` (the harness the case
    names gives ``case.harness_variant.harness_hash``). Faults are not part of the harness: pass
    ``case.tool_faults`` to the turn engine."""
    hv = case.harness_variant
    if hv is None or hv.kind != "perturbation":
        raise ValueError(f"case {case.id} has no perturbation")
    if not hv.noise:
        return base_manifest
    return _perturbed(manifest_to_json(base_manifest), hv.model_dump_json())[0]


# --- the set ----------------------------------------------------------------------------------------------------


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _derived(t1: EvalCase, new_id: str, hv: HarnessVariant, tags: Sequence[str], source: str,
             **changes: Any) -> EvalCase:
    data = t1.model_dump(exclude_defaults=True)
    data.update(id=new_id, kind="t3", harness_variant=hv.model_dump(), parent=t1.id, source=source,
                tags=sorted({*t1.tags, *tags}), **changes)
    return EvalCase.model_validate(data)


def _faulted(t1: EvalCase, kind: str) -> dict[str, Any]:
    """The labels of a task whose one call fails (``slow`` keeps them)."""
    if kind == "slow":
        return {}
    figures = {"invented_price", "invented_discount", "invented_coupon", "false_stock", "false_promise"}
    claims = []
    for c in t1.forbidden_claims:
        if c.kind in figures and c.allowed:
            c = ForbiddenClaim(kind=c.kind, link_id=c.link_id, pattern=c.pattern, allowed=[],
                               text=f"{c.text} (the tool gave nothing this turn: no figure is backed)")
        claims.append(c)
    return {"gold_facts": [], "forbidden_claims": [c.model_dump(exclude_defaults=True) for c in claims],
            "gold_reply": FAULT_REPLY}


def build_t3(t1_cases: Sequence[EvalCase], seed: int = DEFAULT_SEED, *,
             base_manifests: Mapping[str, Manifest] | None = None) -> list[EvalCase]:
    """:data:`BASE_CASES` T1 tasks with tool calls at every level (Clean ... Union), then
    :data:`FAULT_CASES_PER_KIND` single-call tasks under each fault kind."""
    rng = random.Random(f"t3:{seed}")
    with_tools = [c for c in t1_cases if any(not t.optional for t in c.expected_tools)]
    picked = sorted(rng.sample(range(len(with_tools)), min(BASE_CASES, len(with_tools))))
    out: list[EvalCase] = []
    for i in picked:
        t1 = with_tools[i]
        base = harness_manifest(t1.harness, base_manifests)
        for level, noise in LEVELS.items():
            case_seed = _seed(f"t3:{seed}:{t1.id}:{level}")
            manifest, tool_map = perturb(base, noise, case_seed)
            hv = HarnessVariant(kind="perturbation", seed=case_seed, level=level,  # type: ignore[arg-type]
                                noise=dict(noise), tool_map=tool_map, harness_hash=content_hash(manifest))
            out.append(_derived(t1, f"t3-{len(out) + 1:04d}", hv, ("perturbation", f"level_{level}"),
                                f"t3:{seed}:{level}"))
    single = [c for c in t1_cases if "multi_question" not in c.tags and len(c.expected_tools) == 1
              and not c.expected_tools[0].optional and c.gold_facts]
    order = rng.sample(single, len(single))
    for k, kind in enumerate(FAULT_KINDS):
        for t1 in order[k * FAULT_CASES_PER_KIND:(k + 1) * FAULT_CASES_PER_KIND]:
            binding = t1.expected_tools[0].binding
            delay = SLOW_MS if kind == "slow" else 0
            fault = ToolFault(binding=binding, kind=kind, delay_ms=delay)  # type: ignore[arg-type]
            base = harness_manifest(t1.harness, base_manifests)
            hv = HarnessVariant(kind="perturbation", seed=0, level="clean", harness_hash=content_hash(base))
            out.append(_derived(t1, f"t3-{len(out) + 1:04d}", hv, ("fault", f"fault_{kind}"), f"t3:{seed}:fault",
                                tool_faults={binding: fault.model_dump()}, **_faulted(t1, kind)))
    return out
