"""What the builder remembers to go faster never changes what it writes: argument JSON, hook checks and the
garbage-collector setting around a build."""

from __future__ import annotations

import gc
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.engine import hooks as H
from training_jobs.hsa.dataset import rare_gc
from training_jobs.hsa.samples import arguments_json, clear_memos

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8))
ARGUMENTS = st.dictionaries(st.text(max_size=6), st.one_of(SCALARS, st.lists(SCALARS, max_size=2),
                                                           st.dictionaries(st.text(max_size=3), SCALARS, max_size=2)),
                            max_size=4)


@given(st.lists(ARGUMENTS, min_size=1, max_size=6))
def test_arguments_json_is_json_dumps(calls):
    for arguments in calls + calls:  # the second pass reads what the first remembered
        assert arguments_json(arguments) == json.dumps(arguments, ensure_ascii=False)


def test_equal_keys_of_other_types_are_not_confused():
    clear_memos()
    for arguments in ({"n": 1}, {"n": True}, {"n": 1.0}, {"n": 0.0}, {"n": -0.0}, {"n": 1}):
        assert arguments_json(arguments) == json.dumps(arguments, ensure_ascii=False)


def test_rare_gc_puts_the_thresholds_back_even_after_an_error():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError):
        with rare_gc():
            assert gc.get_threshold()[0] > before[0]
            raise RuntimeError("build failed")
    assert gc.get_threshold() == before


def test_factual_risk_with_claims_given_is_the_same_verdict():
    from harness_editor.schemas import FactualRiskHook

    hook = FactualRiskHook(id="facts", kind="factual_risk", message="Only state figures from tool results.",
                           check=["price", "stock"])
    state = H.ReplyState("It is $24.50 and 17 left, only $9 more for two.", (), [{"price": 24.5, "stock": 17}])
    given_claims = H.check_factual_risk(hook, state, tuple(H.extract_claims(state.reply)))
    assert given_claims == H.check_factual_risk(hook, state)
    assert not given_claims.passed and "'$9'" in given_claims.detail
