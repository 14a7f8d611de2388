"""T2 Harness-Variant QA: the T1 tasks under harness states drawn only from the HSA held-out registry.

Each T2 case is a T1 case whose harness is transformed by the HSA operators of
:mod:`training_jobs.hsa.operators` configured with ``pool="heldout"``: tool, parameter and skill names, wording,
prompt titles, hook frames and numeric settings (``reply_max_chars`` in ``names.HELDOUT_REPLY_MAX_CHARS``) come
only from the held-out halves of :mod:`training_jobs.hsa.names`, which training never draws from. The harness
variant is the dataset builder's own :func:`training_jobs.hsa.dataset.make_variant` over the same operator list,
so it is the code that makes training variants, with the other pool.

A case stores what reproduces its harness (``harness_variant``: operators with probabilities and settings, the
seed, and the content hash of the result on its base harness); :func:`variant_manifest` rebuilds it from any
base manifest. Labels survive the change: ``expected_tools`` and ``gold_facts`` are in binding terms, and
``expected_skills`` are relabelled through the variant's rename map (kept as ``skill_map``; ``tool_map``
records renamed tools). A variant is only given to a case whose task still fits it (the gold reply passes the
variant's before-reply hooks, the calls fit its tool rounds and request limit).

Leakage: :func:`t2_leaks` looks for every held-out name, phrasing, code and setting the T2 harnesses use in the
training texts it is given (dataset rows, ``harnesses.jsonl`` lines); :func:`build_t2` refuses to build when
there is one. Plain Python, no Django.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from harness_editor.schemas import Manifest, content_hash, manifest_to_json
from streams.engine import hooks as H
from streams.reference_policy import pick_reply_skill
from training_jobs.evals.build_t1 import harness_manifest
from training_jobs.evals.t1_labels import call
from training_jobs.evals.cases import EvalCase, HarnessVariant, OperatorUse
from training_jobs.hsa import names as N
from training_jobs.hsa.operators import OPERATORS, _distinctive, harness_state, operator
from training_jobs.hsa.relabel import RenameMap

POOL = "heldout"
POOL_SIZE = 16  # held-out harness variants per seed, shared by the cases
DEFAULT_SEED = 0

# Every harness operator of the catalogue, in catalogue order. Names are what T2 is about, so the renames
# run on nearly every variant; the rest as often as a training recipe runs them.
_NAME_OPERATORS = {"rename_tools": 0.9, "rename_skills": 0.8, "rename_tool_params": 0.8}
T2_OPERATORS: tuple[OperatorUse, ...] = tuple(
    OperatorUse(name=name, probability=_NAME_OPERATORS.get(name, 0.5))
    for name, op in OPERATORS.items() if op.harness is not None
)


class T2LeakError(ValueError):
    """A held-out name or setting of the T2 harnesses appears in training data."""

    def __init__(self, leaks: Sequence[Leak]):
        self.leaks = list(leaks)
        super().__init__(self.leaks)

    def __str__(self) -> str:
        return "held-out terms found in training data: " + "; ".join(str(x) for x in self.leaks[:20])


# --- variants ----------------------------------------------------------------------------------------------


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _configured(hv: HarnessVariant):
    return [(operator(u.name, pool=POOL, **u.settings), u.probability) for u in hv.operators]


@lru_cache(maxsize=256)
def _variant(base_json: str, variant_json: str):
    from training_jobs.hsa.dataset import make_variant

    base = Manifest.model_validate_json(base_json)
    hv = HarnessVariant.model_validate_json(variant_json)
    return make_variant(harness_state(base), _configured(hv), random.Random(hv.seed))


def apply_variant(hv: HarnessVariant, base_manifest: Manifest) -> tuple[Manifest, RenameMap]:
    """The held-out variant of ``base_manifest`` and its rename map (base names → variant names)."""
    if hv.kind != "heldout":
        raise ValueError(f"not a held-out variant: {hv.kind!r}")
    v = _variant(manifest_to_json(base_manifest), hv.model_dump_json())
    return v.manifest, v.rename


def variant_manifest(case: EvalCase, base_manifest: Manifest) -> Manifest:
    """The harness a T2 case runs under: its held-out variant applied to ``base_manifest`` (normally the
    harness the case names; then the result has ``case.harness_variant.harness_hash``)."""
    if case.harness_variant is None:
        raise ValueError(f"case {case.id} has no harness variant")
    return apply_variant(case.harness_variant, base_manifest)[0]


def relabelled_skills(case: EvalCase, base_manifest: Manifest) -> list[str]:
    """The reply skills a correct turn loads under the case's variant of ``base_manifest`` (its intents' skills
    in the base harness, renamed by the variant)."""
    manifest, rename = apply_variant(case.harness_variant, base_manifest)  # type: ignore[arg-type]
    del manifest
    out: list[str] = []
    for intent in case.intents:
        sid = rename.skill(pick_reply_skill(base_manifest, intent))
        if sid not in out:
            out.append(sid)
    return out


def _expected_result(t: Any, room: Mapping[str, Any], base: Manifest | None) -> dict[str, Any]:
    if not t.tool:
        return call(t.binding, room, **t.arguments)
    from streams.tool_bindings import call_bound_tool

    tool = base.tool(t.tool) if base is not None else None
    if tool is None:
        return {"error": f"no tool {t.tool!r} in the case's harness", "code": "not_found"}
    return call_bound_tool(tool, dict(room), t.arguments)  # the case's terms: the base harness's tool


def fits(case: EvalCase, manifest: Manifest, skills: Sequence[str], base: Manifest | None = None) -> list[str]:
    """Why the case's task does not fit a harness ([] = it fits): the gold reply must pass its before-reply
    hooks with the relabelled skills loaded, and the skill loads and calls fit its tool-round and request
    limits. ``base``: the harness the case is written for (its ``tool`` calls are answered there)."""
    problems: list[str] = []
    results = [_expected_result(t, case.room, base) for t in case.expected_tools if not t.optional]
    state = H.ReplyState(case.gold_reply, list(skills), results)
    problems += [f"{v.hook_id}: {v.detail}" for v in H.run_before_reply(manifest, state) if not v.passed]
    # the fewest rounds: every skill load in one, every call in the next (the engine runs a round's calls together)
    rounds = (1 if skills else 0) + (1 if results else 0)
    c = manifest.constraints
    if rounds > c.max_tool_rounds:
        problems.append(f"{rounds} tool rounds, more than max_tool_rounds {c.max_tool_rounds}")
    if rounds + 1 > c.turn_limit:
        problems.append(f"{rounds + 1} model requests, more than turn_limit {c.turn_limit}")
    have = {s.id for s in manifest.skills}
    problems += [f"skill {s!r} is not in the harness" for s in skills if s not in have]
    return problems


def _slot_variant(seed: int, slot: int) -> HarnessVariant:
    return HarnessVariant(kind="heldout", seed=_seed(f"t2:{seed}:{slot}"), operators=list(T2_OPERATORS))


def build_t2(t1_cases: Sequence[EvalCase], seed: int = DEFAULT_SEED, *,
             base_manifests: Mapping[str, Manifest] | None = None,
             training_texts: Iterable[str] | None = None) -> list[EvalCase]:
    """One T2 case per T1 case, under one of :data:`POOL_SIZE` held-out variants of its harness (the first, in a
    seeded order, the task fits). ``base_manifests``: harnesses by the name cases give (default: the demo
    manifests). ``training_texts``: when given, the build fails with :class:`T2LeakError` if any held-out term
    the set uses appears in them."""
    rng = random.Random(f"t2-order:{seed}")
    out: list[EvalCase] = []
    for t1 in t1_cases:
        base = harness_manifest(t1.harness, base_manifests)
        slots = list(range(POOL_SIZE))
        rng.shuffle(slots)
        for slot in slots:
            hv = _slot_variant(seed, slot)
            manifest, rename = apply_variant(hv, base)
            skills = [rename.skill(s) for s in t1.expected_skills]
            if not fits(t1, manifest, skills, base):
                break
        else:
            raise AssertionError(f"no held-out variant of {t1.harness} fits {t1.id}")
        variant = _variant(manifest_to_json(base), hv.model_dump_json())
        hv = hv.model_copy(update={
            "applied": list(variant.applied), "skill_map": dict(rename.skills), "tool_map": dict(rename.tools),
            "harness_hash": content_hash(manifest)})
        data = t1.model_dump(exclude_defaults=True)
        data.update(id=t1.id.replace("t1-", "t2-", 1), kind="t2", harness_variant=hv.model_dump(),
                    expected_skills=skills, parent=t1.id, source=f"t2:{seed}:{slot}",
                    tags=sorted({*t1.tags, "heldout_variant"}))
        out.append(EvalCase.model_validate(data))
    if training_texts is not None:
        leaks = t2_leaks(out, training_texts, base_manifests=base_manifests)
        if leaks:
            raise T2LeakError(leaks)
    return out


# --- held-out terms and leakage ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leak:
    """A held-out term a T2 harness uses, found in a training text."""

    term: str
    kind: str  # name | phrasing | code | setting
    text_index: int  # position of the training text in the iterable given
    cases: tuple[str, ...]  # the T2 cases whose harness uses it (the first few)

    def __str__(self) -> str:
        return f"{self.kind} {self.term!r} in training text #{self.text_index} (used by {', '.join(self.cases)})"


def _identifiers(manifest: Manifest) -> set[str]:
    """Names in a harness: tool names, every property name of their schemas, skill ids."""
    out = {t.name for t in manifest.tools} | {s.id for s in manifest.skills}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                out.update(props)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for t in manifest.tools:
        walk(t.parameters)
    return out


@lru_cache(maxsize=1)
def heldout_phrasings() -> tuple[str, ...]:
    """The held-out phrasings worth looking for in other data: titles, masked descriptions, fallback lines,
    distractor and decoy descriptions, and the description and hook-message frames with their punctuation
    ("Intended for:", "(automated review)"). Left out: the held-out word synonyms ("obtain", "at no point"),
    ordinary words that general instruction data use for their own reasons (training_jobs.hsa.dataset.
    heldout_leaks checks HSA rows for them)."""
    synonyms = {v for values in N.WORD_SYNONYMS[POOL].values() for v in values}
    frame_words = {f.replace("{m}", "").replace("{d}", "").replace("{D}", "").strip(" .—-:()")
                   for f in N.DESCRIPTION_FRAMES[POOL] + N.HOOK_MESSAGE_FRAMES[POOL]}
    out = {p for p in N.heldout_registry().phrasings if p not in synonyms and p not in frame_words}
    out.update(f.replace("{m}", "").replace("{d}", "").replace("{D}", "").strip()
               for f in N.DESCRIPTION_FRAMES[POOL] + N.HOOK_MESSAGE_FRAMES[POOL])
    return tuple(sorted(p for p in out if p))


def heldout_terms(manifest: Manifest) -> dict[str, str]:
    """The held-out registry's terms a harness contains: {term: kind}. Names are matched as identifiers
    (tool, property and skill names), phrasings (:func:`heldout_phrasings`) as text, opaque skill codes and
    numeric settings by value."""
    reg = N.heldout_registry()
    out: dict[str, str] = {}
    idents = _identifiers(manifest)
    for name in reg.names & idents:
        out[name] = "name"
    for sid in idents:
        if sid not in out and any(p.search(sid) for p in reg.patterns):
            out[sid] = "code"
    text = manifest_to_json(manifest)
    for phrase in heldout_phrasings():
        if re.search(_phrase_re(phrase), text):
            out[phrase] = "phrasing"
    if manifest.constraints.reply_max_chars in reg.reply_max_chars:
        out[f"reply_max_chars={manifest.constraints.reply_max_chars}"] = "setting"
    return out


def set_heldout_terms(cases: Sequence[EvalCase], *, base_manifests: Mapping[str, Manifest] | None = None
                      ) -> dict[str, tuple[str, list[str]]]:
    """Held-out terms the T2 cases' harnesses use: {term: (kind, case ids)}."""
    out: dict[str, tuple[str, list[str]]] = {}
    for case in cases:
        if case.harness_variant is None or case.harness_variant.kind != "heldout":
            continue
        manifest = variant_manifest(case, harness_manifest(case.harness, base_manifests))
        for term, kind in heldout_terms(manifest).items():
            out.setdefault(term, (kind, []))[1].append(case.id)
    return out


