"""The harness state HSA operators edit (a manifest as JSON data) and the helpers every operator shares: relabel a
target through a rename map, pick a random share of items, rewrite prose (rename mentions, reword from the synonym
tables, frame descriptions). Split from :mod:`training_jobs.hsa.operators` along its seams."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from harness_editor.schemas import Manifest, parse_manifest
from training_jobs.hsa import names as N
from training_jobs.hsa.relabel import RenameMap, relabel_arguments
from training_jobs.hsa.samples import LoadSkill, Step, ToolCall

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


