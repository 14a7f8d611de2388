"""The ``fixture`` binding: deterministic answers from a table of argument patterns (simulation, evaluation,
previews without a backend).

Cases are tried in order: a scenario's own fixtures for the tool first (:attr:`ToolRuntime.fixtures`), then the
binding's. A case matches when every ``when`` entry (argument path -> value) equals the call's value at that path
(an empty ``when`` matches every call). The first match answers; else the binding's ``default``; else the tool fault
``not_found``. The answer is a deep copy, so a turn cannot change the table.

Plain Python, no Django.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from harness_editor.schemas import argument_path_get
from harness_editor.schemas.bindings import FixtureBinding, FixtureCase


def _equal(a: Any, b: Any) -> bool:
    # 1 == True in Python; a fixture for the boolean true must not answer the number 1
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    return a == b


def case_matches(when: Mapping[str, Any], arguments: Mapping[str, Any]) -> bool:
    for path, want in when.items():
        found, got = argument_path_get(dict(arguments), path)
        if not found or not _equal(got, want):
            return False
    return True


def _case_parts(case: FixtureCase | Mapping[str, Any]) -> tuple[Mapping[str, Any], Any]:
    if isinstance(case, FixtureCase):
        return case.when, case.result
    return case.get("when") or {}, case.get("result")


def _as_result(value: Any) -> dict[str, Any]:
    # the engine hands objects to the model; a list or a scalar goes under "result" (as for http)
    value = copy.deepcopy(value)
    return value if isinstance(value, dict) else {"result": value}


def call_fixture(tool_name: str, binding: FixtureBinding, arguments: Mapping[str, Any],
                 scenario_cases: Iterable[FixtureCase | Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The answer for one call (scenario cases first, then the binding's, then its default)."""
    for case in [*scenario_cases, *binding.cases]:
        when, result = _case_parts(case)
        if case_matches(when, arguments):
            return _as_result(result)
    if binding.default is not None:
        return _as_result(binding.default)
    return {"error": f"no fixture of {tool_name!r} matches these arguments", "code": "not_found"}
