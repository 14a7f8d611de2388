"""Pairing what disappeared with what appeared: a scored matching, not a positional one.

A removed and an added item are taken for one renamed item when they look alike enough. Every candidate pair
gets a score in [0, 1]; the best pairs are taken first, each item used once, and a pair under the threshold is
never taken (those items stay removed + added). So two renamed tools that swap places pair by what they are,
not where they stand."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

A = TypeVar("A")
B = TypeVar("B")

_TOKEN_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def name_tokens(name: str) -> list[str]:
    """``getOrderDetails``, ``get_order_details``, ``orders.get-details`` → words, lower-cased."""
    return [t.lower() for t in _TOKEN_RE.findall(name)]


def _bigrams(text: str) -> Counter[str]:
    text = text.lower()
    return Counter(text[i:i + 2] for i in range(len(text) - 1))


def name_similarity(a: str, b: str) -> float:
    """Half shared words (Jaccard), half shared character pairs (Dice): ``get_order`` ~ ``getOrder``."""
    if a == b:
        return 1.0
    ta, tb = set(name_tokens(a)), set(name_tokens(b))
    shared_words = len(ta & tb) / len(ta | tb) if ta | tb else 0.0
    ba, bb = _bigrams(a), _bigrams(b)
    total = sum(ba.values()) + sum(bb.values())
    shared_chars = 2 * sum((ba & bb).values()) / total if total else 0.0
    return 0.5 * shared_words + 0.5 * shared_chars


def words(text: str) -> Counter[str]:
    """A text as a bag of lower-cased words (computed once per item, compared many times)."""
    return Counter(text.lower().split())


def bag_similarity(a: Counter[str], b: Counter[str]) -> float:
    """Shared words over all words (difflib's ``quick_ratio``, order-free: linear, not quadratic); two empty bags
    are alike."""
    if not a and not b:
        return 1.0
    return 2 * sum((a & b).values()) / (sum(a.values()) + sum(b.values()))


def text_similarity(a: str, b: str) -> float:
    return 1.0 if a == b else bag_similarity(words(a), words(b))


def _schema_types(node: dict[str, Any]) -> str:
    t = node.get("type")
    if isinstance(t, str):
        return t
    if isinstance(t, list):
        return "|".join(sorted(str(x) for x in t))
    return "any"


def schema_leaves(node: Any, path: str = "", depth: int = 0) -> Iterator[tuple[str, str]]:
    """(path, type) of every sub-schema reached through properties, items, prefixItems, additionalProperties and
    composition branches: a schema's shape, for likeness (``$ref`` is left as it is; depth is bounded)."""
    if not isinstance(node, dict) or depth > 32:
        return
    yield path, _schema_types(node)
    props = node.get("properties")
    if isinstance(props, dict):
        for name, sub in props.items():
            yield from schema_leaves(sub, f"{path}.{name}", depth + 1)
    items = node.get("items")
    if isinstance(items, dict):
        yield from schema_leaves(items, f"{path}[]", depth + 1)
    for key in ("prefixItems", "anyOf", "oneOf", "allOf"):
        branches = node.get(key)
        if isinstance(branches, list):
            for i, sub in enumerate(branches):
                yield from schema_leaves(sub, f"{path}.{key}[{i}]", depth + 1)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        yield from schema_leaves(extra, f"{path}{{}}", depth + 1)


SchemaShape = tuple[frozenset[tuple[str, str]], Counter[str]]


def schema_shape(schema: Any) -> SchemaShape:
    """The (path, type) leaves of a schema and how many of each type it has (computed once per item)."""
    leaves = frozenset(schema_leaves(schema))
    return leaves, Counter(t for _, t in leaves)


def shape_similarity(a: SchemaShape, b: SchemaShape) -> float:
    """Shared (path, type) leaves, and alike type counts when the names differ."""
    (la, ca), (lb, cb) = a, b
    if la == lb:
        return 1.0
    if not la or not lb:
        return 0.0
    shared = len(la & lb) / len(la | lb)
    types = sum((ca & cb).values()) / sum((ca | cb).values())
    return 0.6 * shared + 0.4 * types


def schema_similarity(a: Any, b: Any) -> float:
    """Likeness of two JSON schemas (see :func:`shape_similarity`)."""
    return 1.0 if a == b else shape_similarity(schema_shape(a), schema_shape(b))


def pair_by_score(
    removed: Sequence[A], added: Sequence[B], score: Callable[[A, B], float], threshold: float
) -> list[tuple[A, B]]:
    """Best pairs first, each item used once, none under ``threshold``; ties go to the earlier items.
    Returned in the order of ``removed``."""
    scored = sorted(
        ((-s, i, j) for i, old in enumerate(removed) for j, new in enumerate(added)
         if (s := score(old, new)) >= threshold),
    )
    used_old: set[int] = set()
    used_new: set[int] = set()
    pairs: dict[int, int] = {}
    for _, i, j in scored:
        if i in used_old or j in used_new:
            continue
        used_old.add(i)
        used_new.add(j)
        pairs[i] = j
    return [(removed[i], added[pairs[i]]) for i in sorted(pairs)]
