"""An eval-set case that names a stored harness version ('slug@N') has its tool calls checked against that version
at import (issue 26 §6): a reference that names no version on record is refused at its line and field, as the
same wrong fact on a real version is, instead of being stored unchecked. Through the real API and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from harness_editor import services as harness_services
from harness_editor.models import HarnessVersion
from tests.training_jobs.test_eval_foreign_harness import order_desk, where_is
from training_jobs.eval_models import EvalSet


def _approved(manager, reviewer):
    v1 = harness_services.harness_create(user=manager, slug="order-desk", name="Order desk", manifest=order_desk(),
                                         change_note="brought in")
    harness_services.version_submit(user=manager, version=v1)
    return harness_services.version_approve(user=reviewer, version=v1, comment="policy read")


def _import(client, *cases):
    return client.post("/api/eval-sets/", {"name": "order-desk-refs", "kind": "t1",
                                           "jsonl": "\n".join(json.dumps(c) for c in cases)}, format="json")


@pytest.mark.django_db
@pytest.mark.parametrize("ref, why", [
    ("order-desk@99", "order-desk has no version 99"),
    ("order-desk@nightly", "order-desk has no version or label 'nightly'"),
    ("no-such-desk@1", "there is no harness 'no-such-desk' in this console"),
])
def test_a_case_naming_a_version_not_on_record_is_refused_at_its_line(manager, reviewer, ml_staff, ref, why):
    _approved(manager, reviewer)
    client = APIClient()
    client.force_login(ml_staff)
    good = where_is(harness="order-desk@1")
    answer = _import(client, good, where_is(id="ghost", harness=ref))
    assert answer.status_code == 400, answer.content
    assert answer.json()["errors"] == [{"path": "line 2.harness", "message": f"{why}: its tool calls cannot be "
                                                                            "checked"}]
    assert not EvalSet.objects.filter(name="order-desk-refs").exists()  # nothing half-saved
    # the same wrong fact on the real version is refused too, at its field
    fact = good["gold_facts"][0]
    wrong = _import(client, where_is(id="wrong", harness="order-desk@1", gold_facts=[{**fact, "value": "lost"}]))
    assert wrong.status_code == 400 and wrong.json()["errors"][0]["path"] == "line 1.gold_facts[0].value"
    made = _import(client, good)
    assert made.status_code == 201, made.content
    assert HarnessVersion.objects.filter(harness__slug="order-desk").count() == 1


@pytest.mark.django_db
def test_a_label_reference_that_resolves_is_checked_like_a_number(manager, reviewer, ml_staff):
    version = _approved(manager, reviewer)
    harness_services.label_move(user=reviewer, harness=version.harness, name="production", version=version)
    client = APIClient()
    client.force_login(ml_staff)
    fact = where_is()["gold_facts"][0]
    wrong = _import(client, where_is(harness="order-desk@production", gold_facts=[{**fact, "value": "lost"}]))
    assert wrong.status_code == 400 and wrong.json()["errors"][0]["path"] == "line 1.gold_facts[0].value"
