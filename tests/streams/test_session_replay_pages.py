"""Session replay pages and API, per role: the session's replays, "Replay against…", the replay page (turns side
by side, flags, the regressions filter, progress, cancel / resume), and every 403 / 404 / 400 / 409 path.

The recordings here are scripted (an in-process backend plays a fixed tool-call sequence): they pin what the pages
show for a known regression. The same pipeline runs on real vLLM-CPU in test_session_replay_services.py and
test_session_replay_worker.py."""

from __future__ import annotations

import json
import uuid

import pytest
from rest_framework.test import APIClient

from console import roles
from console.jobs import Job
from streams.engine.turn import ScriptedBackend
from streams.models import ModelEndpoint, SessionReplay
from streams.services import session_replays as S
from tests.streams.replay_helpers import BANNED, live_session, record_turn, tiny_harness

pytestmark = pytest.mark.django_db

STOCK_TURN = ['<tool_call>{"name": "load_skill", "arguments": {"skill_id": "price_stock"}}</tool_call>',
              '<tool_call>{"name": "check_stock", "arguments": {"link_id": 102}}</tool_call>',
              "Only 8 left of Barrier Repair Ceramide Moisturizer, so be quick."]
SHIPPING_TURN = ['<tool_call>{"name": "load_skill", "arguments": {"skill_id": "shipping"}}</tool_call>',
                 '<tool_call>{"name": "get_shipping", "arguments": {}}</tool_call>',
                 f"Delivery takes 3-5 {BANNED}, free over $35."]


@pytest.fixture
def operator2(db, django_user_model):
    from tests.conftest import _make_user

    return _make_user(django_user_model, "operator_otto", roles.OPERATOR)


@pytest.fixture
def world(manager, operator):
    """A session of two scripted turns under v1, and a finished replay of it under v2 (which bans "business
    days"): the shipping turn regresses to the fallback line, the stock turn is unchanged."""
    v1, v2 = tiny_harness(manager)
    endpoint = ModelEndpoint.objects.create(name="loopback-test", base_url="http://127.0.0.1:9/v1", model="m",
                                            kind="vllm")
    session = live_session(operator, v1, endpoint=endpoint)
    stock = record_turn(session, v1, backend=ScriptedBackend(STOCK_TURN), endpoint=endpoint,
                        comments=[{"viewer": "bo", "text": "is link 102 in stock?"}])
    shipping = record_turn(session, v1, backend=ScriptedBackend(SHIPPING_TURN), endpoint=endpoint,
                           comments=[{"viewer": "cy", "text": "how long is shipping?"}])
    replay = S.session_replay_start(user=operator, session=session, harness_version=v2, endpoint=endpoint,
                                    enqueue=False)
    class ByComment:  # each turn plays its own script, chosen by the comment it answers
        def __init__(self):
            self.scripts = {}

        def stream_chat(self, messages, tools=None, **sampling):
            key = "stock" if "in stock" in json.dumps(messages) else "shipping"
            script = self.scripts.setdefault(key, ScriptedBackend(STOCK_TURN if key == "stock" else SHIPPING_TURN))
            return script.stream_chat(messages, tools, **sampling)

    replay = S.session_replay_execute(replay_id=replay.pk, backend_factory=ByComment)
    assert replay.status == Job.Status.SUCCEEDED, replay.error
    other = live_session(operator, v1, endpoint=endpoint, title="Another")
    return {"v1": v1, "v2": v2, "endpoint": endpoint, "session": session, "replay": replay, "other": other,
            "stock": stock, "shipping": shipping}


def _client(user=None):
    c = APIClient()
    if user is not None:
        c.force_login(user)
    return c


def test_the_replay_is_compared_turn_by_turn(world):
    rows = {t.turn_id: t for t in world["replay"].turns.all()}
    stock, shipping = rows[world["stock"]], rows[world["shipping"]]
    assert stock.outcome == "unchanged" and stock.new["reply"] == stock.original["reply"]
    assert [t["name"] for t in stock.new["tools"]] == ["load_skill", "check_stock"]
    assert shipping.original["fallback"] is False and shipping.new["fallback"] is True
    assert shipping.outcome == "regressed" and shipping.changed
    failed = [h for h in shipping.new["hooks"] if not h["passed"]]
    assert {h["hook_id"] for h in failed} == {"no-business-days"}
    summary = world["replay"].summary
    assert (summary["regressed"], summary["changed"], summary["new"]["fallbacks"],
            summary["original"]["fallbacks"]) == (1, 1, 1, 0)


