"""Names for any domain: replacement tool, parameter and skill names, distractor skills and decoy tools made from a
harness's own words and the generic pools of :mod:`training_jobs.hsa.names`.

The live-commerce tables (``names.TOOL_NAMES``, ``PARAM_NAMES``, ``SKILL_SYNONYMS``, the live-room distractors and
decoys) fit the live room only: a customer-service agent's ``get_order_details`` must not become
``current_promotions``, nor an exchange skill a word for shipping. So:

- a tool bound to a built-in live-commerce binding whose name shares a word with that binding's table keeps
  drawing from the table; any other tool is renamed from its own words: its verb swapped for a synonym of the same
  kind (read verbs among read verbs, an action verb for its own synonyms), generic object words dropped, swapped
  or added, or the style changed (camelCase);
- a parameter listed in ``names.PARAM_NAMES`` draws from it, any other is renamed from its own words (a last-word
  synonym, camelCase, or the tool's object word in front);
- a harness is *live commerce* when most of its tools are bound to the built-in catalog: only then do skills use
  the topic tables and distractors/decoys the live-room ones; otherwise skills take generic templates and the
  distractors/decoys are made from the harness's most frequent nouns.

Training draws skip every held-out name (``names.is_heldout_name``), so generated names stay disjoint from the
held-out ones. Plain Python, no Django.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from harness_editor.schemas import SKILL_ID_RE, TOOL_NAME_RE
from harness_editor.schemas.bindings import BUILTIN_BINDINGS
from training_jobs.hsa import names as N

_SPLIT_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_STOP = frozenset("a an and are as at be by can for from if in into is it its no not of on or the this to was "
                  "with you your when what which who will do does one all any".split())
_ALL_READ = frozenset(v for pool in N.POOLS for v in N.READ_VERBS[pool])
_ACTION_KEYS = frozenset(N.ACTION_VERBS["train"])
_GENERIC = frozenset(n for pool in N.POOLS for n in N.GENERIC_NOUNS[pool]) | {"id", "ids", "by"}


def words(name: str) -> list[str]:
    """The lower-case words of an identifier: ``get_orderDetails-v2`` -> ``["get", "order", "details", "v", "2"]``."""
    return [w.lower() for w in _SPLIT_RE.findall(name)]


def _snake(ws: Sequence[str]) -> str:
    return "_".join(ws)


def _camel(ws: Sequence[str]) -> str:
    parts = "_".join(ws).split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def _ok_tool(name: str, pool: N.Pool) -> bool:
    return bool(TOOL_NAME_RE.fullmatch(name)) and (pool == "heldout" or not N.is_heldout_name(name))


# --- is this the live room? ------------------------------------------------------------------------------------


def is_live_commerce(state: Mapping[str, Any]) -> bool:
    """Most tools are bound to the built-in live-commerce catalog (a harness without tools: its skills decide,
    which here means no)."""
    tools = state["tools"]
    builtin = sum(1 for t in tools if isinstance(t.get("binding"), str) and t["binding"] in BUILTIN_BINDINGS)
    return bool(tools) and 2 * builtin >= len(tools)


@lru_cache(maxsize=64)
def _table_words(binding_id: str) -> frozenset[str]:
    out = set(words(binding_id))
    for pool in N.POOLS:
        for name in N.TOOL_NAMES[pool].get(binding_id, ()):
            out.update(words(name))
    return frozenset(out - _ALL_READ - _ACTION_KEYS - _STOP - {"info", "get"})


def uses_live_commerce_table(tool: Mapping[str, Any]) -> bool:
    """A built-in-bound tool whose own name is about what its binding does ("lookup_product" on
    catalog.product_info), not a foreign tool someone bound to a built-in ("get_order_details" on campaign.state)."""
    b = tool.get("binding")
    if not isinstance(b, str) or b not in N.TOOL_NAMES["train"]:
        return False
    return bool(set(words(tool["name"])) & _table_words(b))


# --- tools ------------------------------------------------------------------------------------------------------


def tool_name_options(name: str, pool: N.Pool) -> list[str]:
    """Replacement names of a tool from its own words: the verb swapped within its kind, generic object words
    dropped, swapped or added, camelCase. Never the name itself; training options are never held-out names."""
    ws = words(name)
    if not ws:
        return []
    verb, obj = (ws[0], ws[1:]) if (ws[0] in _ALL_READ or ws[0] in _ACTION_KEYS) and len(ws) > 1 else (None, ws)
    if verb is None or verb in _ALL_READ:
        verbs = [v for v in N.READ_VERBS[pool] if v != verb]
    else:
        verbs = list(N.ACTION_VERBS[pool].get(verb, ()))
    objects = [obj]
    core = [w for w in obj if w not in _GENERIC]
    if core and core != obj:
        objects.append(core)  # "order_details" -> "order"
    if verb is None or verb in _ALL_READ:  # an action keeps its object as it is
        for noun in N.GENERIC_NOUNS[pool]:
            if noun not in obj:
                objects.append((core or obj) + [noun])  # "order" -> "order_record"
    out: list[str] = []
    for o in objects:
        for v in verbs:
            out.append(_snake([v, *o]))
            out.append(_camel([v, *o]))
        if verb is not None and o != obj:
            out.append(_snake([verb, *o]))
    out += [_camel(ws)] if len(ws) > 1 and pool == "train" else []  # (held-out names carry held-out words)
    seen: set[str] = set()
    return [o for o in out if o != name and not (o in seen or seen.add(o)) and _ok_tool(o, pool)]


def tool_object(name: str) -> list[str]:
    """The object words of a tool name (its verb left out): ``start_return`` -> ``["return"]``."""
    ws = words(name)
    if len(ws) > 1 and (ws[0] in _ALL_READ or ws[0] in _ACTION_KEYS):
        ws = ws[1:]
    return [w for w in ws if w not in _GENERIC] or ws


def param_name_options(param: str, tool_names: Sequence[str], pool: N.Pool) -> list[str]:
    """Replacement names of a parameter from its own words: a last-word synonym, camelCase, or the object word of
    the tools that have it in front (``reason`` of ``cancel_order`` -> ``order_reason``)."""
    ws = words(param)
    if not ws:
        return []
    out: list[str] = []
    for syn in N.PARAM_WORD_SYNONYMS[pool].get(ws[-1], ()):
        out.append(_snake([*ws[:-1], syn]))
    if pool == "train":
        if len(ws) > 1:
            out.append(_camel(ws))
        objects = {tool_object(t)[0] for t in tool_names if tool_object(t)}
        if len(objects) == 1:
            (noun,) = objects
            if noun not in ws:
                out.append(_snake([noun, *ws]))
    else:
        out.append(_snake([*ws, "handle"]) if ws[-1] != "handle" else _snake([*ws, "moniker"]))
    seen: set[str] = set()
    return [o for o in out if o != param and not (o in seen or seen.add(o)) and TOOL_NAME_RE.fullmatch(o)
            and (pool == "heldout" or not N.is_heldout_name(o))]


# --- skills ------------------------------------------------------------------------------------------------------


def skill_id_options(skill_id: str, pool: N.Pool) -> list[str]:
    out = [t.replace("{id}", skill_id) for t in N.GENERIC_SKILL_IDS[pool]]
    return [o for o in out if SKILL_ID_RE.fullmatch(o) and len(o) <= 64
            and (pool == "heldout" or not N.is_heldout_name(o))]


# --- the harness's nouns, distractors and decoys -----------------------------------------------------------------


def domain_nouns(state: Mapping[str, Any], limit: int = 6) -> list[str]:
    """The harness's most frequent object words (tool objects, skill id words, parameter words), most frequent
    first, ties by first appearance: what its distractors and decoys are about."""
    count: Counter[str] = Counter()
    order: dict[str, int] = {}

    def add(ws: Sequence[str], weight: int) -> None:
        for w in ws:
            if len(w) < 3 or w in _STOP or w in _GENERIC or w in _ALL_READ or w in _ACTION_KEYS or w.isdigit():
                continue
            count[w] += weight
            order.setdefault(w, len(order))

    for t in state["tools"]:  # what tools act on counts most, then skill topics, then parameter words
        add(tool_object(t["name"]), 3)
        add([w for p in (t["parameters"].get("properties") or {}) for w in words(p)], 1)
    for sk in state["skills"]:
        add(words(sk["id"]), 2)
    return sorted(count, key=lambda w: (-count[w], order[w]))[:limit]


def _fill(template: Any, noun: str) -> Any:
    if isinstance(template, str):
        return template.replace("{noun}", noun)
    if isinstance(template, dict):
        return {_fill(k, noun): _fill(v, noun) for k, v in template.items()}
    return template


def domain_distractors(state: Mapping[str, Any], pool: N.Pool) -> list[tuple[str, str, str, str]]:
    """(id, kind, description, body) of distractor skills about the harness's own nouns."""
    out = []
    for noun in domain_nouns(state):
        for d in N.DOMAIN_DISTRACTORS[pool]:
            sid, kind, desc, body = (_fill(x, noun) for x in d)
            if SKILL_ID_RE.fullmatch(sid) and len(sid) <= 64 and (pool == "heldout" or not N.is_heldout_name(sid)):
                out.append((sid, kind, desc, body))
    return out


def domain_decoys(state: Mapping[str, Any], pool: N.Pool) -> list[tuple[str, str, dict]]:
    """(name, description, properties) of decoy tools about the harness's own nouns."""
    out = []
    for noun in domain_nouns(state):
        for name, desc, props in N.DOMAIN_DECOYS[pool]:
            name = _fill(name, noun)
            if _ok_tool(name, pool):
                out.append((name, _fill(desc, noun), _fill(props, noun)))
    return out
