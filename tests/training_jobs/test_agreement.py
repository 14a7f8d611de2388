"""Cohen's kappa (training_jobs.evals.agreement) against hand-computed values and, when scikit-learn is in the
environment, against sklearn.metrics.cohen_kappa_score on random ratings."""

from __future__ import annotations

import math
import random
import warnings
from fractions import Fraction

import pytest

from training_jobs.evals.agreement import (
    ACCURACY_LABELS,
    EFFECTIVENESS_LABELS,
    accuracy_agreement,
    agreement_block,
    cohen_kappa,
    confusion_matrix,
    effectiveness_agreement,
)


def _pairs(cells: dict[tuple, int]) -> tuple[list, list]:
    a, b = [], []
    for (x, y), count in cells.items():
        a += [x] * count
        b += [y] * count
    return a, b


def test_binary_textbook_example():
    """50 items: both yes 20, A yes / B no 5, A no / B yes 10, both no 15 → p_o 0.7, p_e 0.5, kappa 0.4."""
    a, b = _pairs({(1, 1): 20, (1, 0): 5, (0, 1): 10, (0, 0): 15})
    ag = cohen_kappa(a, b, labels=ACCURACY_LABELS)
    assert ag.n == 50 and ag.dropped == 0
    assert ag.observed == pytest.approx(0.7) and ag.expected == pytest.approx(0.5)
    assert ag.kappa == pytest.approx(0.4)
    assert ag.matrix == ((15, 10), (5, 20))  # rows: A said 0, 1; columns: B said 0, 1
    # linear weights on two classes are the unweighted kappa
    assert cohen_kappa(a, b, labels=ACCURACY_LABELS, weights="linear").kappa == pytest.approx(0.4)


def test_three_classes_unweighted_and_linear_by_hand():
    """Rows (A) 0: [1, 1, 0], 0.5: [0, 2, 1], 1: [1, 0, 2]; margins 2, 3, 3 both ways.
    p_o = 5/8, p_e = 22/64 → kappa = 3/7. Linear: observed weighted disagreement 0.5 + 0.5 + 1 = 2, expected
    3.375 → kappa_w = 1 - 2 / 3.375 = 11/27."""
    a, b = _pairs({(0, 0): 1, (0, 0.5): 1, (0.5, 0.5): 2, (0.5, 1): 1, (1, 1): 2, (1, 0): 1})
    eff = effectiveness_agreement(a, b)
    u, lin = eff["unweighted"], eff["linear"]
    assert u.matrix == ((1, 1, 0), (0, 2, 1), (1, 0, 2)) == lin.matrix
    assert u.observed == pytest.approx(5 / 8) and u.expected == pytest.approx(22 / 64)
    assert u.kappa == pytest.approx(float(Fraction(3, 7)))
    assert lin.kappa == pytest.approx(float(Fraction(11, 27)))
    # a 0 vs 1 disagreement costs more than a 0 vs 0.5 one under linear weights only
    near = effectiveness_agreement([0, 0.5, 1, 1], [0.5, 0.5, 1, 1])
    far = effectiveness_agreement([0, 0.5, 1, 1], [1, 0.5, 1, 1])
    assert near["linear"].kappa > far["linear"].kappa


def test_perfect_opposite_and_undefined():
    assert cohen_kappa([0, 1, 1, 0], [0, 1, 1, 0], labels=(0, 1)).kappa == pytest.approx(1.0)
    assert cohen_kappa([0, 1], [1, 0], labels=(0, 1)).kappa == pytest.approx(-1.0)
    same = cohen_kappa([1, 1, 1], [1, 1, 1], labels=(0, 1))
    assert same.kappa is None and same.observed == 1.0 and same.notes  # both raters one class: undefined
    empty = cohen_kappa([], [], labels=(0, 1))
    assert empty.n == 0 and empty.kappa is None and empty.observed is None


def test_abstentions_are_dropped_and_counted():
    ag = accuracy_agreement([1, None, 0, 1, 1.0], [1, 1, 0, None, 0.0])
    assert ag.n == 3 and ag.dropped == 2
    assert ag.matrix == ((1, 0), (1, 1))
    # values that are not classes are abstentions in the metric helpers ...
    assert accuracy_agreement([0.5, 1], [1, 1]).n == 1
    assert effectiveness_agreement([0.25, 1], [1, 1])["unweighted"].n == 1
    # ... and errors in the core
    with pytest.raises(ValueError):
        cohen_kappa([0.5], [1], labels=(0, 1))
    with pytest.raises(ValueError):
        cohen_kappa([1, 0], [1], labels=(0, 1))
    with pytest.raises(ValueError):
        cohen_kappa([True], [1], labels=(0, 1))
    with pytest.raises(ValueError):
        cohen_kappa([1], [1], labels=(0, 1), weights="quadratic")  # type: ignore[arg-type]


def test_agreement_block_is_json_shaped():
    block = agreement_block([1, 0, 1], [1, 1, 1], a_eff=[1, 0.5, 0], b_eff=[1, 0.5, 0.5])
    assert set(block) == {"accuracy", "effectiveness"}
    assert set(block["effectiveness"]) == {"unweighted", "linear"}
    acc = block["accuracy"]
    assert acc["n"] == 3 and acc["observed"] == pytest.approx(2 / 3, abs=1e-6) and acc["matrix"] == [[0, 1], [0, 2]]
    assert acc["kappa"] == 0.0  # B said 1 every time: p_o == p_e


def test_matches_sklearn_on_random_ratings():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = random.Random(11)
    for trial in range(200):
        labels = ACCURACY_LABELS if trial % 2 else EFFECTIVENESS_LABELS
        n = rng.randint(2, 40)
        a = [rng.choice(labels) for _ in range(n)]
        # B agrees with A more often than chance, so kappas spread over (-1, 1]
        b = [x if rng.random() < 0.6 else rng.choice(labels) for x in a]
        encode = {v: i for i, v in enumerate(labels)}
        ea, eb = [encode[x] for x in a], [encode[y] for y in b]
        for weights, sk in (("unweighted", None), ("linear", "linear")):
            ours = cohen_kappa(a, b, labels=labels, weights=weights).kappa
            with warnings.catch_warnings():  # sklearn warns (and gives NaN) where kappa is undefined
                warnings.simplefilter("ignore")
                theirs = metrics.cohen_kappa_score(ea, eb, labels=list(range(len(labels))), weights=sk)
            if math.isnan(theirs):
                assert ours is None
            else:
                assert ours == pytest.approx(theirs, abs=1e-12), (a, b, weights)
        assert confusion_matrix(a, b, labels) == metrics.confusion_matrix(
            ea, eb, labels=list(range(len(labels)))).tolist()
