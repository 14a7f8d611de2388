"""HSA operators: task-preserving variations of a harness state (DESIGN.md section 6).

Every operator is ``op(harness_state, sample, rng) -> (harness_state', sample', rename_map)``: pure (inputs are
never mutated; unchanged parts are shared, changed parts copied) and seeded (all randomness from ``rng``). The
harness state is the manifest as plain JSON data (``manifest.model_dump(mode="json")``) so a chain of edits
costs dict copies, not a pydantic validation per step; :func:`validate_state` turns the final state into a
:class:`Manifest` through ``parse_manifest``, and every operator's output passes it (tests check each one).

The harness edit of an operator never reads the sample (:meth:`Operator.edit_harness`); the sample edit
relabels the target through the rename map and, for the correction operator, adds a hook retry
(:meth:`Operator.edit_sample`). That split lets the dataset builder share one validated harness variant among
many samples (``Recipe.harness_pool_size``) without changing what any operator does.

Names, phrasings and held-out settings come from :mod:`training_jobs.hsa.names`: an operator configured with
``pool="train"`` only ever draws training values, ``pool="heldout"`` only evaluation values.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from harness_editor.schemas import (
    SKILL_ID_RE,
    TOOL_NAME_RE,
    InteractionConstraints,
    Manifest,
    ManifestError,
    RetryControlHook,
    parse_manifest,
)
from streams.bindings import BINDINGS
from streams.engine import hooks as H
from training_jobs.hsa import names as N
from training_jobs.hsa.relabel import IDENTITY, TO_STRING, RenameMap, relabel_arguments
from training_jobs.hsa.samples import LoadSkill, Reply, Retry, Sample, Step, ToolCall

HarnessState = dict[str, Any]  # a manifest as JSON data; operators treat it as immutable


def harness_state(manifest: Manifest) -> HarnessState:
    return manifest.model_dump(mode="json")


def validate_state(state: HarnessState) -> Manifest:
    """The state as a Manifest; raises ManifestError (with paths) when an operator broke the harness."""
    return parse_manifest(state)


# --- shared helpers ---------------------------------------------------------------------------------------------


def relabel_target(target: Sequence[Step], m: RenameMap) -> tuple[Step, ...]:
    """The target under the map: ``load_skill`` ids, tool names and arguments (paths moved, types switched)."""
    if m.empty:
        return tuple(target)
    out: list[Step] = []
    for s in target:
        if isinstance(s, LoadSkill):
            out.append(LoadSkill(s.call_id, m.skill(s.skill_id)) if s.skill_id in m.skills else s)
        elif isinstance(s, ToolCall):
            out.append(ToolCall(s.call_id, m.tool(s.name), relabel_arguments(m, s.name, s.arguments), s.result,
                                s.result_text))
        else:
            out.append(s)
    return tuple(out)


def _share(rng: random.Random, items: Sequence[Any], share: float) -> list[Any]:
    """Each item with probability ``share``, at least one (when there are any)."""
    if not items:
        return []
    picked = [x for x in items if rng.random() < share]
    return picked or [rng.choice(list(items))]


def _edit_share(state: HarnessState, key: str, rng: random.Random, share: float, field: str,
                edit: Callable[[str], str], *, max_len: int | None = None,
                eligible: Callable[[str], bool] = lambda _text: True) -> HarnessState:
    """``edit`` the ``field`` text of a random share of ``state[key]`` (skills, tools, hooks), keeping an edit
    only when it changes the text and fits ``max_len``; the same state object when nothing changed."""
    picked = {id(x) for x in _share(rng, state[key], share)}
    items, changed = [], False
    for item in state[key]:
        if id(item) in picked and eligible(item[field]):
            new = edit(item[field])
            if new != item[field] and (max_len is None or len(new) <= max_len):
                item = {**item, field: new}
                changed = True
        items.append(item)
    return {**state, key: items} if changed else state


def _distinctive(name: str) -> bool:
    """Can a bare mention of this name in prose be taken for the name itself? ("lookup_product" yes,
    "shipping" no: that one is only replaced inside backticks)."""
    return any(c in name for c in "_-.") or not name.isascii() or any(c.isupper() for c in name[1:])


@lru_cache(maxsize=4096)
def _mention_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    bare = [re.escape(n) for n in sorted(names, key=len, reverse=True) if _distinctive(n)]
    quoted = [re.escape(n) for n in sorted(names, key=len, reverse=True)]
    parts = [f"`(?:{'|'.join(quoted)})`"]
    if bare:
        parts.append(rf"(?<![\w\-])(?:{'|'.join(bare)})(?![\w\-])")
    return re.compile("|".join(parts))


def rename_mentions(text: str, mapping: Mapping[str, str]) -> str:
    """Rewrite mentions of renamed identifiers (tool, parameter, skill names) in prose."""
    if not mapping or not text:
        return text
    pattern = _mention_pattern(tuple(sorted(mapping)))

    def sub(m: re.Match[str]) -> str:
        found = m.group(0)
        if found.startswith("`"):
            return f"`{mapping[found[1:-1]]}`"
        return mapping[found]

    return pattern.sub(sub, text)


def _schema_descriptions(node: Any, mapping: Mapping[str, str]) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "description" and isinstance(v, str):
                out[k] = rename_mentions(v, mapping)
            else:
                out[k] = _schema_descriptions(v, mapping)
        return out
    if isinstance(node, list):
        return [_schema_descriptions(v, mapping) for v in node]
    return node


def rename_in_texts(state: HarnessState, mapping: Mapping[str, str]) -> HarnessState:
    """Every prose field of the harness with mentions renamed: skill descriptions and bodies, tool and
    parameter descriptions, prompt blocks, hook messages and the fallback line."""
    if not mapping:
        return state
    r = rename_mentions
    skills = [{**s, "description": r(s["description"], mapping), "body": r(s["body"], mapping)}
              for s in state["skills"]]
    tools = [{**t, "description": r(t["description"], mapping),
              "parameters": _schema_descriptions(t["parameters"], mapping)} for t in state["tools"]]
    blocks = [{**b, "content": r(b["content"], mapping), "items": [r(i, mapping) for i in b["items"]]}
              for b in state["prompt"]["blocks"]]
    hooks = []
    for h in state["hooks"]:
        h = {**h, "message": r(h["message"], mapping)}
        if "fallback_reply" in h:
            h["fallback_reply"] = r(h["fallback_reply"], mapping)
        hooks.append(h)
    return {**state, "skills": skills, "tools": tools, "hooks": hooks,
            "prompt": {**state["prompt"], "blocks": blocks}}


_WORD_RE_CACHE: dict[str, re.Pattern[str]] = {}


def reword(text: str, rng: random.Random, pool: N.Pool, density: float) -> str:
    """Swap words for synonyms (outside `code spans`), each occurrence with probability ``density``."""
    table = N.WORD_SYNONYMS[pool]
    pattern = _WORD_RE_CACHE.get(pool)
    if pattern is None:
        pattern = re.compile(r"\b(" + "|".join(sorted(table, key=len, reverse=True)) + r")\b", re.I)
        _WORD_RE_CACHE[pool] = pattern

    def sub(m: re.Match[str]) -> str:
        word = m.group(0)
        if rng.random() >= density:
            return word
        new = rng.choice(table[word.lower()])
        return new[0].upper() + new[1:] if word[0].isupper() else new

    parts = text.split("`")
    for i in range(0, len(parts), 2):  # even parts are outside code spans
        parts[i] = pattern.sub(sub, parts[i])
    return "`".join(parts)


def _frame(description: str, rng: random.Random, pool: N.Pool) -> str:
    frame = rng.choice(N.DESCRIPTION_FRAMES[pool])
    d = description.rstrip()
    lowered = d[0].lower() + d[1:] if d[:1].isupper() and not d[1:2].isupper() else d
    return frame.replace("{D}", d).replace("{d}", lowered)


def _all_texts_masked() -> frozenset[str]:
    return frozenset(t for pool in N.POOLS for t in N.MASKED_DESCRIPTIONS[pool])


_MASKED = _all_texts_masked()
_DECOY_NAMES = frozenset(n for pool in N.POOLS for n, _, _ in N.DECOY_TOOLS[pool])


def _is_opaque(skill_id: str) -> bool:
    return any(p.match(skill_id) for p in N.OPAQUE_SKILL_RE.values())


def _topic(skill: Mapping[str, Any]) -> str:
    text = f"{skill['id']} {skill['description']}".lower()
    for topic, hints in N.SKILL_TOPIC_HINTS:
        if any(h in text for h in hints):
            return topic
    return "generic"


# --- the operator type ---------------------------------------------------------------------------------------------

HarnessEdit = Callable[[HarnessState, random.Random, N.Pool, Mapping[str, Any]], tuple[HarnessState, RenameMap]]
SampleEdit = Callable[[HarnessState, Sample, random.Random, N.Pool, Mapping[str, Any]], Sample]


@dataclass(frozen=True)
class Operator:
    """One HSA operator, configured with a name pool and settings; call it as ``op(state, sample, rng)``."""

    name: str
    dimension: str  # skill_ids | skill_content | tools | system_prompt | hooks
    description: str
    harness: HarnessEdit | None = None
    sample: SampleEdit | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    touches_checks: bool = False  # can make a valid target invalid: the builder re-checks and drops
    pool: N.Pool = "train"
    settings: Mapping[str, Any] = field(default_factory=dict)

    def configured(self, *, pool: N.Pool = "train", **settings: Any) -> Operator:
        unknown = set(settings) - set(self.defaults)
        if unknown:
            raise ValueError(f"operator {self.name!r} has no settings {sorted(unknown)}; it has {sorted(self.defaults)}")
        return replace(self, pool=pool, settings={**self.defaults, **settings})

    def _settings(self) -> Mapping[str, Any]:
        return self.settings or self.defaults

    def edit_harness(self, state: HarnessState, rng: random.Random) -> tuple[HarnessState, RenameMap]:
        if self.harness is None:
            return state, IDENTITY
        return self.harness(state, rng, self.pool, self._settings())

    def edit_sample(self, state: HarnessState, sample: Sample, rng: random.Random, m: RenameMap) -> Sample:
        if not m.empty:
            sample = sample.with_target(relabel_target(sample.target, m))
        if self.sample is not None:
            sample = self.sample(state, sample, rng, self.pool, self._settings())
        return sample

    def __call__(self, state: HarnessState, sample: Sample, rng: random.Random
                 ) -> tuple[HarnessState, Sample, RenameMap]:
        new_state, m = self.edit_harness(state, rng)
        return new_state, self.edit_sample(new_state, sample, rng, m), m


# --- skill identifiers ---------------------------------------------------------------------------------------------


def _rename_skills(state: HarnessState, rng: random.Random, pool: N.Pool, s: Mapping[str, Any]):
    ids = [sk["id"] for sk in state["skills"]]
    taken = set(ids)
    styles = [k for k in ("synonym", "foreign", "opaque") if s[k] > 0]
    weights = [s[k] for k in styles]
    mapping: dict[str, str] = {}
    for sk in _share(rng, state["skills"], s["share"]):
        style = rng.choices(styles, weights)[0]
        if style == "opaque" and sk["description"] in _MASKED:
            style = "synonym"  # a masked description and an opaque id together would leave nothing to route by
        if style == "opaque":
            fmt = N.OPAQUE_SKILL_FORMAT[pool]
            new = fmt.replace("{hex4}", f"{rng.getrandbits(16):04x}").replace("{digits4}", f"{rng.randrange(10000):04d}")
        else:
            table = (N.SKILL_SYNONYMS if style == "synonym" else N.SKILL_FOREIGN)[pool]
            options = [o.replace("{id}", sk["id"]) for o in table.get(_topic(sk), table["generic"])]
            options = [o for o in options if o not in taken]
            if not options:
                continue
            new = rng.choice(options)
        if new in taken or not SKILL_ID_RE.fullmatch(new) or len(new) > 64:
            continue
        taken.add(new)
        mapping[sk["id"]] = new
    if not mapping:
        return state, IDENTITY
    skills = [{**sk, "id": mapping.get(sk["id"], sk["id"])} for sk in state["skills"]]
    return rename_in_texts({**state, "skills": skills}, mapping), RenameMap(skills=mapping)


def _rewrite_skill_descriptions(state, rng, pool, s):
    return _edit_share(state, "skills", rng, s["share"], "description",
                       lambda text: _frame(reword(text, rng, pool, s["density"]), rng, pool),
                       max_len=300, eligible=lambda text: text not in _MASKED), IDENTITY


def _mask_skill_descriptions(state, rng, pool, s):
    candidates = [sk for sk in state["skills"] if not _is_opaque(sk["id"]) and sk["description"] not in _MASKED]
    if not candidates:
        return state, IDENTITY
    picked = {id(x) for x in _share(rng, candidates, s["share"])}
    skills = [{**sk, "description": rng.choice(N.MASKED_DESCRIPTIONS[pool])} if id(sk) in picked else sk
              for sk in state["skills"]]
    return {**state, "skills": skills}, IDENTITY


def _add_distractor_skills(state, rng, pool, s):
    taken = {sk["id"] for sk in state["skills"]}
    options = [d for d in N.DISTRACTOR_SKILLS[pool] if d[0] not in taken]
    room = 200 - len(state["skills"])
    n = min(rng.randint(1, s["max_added"]), len(options), room)
    if n <= 0:
        return state, IDENTITY
    skills = list(state["skills"])
    for sid, kind, desc, body in rng.sample(options, n):
        skills.insert(rng.randint(0, len(skills)), {"id": sid, "kind": kind, "description": desc, "body": body,
                                                    "allowed_tools": []})
    return {**state, "skills": skills}, IDENTITY


# --- skill content --------------------------------------------------------------------------------------------------

_NUMBERED_RE = re.compile(r"^(\s*)(\d+)\.\s+")


@dataclass
class _Body:
    """A skill body split into rules: the numbered items of its lists, or (no list) its lines when every line
    is a whole sentence. ``parts`` is text and rule-list entries in order."""

    parts: list[Any]  # str (verbatim text) | list[list[str]] (a list of rules, each rule its lines)

    @classmethod
    def parse(cls, body: str) -> _Body:
        lines = body.split("\n")
        parts: list[Any] = []
        text: list[str] = []
        rules: list[list[str]] = []
        for line in lines:
            if _NUMBERED_RE.match(line):
                if text and rules:
                    parts.append(rules)
                    rules = []
                if text:
                    parts.append("\n".join(text))
                    text = []
                rules.append([line])
            elif rules and line.startswith((" ", "\t")) and line.strip():
                rules[-1].append(line)  # continuation of the rule above
            else:
                if rules:
                    parts.append(rules)
                    rules = []
                text.append(line)
        if rules:
            parts.append(rules)
        if text:
            parts.append("\n".join(text))
        if not any(isinstance(p, list) for p in parts):
            content = [ln for ln in lines if ln.strip()]
            if len(content) >= 2 and all(ln.rstrip().endswith((".", "!", "?", ":")) and not ln.lstrip().startswith("#")
                                         for ln in content):
                trailing = "\n" if body.endswith("\n") else ""
                return cls([[[ln] for ln in content], trailing])
        return cls(parts)

    def rule_lists(self) -> list[list[list[str]]]:
        return [p for p in self.parts if isinstance(p, list)]

    def render(self) -> str:
        out: list[str] = []
        for p in self.parts:
            if isinstance(p, str):
                out.append(p)
            else:
                numbered = bool(p) and _NUMBERED_RE.match(p[0][0]) is not None
                lines: list[str] = []
                for i, rule in enumerate(p, 1):
                    first = rule[0]
                    if numbered:
                        m = _NUMBERED_RE.match(first)
                        if m is not None:
                            first = f"{m.group(1)}{i}. {first[m.end():]}"
                    lines.extend([first, *rule[1:]])
                out.append("\n".join(lines))
        return "\n".join(out)


def _reword_skill_rules(state, rng, pool, s):
    return _edit_share(state, "skills", rng, s["share"], "body", lambda text: reword(text, rng, pool, s["density"]),
                       max_len=20000), IDENTITY


def _reorder_skill_rules(state, rng, pool, s):
    def shuffled(body: str) -> str:
        parsed = _Body.parse(body)
        for rules in parsed.rule_lists():
            if len(rules) >= 2:
                rng.shuffle(rules)
        return parsed.render()

    return _edit_share(state, "skills", rng, s["share"], "body", shuffled), IDENTITY


_ESSENTIAL_RE = re.compile(r"`|\b(never|not|only|must|exact|exactly|always|no|don't|cannot|before)\b", re.I)


def _identifiers(state: HarnessState) -> list[str]:
    return [t["name"] for t in state["tools"]] + [sk["id"] for sk in state["skills"]]


def _mask_skill_rule(state, rng, pool, s):
    """Drop one rule that no task depends on: it names no tool, parameter or skill and forbids nothing."""
    idents = _identifiers(state)
    candidates: list[tuple[int, int, int]] = []  # (skill index, list index, rule index)
    parsed_bodies: dict[int, _Body] = {}
    for i, sk in enumerate(state["skills"]):
        parsed = _Body.parse(sk["body"])
        for j, rules in enumerate(parsed.rule_lists()):
            if len(rules) < 2:
                continue
            for k, rule in enumerate(rules):
                text = " ".join(rule)
                if _ESSENTIAL_RE.search(text) or any(n in text for n in idents):
                    continue
                candidates.append((i, j, k))
                parsed_bodies[i] = parsed
    if not candidates:
        return state, IDENTITY
    i, j, k = rng.choice(candidates)
    parsed = parsed_bodies[i]
    del parsed.rule_lists()[j][k]
    body = parsed.render()
    if not body.strip():
        return state, IDENTITY
    skills = list(state["skills"])
    skills[i] = {**skills[i], "body": body}
    return {**state, "skills": skills}, IDENTITY


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
    return tool["name"] in _DECOY_NAMES


def _rename_tools(state, rng, pool, s):
    taken = {t["name"] for t in state["tools"]}
    mapping: dict[str, str] = {}
    for t in _share(rng, [t for t in state["tools"] if not _is_decoy(t)], s["share"]):
        options = [o for o in N.TOOL_NAMES[pool].get(t["binding"], ()) if o not in taken]
        if not options:
            continue
        new = rng.choice(options)
        if TOOL_NAME_RE.fullmatch(new):
            taken.add(new)
            mapping[t["name"]] = new
    if not mapping:
        return state, IDENTITY
    tools = [{**t, "name": mapping.get(t["name"], t["name"])} for t in state["tools"]]
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
    present: dict[str, list[int]] = {}
    for i, t in enumerate(state["tools"]):
        for path in leaf_paths(t["parameters"]):
            leaf = path.rsplit(".", 1)[-1]
            if leaf in table:
                present.setdefault(leaf, []).append(i)
    if not present:
        return state, IDENTITY
    mapping: dict[str, str] = {}
    for leaf in _share(rng, sorted(present), s["share"]):
        siblings = set()
        for i in present[leaf]:
            siblings.update(p.rsplit(".", 1)[-1] for p in leaf_paths(state["tools"][i]["parameters"]))
        options = [o for o in table[leaf] if o not in siblings and o not in mapping.values()]
        if options:
            mapping[leaf] = rng.choice(options)
    if not mapping:
        return state, IDENTITY
    tools = []
    paths: dict[str, dict[str, str]] = {}
    for t in state["tools"]:
        old_paths = leaf_paths(t["parameters"])
        if not any(p.rsplit(".", 1)[-1] in mapping for p in old_paths):
            tools.append(t)
            continue
        params = _rename_props(t["parameters"], mapping)
        moved = {p: ".".join(mapping.get(seg, seg) for seg in p.split(".")) for p in old_paths}
        moved = {p: q for p, q in moved.items() if p != q}
        paths[t["name"]] = moved
        amap = {impl: moved.get(p, p) for impl, p in t["argument_map"].items()}
        tools.append({**t, "parameters": params, "argument_map": amap})
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
                                                and not _is_decoy(t))]
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
        paths[t["name"]] = {p: f"{key}.{p}" for p in leaf_paths(params)}
        amap = {impl: f"{key}.{p}" for impl, p in t["argument_map"].items()}
        tools.append({**t, "parameters": outer, "argument_map": amap})
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
        if _is_decoy(t):
            continue
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
    options = [d for d in N.DECOY_TOOLS[pool] if d[0] not in taken]
    n = min(rng.randint(1, s["max_added"]), len(options), 100 - len(state["tools"]))
    if n <= 0:
        return state, IDENTITY
    tools = list(state["tools"])
    for name, desc, props in rng.sample(options, n):
        decoy = {"name": name, "description": desc, "binding": "campaign.state", "argument_map": {},
                 "parameters": {"type": "object", "properties": {k: dict(v) for k, v in props.items()},
                                "additionalProperties": False}}
        tools.insert(rng.randint(0, len(tools)), decoy)
    return {**state, "tools": tools}, IDENTITY


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


# --- the catalogue ------------------------------------------------------------------------------------------------------

_SHARE = {"share": 0.5}
OPERATORS: dict[str, Operator] = {op.name: op for op in (
    Operator("rename_skills", "skill_ids", "Rename skill ids: readable synonyms, other languages, opaque codes.",
             _rename_skills, defaults={"share": 0.5, "synonym": 0.4, "foreign": 0.3, "opaque": 0.3}),
    Operator("rewrite_skill_descriptions", "skill_ids", "Reword skill descriptions and reframe them.",
             _rewrite_skill_descriptions, defaults={"share": 0.5, "density": 0.6}),
    Operator("mask_skill_descriptions", "skill_ids",
             "Replace descriptions with a blank line (never where the id is an opaque code).",
             _mask_skill_descriptions, defaults={"share": 0.3}),
    Operator("add_distractor_skills", "skill_ids", "Add plausible skills that no demo task needs.",
             _add_distractor_skills, defaults={"max_added": 2}),
    Operator("reword_skill_rules", "skill_content", "Reword skill bodies from the synonym table.",
             _reword_skill_rules, defaults={"share": 0.5, "density": 0.5}),
    Operator("reorder_skill_rules", "skill_content", "Shuffle the rules of skill bodies (and renumber them).",
             _reorder_skill_rules, defaults=dict(_SHARE)),
    Operator("mask_skill_rule", "skill_content", "Drop one rule no task depends on.", _mask_skill_rule),
    Operator("rename_tools", "tools", "Rename tools (the binding stays); skills and prose follow.",
             _rename_tools, defaults=dict(_SHARE)),
    Operator("rename_tool_params", "tools", "Rename parameters; argument maps, required lists and prose follow.",
             _rename_tool_params, defaults=dict(_SHARE)),
    Operator("rewrite_tool_descriptions", "tools", "Reword and reframe tool descriptions.",
             _rewrite_tool_descriptions, defaults={"share": 0.5, "density": 0.6}),
    Operator("reorder_tool_properties", "tools", "Shuffle property order (and the order of the tools).",
             _reorder_tool_properties, defaults={"reorder_tools": True}),
    Operator("wrap_tool_arguments", "tools", "Nest a tool's arguments inside one object parameter.",
             _wrap_tool_arguments, defaults={"share": 0.4}),
    Operator("switch_id_types", "tools", "Integer ids become digit strings where the binding coerces them.",
             _switch_id_types, defaults={"share": 0.5}),
    Operator("add_optional_params", "tools", "Add optional parameters the gold call does not use.",
             _add_optional_params, defaults={"share": 0.4, "max_added": 2}),
    Operator("add_decoy_tools", "tools", "Add plausible tools no demo task needs.",
             _add_decoy_tools, defaults={"max_added": 2}),
    Operator("reorder_prompt_blocks", "system_prompt", "Shuffle prompt blocks and the items inside blocks.",
             _reorder_prompt_blocks, defaults={"block_share": 0.8, "item_share": 0.6}),
    Operator("change_prompt_layout", "system_prompt", "Switch layout (markdown/xml/json/plain) and headings.",
             _change_prompt_layout, defaults={"layout_share": 0.8, "title_share": 0.5}),
    Operator("move_numeric_constraints", "system_prompt",
             "Move reply length, tool rounds and request limit within their legal ranges.",
             _move_numeric_constraints, defaults={"share": 0.5}, touches_checks=True),
    Operator("vary_hook_limits", "hooks", "Vary retry limits, the fallback line and the sentence cap.",
             _vary_hook_limits, defaults={"sentence_cap_share": 0.4}, touches_checks=True),
    Operator("reword_hook_messages", "hooks", "Reword hook messages and change their structure.",
             _reword_hook_messages, defaults={"share": 0.6, "density": 0.5}),
    Operator("synthesise_hook_correction", "hooks",
             "Add a first reply a hook rejects, the hook's feedback and the corrected reply.",
             sample=_synthesise_hook_correction, touches_checks=True),
)}
DIMENSIONS = ("skill_ids", "skill_content", "tools", "system_prompt", "hooks")


def operator(name: str, *, pool: N.Pool = "train", **settings: Any) -> Operator:
    if name not in OPERATORS:
        raise KeyError(f"unknown HSA operator {name!r}; known: {', '.join(OPERATORS)}")
    return OPERATORS[name].configured(pool=pool, **settings)


def apply_chain(ops: Iterable[Operator], state: HarnessState, sample: Sample, rng: random.Random
                ) -> tuple[HarnessState, Sample, RenameMap, list[str]]:
    """Apply operators in order; returns the final state, sample, the composed map and the names of the
    operators that changed something."""
    m = IDENTITY
    applied: list[str] = []
    for op in ops:
        new_state, new_sample, step = op(state, sample, rng)
        if new_state is not state or new_sample is not sample:
            applied.append(op.name)
        state, sample, m = new_state, new_sample, m.then(step)
    return state, sample, m, applied


def reply_of(target: Sequence[Step]) -> str:
    last = target[-1]
    assert isinstance(last, Reply)
    return last.text