def _phrase_re(phrase: str) -> str:
    head = r"(?<![\w\-])" if phrase[0].isalnum() else ""
    tail = r"(?![\w\-])" if phrase[-1].isalnum() else ""
    return head + re.escape(phrase) + tail


def _term_pattern(term: str, kind: str) -> str:
    if kind == "setting":
        n = term.split("=", 1)[1]
        # the rendered prompt's constraint line, or the manifest JSON (also escaped inside a JSON string)
        return rf"Reply length: \d+ to {n} characters|\\?\"reply_max_chars\\?\":\s*{n}(?!\d)"
    if kind == "phrasing":
        return _phrase_re(term)
    if kind == "code" or _distinctive(term):
        return rf"(?<![\w\-]){re.escape(term)}(?![\w\-])"
    # a plain word as a name ("payload", "province"): only where it is an identifier, a quoted JSON string
    # (a schema key, an argument, a load_skill id; quotes escaped when the JSON is inside a string) or `code`
    q = r"\\?\""
    return rf"{q}{re.escape(term)}{q}|`{re.escape(term)}`"


def _needles(term: str, kind: str) -> tuple[str, ...]:
    """Plain substrings, one of which a text must contain to match the term (cheap to test first)."""
    if kind == "setting":
        n = term.split("=", 1)[1]
        return (f" to {n} characters", "reply_max_chars")
    return (term,)