# --- pages ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["operator", "ml_staff", "manager", "reviewer"])
def test_everyone_who_watches_reads_replays(role, world, request):
    c = _client(request.getfixturevalue(role))
    s, r = world["session"], world["replay"]
    page = c.get(f"/live/{s.pk}/replays/")
    assert page.status_code == 200 and r.name in page.content.decode()
    page = c.get(f"/live/{s.pk}/replays/{r.pk}/")
    body = page.content.decode()
    assert page.status_code == 200
    assert body.count('data-testid="turn-row"') == 2 and 'data-outcome="regressed"' in body
    assert "Delivery takes 3-5 business days" in body and "no-business-days" in body
    regressions = c.get(f"/live/{s.pk}/replays/{r.pk}/?show=regressed").content.decode()
    assert regressions.count('data-testid="turn-row"') == 1 and 'data-outcome="unchanged"' not in regressions
    assert ('data-testid="cancel"' in body or 'data-testid="resume"' in body) is False  # finished, nothing to do


def test_who_may_open_the_replay_form(world, operator, ml_staff, manager, reviewer, outsider):
    s = world["session"]
    for user in (operator, ml_staff):
        assert _client(user).get(f"/live/{s.pk}/replays/new/").status_code == 200
    for user in (manager, reviewer, outsider):
        assert _client(user).get(f"/live/{s.pk}/replays/new/").status_code == 403
    assert _client(outsider).get(f"/live/{s.pk}/replays/").status_code == 403
    assert _client(outsider).get(f"/live/{s.pk}/replays/{world['replay'].pk}/").status_code == 403
    assert _client().get(f"/live/{s.pk}/replays/").status_code == 302  # to the sign-in page
    missing = uuid.uuid4()
    assert _client(operator).get(f"/live/{missing}/replays/").status_code == 404
    assert _client(operator).get(f"/live/{missing}/replays/new/").status_code == 404
    assert _client(operator).get(f"/live/{s.pk}/replays/{missing}/").status_code == 404
    # a replay is only found under its own session's address
    assert _client(operator).get(f"/live/{world['other'].pk}/replays/{world['replay'].pk}/").status_code == 404


def test_replay_against_from_the_form(world, operator):
    c = _client(operator)
    s = world["session"]
    form = c.get(f"/live/{s.pk}/replays/new/").content.decode()
    assert 'value="tiny-room@2" selected' in form  # the newest version not in force is offered first
    bad = c.post(f"/live/{s.pk}/replays/new/", {"harness_version": "tiny-room@2", "endpoint": "loopback-test",
                                                "temperature": "9", "seed": "0"})
    assert bad.status_code == 400 and 'data-testid="error-temperature"' in bad.content.decode()
    assert SessionReplay.objects.count() == 1
    ok = c.post(f"/live/{s.pk}/replays/new/", {"harness_version": "tiny-room@1", "endpoint": "loopback-test",
                                               "temperature": "0", "seed": "7", "name": "v1 again"})
    replay = SessionReplay.objects.get(name="v1 again")
    assert ok.status_code == 302 and ok["Location"] == f"/live/{s.pk}/replays/{replay.pk}/"
    assert replay.status == Job.Status.QUEUED and replay.seed == 7 and replay.sampling == {"temperature": 0.0}
    assert replay.progress_total == 2


def test_cancel_and_resume_from_the_page(world, operator, operator2, ml_lead):
    s = world["session"]
    replay = S.session_replay_start(user=operator, session=s, harness_version=world["v1"],
                                    endpoint=world["endpoint"], enqueue=False)
    url = f"/live/{s.pk}/replays/{replay.pk}/"
    page = _client(operator).get(url).content.decode()
    assert 'data-testid="cancel"' in page and 'hx-trigger="every' in page  # queued: the page polls
    assert 'data-testid="cancel"' not in _client(operator2).get(url).content.decode()
    refused = _client(operator2).post(url + "cancel/")
    assert refused.status_code == 403 and "only op_frank" in refused.content.decode()
    assert _client(operator).post(url + "cancel/").status_code == 302
    assert SessionReplay.objects.get(pk=replay.pk).status == Job.Status.CANCELLED
    again = _client(operator).post(url + "cancel/")
    assert again.status_code == 409
    assert _client(ml_lead).post(url + "resume/").status_code == 302
    assert SessionReplay.objects.get(pk=replay.pk).status == Job.Status.QUEUED
    assert _client(operator).get(url + "cancel/").status_code == 405


# --- API --------------------------------------------------------------------------------------------------------


def test_api_reads_per_role(world, reviewer, outsider):
    s, r = world["session"], world["replay"]
    base = f"/api/live/sessions/{s.pk}/replays/"
    listed = _client(reviewer).get(base)
    assert listed.status_code == 200 and [x["id"] for x in listed.json()["results"]] == [str(r.pk)]
    detail = _client(reviewer).get(f"{base}{r.pk}/").json()
    assert detail["summary"]["regressed"] == 1 and detail["harness_version"] == 2 and detail["status"] == "succeeded"
    turns = _client(reviewer).get(f"{base}{r.pk}/turns/?outcome=regressed").json()
    assert [t["turn_id"] for t in turns] == [world["shipping"]] and turns[0]["new"]["fallback"] is True
    assert len(_client(reviewer).get(f"{base}{r.pk}/turns/").json()) == 2
    bad = _client(reviewer).get(f"{base}{r.pk}/turns/?outcome=worse")
    assert bad.status_code == 400 and bad.json()["errors"][0]["path"] == "outcome"
    assert _client(outsider).get(base).status_code == 403
    assert _client().get(base).status_code == 401
    assert _client(reviewer).get(f"/api/live/sessions/{uuid.uuid4()}/replays/").status_code == 404
    assert _client(reviewer).get(f"{base}{uuid.uuid4()}/").status_code == 404
    assert _client(reviewer).get(f"/api/live/sessions/{world['other'].pk}/replays/{r.pk}/").status_code == 404


