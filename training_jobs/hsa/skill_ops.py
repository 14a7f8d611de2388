"""HSA operators on skills: identifiers (rename, reword or mask descriptions, distractors) and content (reword,
reorder and mask rules). Split from :mod:`training_jobs.hsa.operators` along its seams."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness_editor.schemas import SKILL_ID_RE
from training_jobs.hsa import names as N
from training_jobs.hsa import vocabulary as V
from training_jobs.hsa.relabel import IDENTITY, RenameMap
from training_jobs.hsa.state import (
    HarnessState,
    _edit_share,
    _frame,
    _share,
    rename_in_texts,
    reword,
)


def _all_texts_masked() -> frozenset[str]:
    return frozenset(t for pool in N.POOLS for t in N.MASKED_DESCRIPTIONS[pool])


_MASKED = _all_texts_masked()


def _is_opaque(skill_id: str) -> bool:
    return any(p.match(skill_id) for p in N.OPAQUE_SKILL_RE.values())


def _topic(skill: Mapping[str, Any]) -> str:
    text = f"{skill['id']} {skill['description']}".lower()
    for topic, hints in N.SKILL_TOPIC_HINTS:
        if any(h in text for h in hints):
            return topic
    return "generic"


# --- skill identifiers ---------------------------------------------------------------------------------------------


def _rename_skills(state: HarnessState, rng: random.Random, pool: N.Pool, s: Mapping[str, Any]):
    ids = [sk["id"] for sk in state["skills"]]
    taken = set(ids)
    styles = [k for k in ("synonym", "foreign", "opaque") if s[k] > 0]
    weights = [s[k] for k in styles]
    mapping: dict[str, str] = {}
    commerce = V.is_live_commerce(state)  # topic tables are live-room words; any other domain: generic templates
    for sk in _share(rng, state["skills"], s["share"]):
        style = rng.choices(styles, weights)[0]
        if style == "opaque" and sk["description"] in _MASKED:
            style = "synonym"  # a masked description and an opaque id together would leave nothing to route by
        if style == "opaque":
            fmt = N.OPAQUE_SKILL_FORMAT[pool]
            new = fmt.replace("{hex4}", f"{rng.getrandbits(16):04x}").replace("{digits4}", f"{rng.randrange(10000):04d}")
        else:
            if commerce:
                table = (N.SKILL_SYNONYMS if style == "synonym" else N.SKILL_FOREIGN)[pool]
                options = [o.replace("{id}", sk["id"]) for o in table.get(_topic(sk), table["generic"])]
            else:
                options = V.skill_id_options(sk["id"], pool)
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
    pool_skills = N.DISTRACTOR_SKILLS[pool] if V.is_live_commerce(state) else V.domain_distractors(state, pool)
    options = [d for d in pool_skills if d[0] not in taken]
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

