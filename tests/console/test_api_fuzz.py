"""Schemathesis against the OpenAPI document: every operation, for every role, with a fixed example budget.

For each role (token auth; anonymous sends none) and each operation of ``/api/schema/``, Hypothesis draws
``EXAMPLES`` valid and ``EXAMPLES`` invalid requests (schemathesis' positive and negative modes; one request
where the role is refused: 401/403 come before any input is read), about half of them
with the path parameters of real objects (the demo harness and its versions and labels, datasets, training jobs,
a model) so that the handlers run past their 404. The app is called in-process through WSGI. Every response
must pass: no server error, a status code the document declares, the declared content type, a body that matches
the declared schema, declared headers. Derandomized: the same requests every run.

Nothing is skipped: work that would start (dataset builds, training jobs) is queued on commit, and the test's
transaction never commits, so no worker ever runs.
"""

from __future__ import annotations

import itertools
import time

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.core.parameters import ParameterLocation
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from training_jobs.models import TrainedModel

# the fixtures of the training tests: ready datasets, the demo base model, jobs in several states
from tests.training_jobs.test_training_views import (  # noqa: F401
    base, failed, finished, fixed, hsa, queued_jobs, running)

pytestmark = pytest.mark.django_db

EXAMPLES = 6  # per operation, role and mode (valid, invalid) where the role may use the operation
ROLES = ["manager", "manager2", "reviewer", "ml_staff", "operator", "outsider", "anonymous"]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance]


@pytest.fixture
def wsgi_app():
    """The real WSGI app, with the test's transaction kept open across requests (as Django's test client does:
    close_old_connections would otherwise close the connection that holds it after each request)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def world(harness_with_history, finished, running, failed, fixed, queued_jobs):
    """Real objects for the path parameters: one value set per parameter name."""
    model = TrainedModel.objects.get(job=finished)
    return {
        "slug": [harness_with_history["harness"].slug],
        "number": [1, 2, 3],
        "name": ["production", "staging"],
        "dataset_id": [str(finished.dataset_id), str(fixed.pk)],
        "job_id": [str(running.pk), str(failed.pk), str(finished.pk)],
        "model_id": [str(model.pk)],
    }


def _strategy(operation, mode: GenerationMode, world) -> st.SearchStrategy:
    """Generated path parameters, or (as often) those of one of the real objects, each combination once."""
    generated = operation.as_strategy(generation_mode=mode)
    names = [p.name for p in operation.path_parameters]
    if not names or any(name not in world for name in names):
        return generated
    combinations = [dict(zip(names, values)) for values in itertools.product(*(world[name] for name in names))]
    real = [operation.as_strategy(generation_mode=mode, path_parameters=params) for params in combinations]
    return st.one_of(generated, st.one_of(real))


def _failure_text(case, exc: BaseException) -> str:
    return f"{case.operation.label} [{case.method} {case.formatted_path}]: {type(exc).__name__}: {exc}"[:1500]


def _can_be_invalid(operation) -> bool:
    """Whether schemathesis can make a request to this operation invalid (else its negative mode never ends)."""
    if operation.body and len(operation.body):
        return True
    for parameter in operation.iter_parameters():
        schema = parameter.definition.get("schema") or {}
        if parameter.location == ParameterLocation.QUERY and schema.get("type") != "string":
            return True
        if parameter.location == ParameterLocation.PATH and schema != {"type": "string"}:
            return True
    return False


@pytest.mark.parametrize("role", ROLES)
def test_every_operation_conforms_for_every_role(request, role, wsgi_app, world):
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", wsgi_app)
    # authentication is the role's token (or none): no generated Authorization headers or session cookies
    schema.config.generation.update(with_security_parameters=False)
    headers = {}
    if role != "anonymous":
        token, _ = Token.objects.get_or_create(user=request.getfixturevalue(role))
        headers["Authorization"] = f"Token {token.key}"

    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 30, "the document lost operations"
    started = time.monotonic()
    for operation in operations:
        statuses: set[int] = set()
        # One request first: an operation that refuses this role (401/403, its error shape checked) needs no
        # more; the others get the whole budget, valid and invalid.
        for mode, examples in ((GenerationMode.POSITIVE, 1), (GenerationMode.POSITIVE, EXAMPLES),
                               (GenerationMode.NEGATIVE, EXAMPLES)):
            if statuses and statuses <= {401, 403}:
                break
            if mode is GenerationMode.NEGATIVE and not _can_be_invalid(operation):
                break
            seen: set[str] = set()

            @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                      phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
            @given(case=_strategy(operation, mode, world))
            def run(case):
                try:
                    response = case.call(headers=headers)
                    statuses.add(response.status_code)
                    case.validate_response(response, checks=CHECKS, headers=headers)
                except (Exception, FailureGroup) as exc:  # collected: a report of every operation, not the first
                    text = _failure_text(case, exc)
                    key = text.split(":", 2)[-1][:200]
                    if key not in seen:
                        seen.add(key)
                        failures.append(text)

            run()
    elapsed = time.monotonic() - started
    assert not failures, f"{len(failures)} violation(s) for {role}:\n\n" + "\n\n".join(failures)
    assert elapsed < 120, f"the fuzz run for {role} took {elapsed:.0f} s"
