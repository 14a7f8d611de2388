"""Agreement between two raters of the same items: Cohen's kappa, raw agreement and the confusion matrix.

Used to say how far the console's judges can be trusted: human labels against the reply rules, against each judge
model and against the judges' vote (:mod:`training_jobs.label_selectors`), and each judge against the rules
(:func:`training_jobs.evals.judge_model.judges_summary`).

Definitions (Cohen 1960; weighted: Cohen 1968), for ``n`` items rated by raters A and B over the ordered classes
``labels``:

- the confusion matrix ``O[i][j]``: how many items A put in class ``i`` and B in class ``j``;
- raw agreement ``p_o = sum_i O[i][i] / n``;
- expected agreement by chance ``p_e = sum_i (row_i / n) * (col_i / n)`` (each rater's own class frequencies);
- ``kappa = 1 - sum_ij w_ij O_ij / sum_ij w_ij E_ij`` with ``E_ij = row_i * col_j / n`` and disagreement weights
  ``w_ij``: unweighted ``w = 0`` on the diagonal and 1 elsewhere (then ``kappa = (p_o - p_e) / (1 - p_e)``),
  linear ``w_ij = |i - j| / (k - 1)`` (a 0 vs 1 effectiveness costs twice a 0 vs 0.5). With two classes the two
  weightings give the same kappa. This is what ``sklearn.metrics.cohen_kappa_score`` computes (a test checks).
- kappa is *undefined* (``None``) when no disagreement is expected by chance (``sum w E = 0``: both raters used
  one and the same class for every item), and for no items at all; sklearn gives NaN there.

Pairs where either rater abstained (``None``) are left out and counted in ``dropped``. Plain Python, no Django.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

ACCURACY_LABELS: tuple[int, ...] = (0, 1)
EFFECTIVENESS_LABELS: tuple[float, ...] = (0.0, 0.5, 1.0)
Weights = Literal["unweighted", "linear"]


@dataclass(frozen=True)
class Agreement:
    """How two raters agree on the items both rated."""

    n: int
    observed: float | None  # raw agreement p_o (None without items)
    expected: float | None  # chance agreement p_e
    kappa: float | None  # None: undefined (no items, or one class only on both sides)
    weights: str
    labels: tuple[Any, ...]
    matrix: tuple[tuple[int, ...], ...]  # matrix[i][j]: rater A said labels[i], rater B labels[j]
    dropped: int = 0  # pairs left out because a rater abstained
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "observed": _round(self.observed), "expected": _round(self.expected),
                "kappa": _round(self.kappa), "weights": self.weights, "labels": list(self.labels),
                "matrix": [list(row) for row in self.matrix], "dropped": self.dropped, "notes": list(self.notes)}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def _key(value: Any, labels: Sequence[Hashable]) -> int:
    """The index of ``value`` in ``labels``; numbers compare by value (1 == 1.0 == True is not allowed: bools are
    refused, they are not classes here)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not one of the classes {list(labels)}")
    for i, label in enumerate(labels):
        if value == label:
            return i
    raise ValueError(f"{value!r} is not one of the classes {list(labels)}")


def confusion_matrix(a: Sequence[Any], b: Sequence[Any], labels: Sequence[Any]) -> list[list[int]]:
    """``O[i][j]``: the items A put in ``labels[i]`` and B in ``labels[j]`` (both lists without abstentions)."""
    if len(a) != len(b):
        raise ValueError(f"the raters rated {len(a)} and {len(b)} items: they must rate the same items")
    k = len(labels)
    m = [[0] * k for _ in range(k)]
    for x, y in zip(a, b):
        m[_key(x, labels)][_key(y, labels)] += 1
    return m


def _weight(i: int, j: int, k: int, weights: Weights) -> float:
    if weights == "unweighted":
        return 0.0 if i == j else 1.0
    if weights == "linear":
        return abs(i - j) / (k - 1) if k > 1 else 0.0
    raise ValueError(f"weights must be 'unweighted' or 'linear', not {weights!r}")


def cohen_kappa(a: Sequence[Any], b: Sequence[Any], *, labels: Sequence[Any], weights: Weights = "unweighted"
                ) -> Agreement:
    """Cohen's kappa of raters ``a`` and ``b`` (the i-th ratings are of the same item) over the ordered classes
    ``labels``; ``None`` in either list = that rater abstained on that item (the pair is dropped). ValueError for
    lists of different lengths or a value outside ``labels``."""
    if len(a) != len(b):
        raise ValueError(f"the raters rated {len(a)} and {len(b)} items: they must rate the same items")
    labels = tuple(labels)
    if len(labels) < 2 or len(set(labels)) != len(labels):
        raise ValueError("kappa needs two or more distinct classes")
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    dropped = len(a) - len(pairs)
    m = confusion_matrix([x for x, _ in pairs], [y for _, y in pairs], labels)
    n = len(pairs)
    matrix = tuple(tuple(row) for row in m)
    if n == 0:
        return Agreement(0, None, None, None, weights, labels, matrix, dropped, ("no items rated by both",))
    k = len(labels)
    rows = [sum(m[i]) for i in range(k)]
    cols = [sum(m[i][j] for i in range(k)) for j in range(k)]
    observed = sum(m[i][i] for i in range(k)) / n
    expected = sum(rows[i] * cols[i] for i in range(k)) / (n * n)
    w_obs = sum(_weight(i, j, k, weights) * m[i][j] for i in range(k) for j in range(k))
    w_exp = sum(_weight(i, j, k, weights) * rows[i] * cols[j] / n for i in range(k) for j in range(k))
    notes: list[str] = []
    if w_exp == 0:
        kappa = None
        notes.append("kappa undefined: both raters gave one and the same class to every item")
    else:
        kappa = 1.0 - w_obs / w_exp
    return Agreement(n, observed, expected, kappa, weights, labels, matrix, dropped, tuple(notes))