def t2_leaks(cases: Sequence[EvalCase], training_texts: Iterable[str], *,
             base_manifests: Mapping[str, Manifest] | None = None, max_leaks: int = 100,
             terms: Mapping[str, tuple[str, list[str]]] | None = None) -> list[Leak]:
    """Every held-out term the T2 cases use that appears in a training text (a dataset row as JSON, a
    ``harnesses.jsonl`` line, a prompt ...), at most ``max_leaks``. [] = the set is clean of that data.
    ``terms``: :func:`set_heldout_terms` of the cases, when the caller has them."""
    terms = terms if terms is not None else set_heldout_terms(cases, base_manifests=base_manifests)
    checks = [(term, kind, ids, _needles(term, kind), re.compile(_term_pattern(term, kind)))
              for term, (kind, ids) in sorted(terms.items())]
    leaks: list[Leak] = []
    for index, text in enumerate(training_texts):
        for term, kind, ids, needles, pattern in checks:
            if any(n in text for n in needles) and pattern.search(text):
                leaks.append(Leak(term, kind, index, tuple(ids[:5])))
                if len(leaks) >= max_leaks:
                    return leaks
    return leaks


def dataset_texts(rows: Iterable[Mapping[str, Any]]) -> Iterable[str]:
    """Training texts from dataset rows (``messages`` + ``tools``, as training_jobs.hsa.dataset writes them)
    for :func:`t2_leaks`."""
    for row in rows:
        yield json.dumps(row.get("messages"), ensure_ascii=False) + "\n" + str(row.get("tools") or "")


def train_pool_names() -> frozenset[str]:
    """Every name the training pools can put into a harness (T2 must use none of them)."""
    out: set[str] = set()
    for table in (N.SKILL_SYNONYMS["train"], N.SKILL_FOREIGN["train"], N.TOOL_NAMES["train"],
                  N.PARAM_NAMES["train"]):
        for values in table.values():
            out.update(v for v in values if "{id}" not in v)
    out.update(N.WRAP_KEYS["train"])
    out.update(n for n, _ in N.OPTIONAL_PARAMS["train"])
    out.update(n for n, _, _ in N.DECOY_TOOLS["train"])
    out.update(s[0] for s in N.DISTRACTOR_SKILLS["train"])
    return frozenset(out)