def test_api_start_cancel_resume(world, operator, operator2, ml_staff, manager, reviewer):
    base = f"/api/live/sessions/{world['session'].pk}/replays/"
    body = {"harness": "tiny-room", "harness_version": 2, "endpoint": "loopback-test",
            "sampling": {"temperature": 0.2}, "seed": 3}
    for user in (manager, reviewer):
        refused = _client(user).post(base, body, format="json")
        assert refused.status_code == 403 and "operators and ML staff" in refused.json()["detail"]
    created = _client(ml_staff).post(base, body, format="json")
    assert created.status_code == 201 and created.json()["status"] == "queued"
    bad = _client(operator).post(base, {**body, "harness": "nope"}, format="json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["path"] == "harness"
    bad = _client(operator).post(base, {**body, "endpoint": "nope"}, format="json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["path"] == "endpoint"
    bad = _client(operator).post(base, {**body, "harness_version": 9}, format="json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["path"] == "harness_version"
    bad = _client(operator).post(base, {**body, "sampling": {"temperature": 5}}, format="json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["path"] == "sampling.temperature"
    assert SessionReplay.objects.count() == 2
    replay_id = created.json()["id"]
    assert _client(operator2).post(f"{base}{replay_id}/cancel/").status_code == 403
    cancelled = _client(ml_staff).post(f"{base}{replay_id}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert _client(ml_staff).post(f"{base}{replay_id}/cancel/").status_code == 409
    resumed = _client(ml_staff).post(f"{base}{replay_id}/resume/")
    assert resumed.status_code == 200 and resumed.json()["resumes"] == 1
    assert _client(ml_staff).post(f"{base}{uuid.uuid4()}/cancel/").status_code == 404


def test_a_long_replay_is_paged(world, reviewer, monkeypatch):
    from streams import replay_views

    monkeypatch.setattr(replay_views, "TURNS_PER_PAGE", 1)
    url = f"/live/{world['session'].pk}/replays/{world['replay'].pk}/"
    first = _client(reviewer).get(url).content.decode()
    assert first.count('data-testid="turn-row"') == 1 and f'data-turn="{world["stock"]}"' in first
    assert 'data-testid="page-next"' in first and "turns 1–1 of 2" in first
    second = _client(reviewer).get(url + "?page=2").content.decode()
    assert f'data-turn="{world["shipping"]}"' in second and 'data-testid="page-next"' not in second
    assert f'data-turn="{world["shipping"]}"' in _client(reviewer).get(url + "?page=99").content.decode()
    assert _client(reviewer).get(url + "?page=x&show=nonsense").status_code == 200


def test_the_command_line_replays_a_session(world, ml_staff):
    """manage.py replay_session: the endpoint here refuses connections, so every new turn is the fallback line —
    regressions against the recorded replies, and --fail-on-regression says so with exit status 2."""
    import io

    from django.core.management import CommandError, call_command

    out = io.StringIO()
    args = [str(world["session"].pk), "--harness", "tiny-room@1", "--endpoint", "loopback-test", "--user",
            ml_staff.username]
    call_command("replay_session", *args, "--json", stdout=out, stderr=io.StringIO())
    data = json.loads(out.getvalue())
    assert data["status"] == "succeeded" and [t["turn_id"] for t in data["turns"]] == [world["stock"],
                                                                                       world["shipping"]]
    assert data["summary"]["regressed"] == 2 and data["summary"]["new"]["fallbacks"] == 2
    assert all(t["outcome"] == "regressed" and t["why"] for t in data["turns"])
    text = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("replay_session", *args, "--regressions", "--fail-on-regression", stdout=text,
                     stderr=io.StringIO())
    assert exit_.value.code == 2 and "#1 REGRESSED" in text.getvalue() and "2 regressed" in text.getvalue()
    with pytest.raises(CommandError, match="no live session"):
        call_command("replay_session", "not-a-uuid", "--harness", "tiny-room@1", stdout=io.StringIO())
    with pytest.raises(CommandError, match="no model endpoint"):
        call_command("replay_session", *args[:3], "--endpoint", "nope", stdout=io.StringIO())
    assert SessionReplay.objects.filter(created_by=ml_staff).count() == 2