def accuracy_agreement(a: Sequence[Any], b: Sequence[Any]) -> Agreement:
    """Accuracy (0 / 1): unweighted kappa."""
    return cohen_kappa([_acc(x) for x in a], [_acc(y) for y in b], labels=ACCURACY_LABELS)


def effectiveness_agreement(a: Sequence[Any], b: Sequence[Any]) -> dict[str, Agreement]:
    """Effectiveness (0 / 0.5 / 1): unweighted and linearly weighted kappa (same pairs, same matrix)."""
    xs, ys = [_eff(x) for x in a], [_eff(y) for y in b]
    return {"unweighted": cohen_kappa(xs, ys, labels=EFFECTIVENESS_LABELS),
            "linear": cohen_kappa(xs, ys, labels=EFFECTIVENESS_LABELS, weights="linear")}


def _acc(x: Any) -> int | None:
    """A stored accuracy (0, 1, 0.0, 1.0) as its class; anything else is treated as abstaining."""
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return int(v) if v in (0.0, 1.0) else None


def _eff(x: Any) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v in EFFECTIVENESS_LABELS else None


def agreement_block(a: Sequence[Any], b: Sequence[Any], *, a_eff: Sequence[Any], b_eff: Sequence[Any]
                    ) -> dict[str, Any]:
    """Both metrics of one pair of raters as JSON: ``accuracy`` and ``effectiveness`` {unweighted, linear}."""
    eff = effectiveness_agreement(a_eff, b_eff)
    return {"accuracy": accuracy_agreement(a, b).to_dict(),
            "effectiveness": {k: v.to_dict() for k, v in eff.items()}}


# --- human labels against the rules and the judges ---------------------------------------------------------------


def label_agreement(labels: Sequence[Any]) -> dict[str, Any]:
    """Agreement of human labels with the rules, with each judge model, with the judges' vote, and between humans.

    ``labels``: one item per human label, a mapping with ``result`` (the sample's id), ``reviewer``, ``accuracy``,
    ``effectiveness`` (the human's), ``rules`` = (accuracy, effectiveness) the rules gave that sample, and
    ``judges`` = the sample's stored judge block (``{"verdicts": [...], "vote": {...}}``, see
    :mod:`training_jobs.evals.judge_model`) or None. Each label is one pair (several reviewers of one sample give
    several pairs). Between humans: every pair of labels of the same sample, in the order given. Per judge, only the
    labels of samples that judge judged count (its abstentions are dropped and counted)."""
    h_acc = [x["accuracy"] for x in labels]
    h_eff = [x["effectiveness"] for x in labels]
    out: dict[str, Any] = {
        "labels": len(labels), "results": len({x["result"] for x in labels}),
        "reviewers": len({x["reviewer"] for x in labels}),
        "rules": agreement_block(h_acc, [x["rules"][0] for x in labels], a_eff=h_eff,
                                 b_eff=[x["rules"][1] for x in labels]),
    }
    names: list[str] = []
    for x in labels:
        for v in (x.get("judges") or {}).get("verdicts") or []:
            if isinstance(v, dict) and str(v.get("judge")) not in names:
                names.append(str(v.get("judge")))
    judges: dict[str, Any] = {}
    for name in names:
        pairs = []
        for x in labels:
            verdicts = {str(v.get("judge")): v for v in (x.get("judges") or {}).get("verdicts") or []
                        if isinstance(v, dict)}
            if name in verdicts:
                pairs.append((x, verdicts[name]))
        judges[name] = agreement_block([x["accuracy"] for x, _ in pairs], [v.get("accuracy") for _, v in pairs],
                                       a_eff=[x["effectiveness"] for x, _ in pairs],
                                       b_eff=[v.get("effectiveness") for _, v in pairs])
    out["judges"] = judges
    voted = [(x, (x.get("judges") or {}).get("vote") or {}) for x in labels if x.get("judges")]
    out["vote"] = agreement_block([x["accuracy"] for x, _ in voted], [v.get("accuracy") for _, v in voted],
                                  a_eff=[x["effectiveness"] for x, _ in voted],
                                  b_eff=[v.get("effectiveness") for _, v in voted]) if voted else None
    by_result: dict[Any, list[Any]] = {}
    for x in labels:
        by_result.setdefault(x["result"], []).append(x)
    a: list[Any] = []
    b: list[Any] = []
    for group in by_result.values():
        for i in range(len(group)):
            for j in range(i + 1, len(group)):
                a.append(group[i])
                b.append(group[j])
    out["humans"] = agreement_block([x["accuracy"] for x in a], [y["accuracy"] for y in b],
                                    a_eff=[x["effectiveness"] for x in a],
                                    b_eff=[y["effectiveness"] for y in b]) if a else None
    return out
