"""Eval sets as versioned data: import → versions (content-hashed, no duplicates), export gives the bytes back,
path-precise errors that save nothing, the browser's filters, pinning, the seeded sets, and a real preview turn
saved as a case."""

from __future__ import annotations

import hashlib
import json

import pytest
from django.db import IntegrityError, connection, transaction

from console.errors import NotAllowed, ValidationFailed
from console.models import AuditEvent
from training_jobs import eval_selectors as selectors
from training_jobs import eval_services as services
from training_jobs.eval_models import EvalCase, EvalSet, EvalSetVersion
from training_jobs.evals.cases import content_hash, parse_case
from tests.training_jobs.eval_helpers import (  # noqa: F401
    GOOD, canonical_jsonl, loose_jsonl, preview_turn, scripted_endpoint, scripted_model, t1_case, t4_case)

pytestmark = pytest.mark.django_db


def _import(user, cases, name="t1-small", kind="t1", note="first cut", text=None):
    return services.eval_set_import(user=user, name=name, kind=kind, jsonl_text=text if text is not None else canonical_jsonl(cases),
                                    note=note)


def _errors(exc) -> list[tuple[str, str]]:
    return [(e["path"], e["message"]) for e in exc.value.errors]


# --- import, versions, export --------------------------------------------------------------------------------


def test_import_creates_a_set_and_version_one(ml_staff):
    cases = [t1_case(i) for i in range(3)]
    version, created = _import(ml_staff, cases)
    assert created and version.number == 1 and version.parent is None and version.author == ml_staff
    assert version.case_count == 3 and version.change_note == "first cut"
    assert version.content_hash == content_hash([parse_case(c) for c in cases])
    assert version.eval_set.kind == "t1" and version.eval_set.name == "t1-small"
    rows = list(EvalCase.objects.filter(version=version).order_by("position"))
    assert [r.case_id for r in rows] == ["t1-000", "t1-001", "t1-002"] and rows[0].tags == ["price"]
    assert rows[0].data["comments"][0]["text"] == "how much is the serum?? (0)"
    actions = list(AuditEvent.objects.filter(scope="eval_set:t1-small").order_by("id").values_list("action", flat=True))
    assert actions == ["eval_set.created", "eval_set.version_created"]


def test_export_is_byte_identical_to_the_canonical_import(ml_staff):
    text = canonical_jsonl([t1_case(i) for i in range(4)])
    version, _ = _import(ml_staff, None, text=text)
    exported = services.eval_set_export(version=version)
    assert exported == text
    assert hashlib.sha256(exported.encode("utf-8")).hexdigest() == version.content_hash
    assert version.size_bytes == len(text.encode("utf-8"))


def test_same_cases_give_back_the_existing_version(ml_staff, ml_lead):
    cases = [t1_case(i) for i in range(3)]
    first, created = _import(ml_staff, cases)
    # written differently (spaces, CRLF, blank lines, a BOM) but the same cases: no second version
    again, created_again = _import(ml_lead, cases, text="\ufeff" + loose_jsonl(cases), note="again")
    assert created and not created_again and again.pk == first.pk
    assert EvalSetVersion.objects.filter(eval_set__name="t1-small").count() == 1
    assert AuditEvent.objects.filter(action="eval_set.version_created").count() == 1


def test_new_content_is_a_new_version_with_its_parent(ml_staff, ml_lead):
    v1, _ = _import(ml_staff, [t1_case(i) for i in range(3)])
    v2, created = _import(ml_lead, [t1_case(i) for i in range(4)], note="one more case")
    assert created and v2.number == 2 and v2.parent == v1 and v2.author == ml_lead and v2.case_count == 4
    assert v2.content_hash != v1.content_hash
    # going back to v1's content returns v1, it does not make v3
    back, created = _import(ml_staff, [t1_case(i) for i in range(3)])
    assert not created and back == v1
    assert [v.number for v in selectors.eval_set_versions(eval_set=v1.eval_set)] == [2, 1]


def test_versions_and_cases_are_immutable_in_the_database(ml_staff):
    version, _ = _import(ml_staff, [t1_case(1)])
    with pytest.raises(IntegrityError if connection.vendor == "sqlite" else Exception):
        with transaction.atomic():
            EvalSetVersion.objects.filter(pk=version.pk).update(change_note="rewritten")
    with pytest.raises(Exception):
        with transaction.atomic():
            EvalCase.objects.filter(version=version).update(case_json="{}")
    version.refresh_from_db()
    assert version.change_note == "first cut"


@pytest.mark.parametrize("text,path,needle", [
    ('{"id": "a", "kind": "t1"', "line 1", "invalid JSON"),
    ("[1, 2]", "line 1", "must be an object"),
    ("", "jsonl", "no cases"),
    ("\n\n  \n", "jsonl", "no cases"),
])
def test_unreadable_sets_are_refused_where_they_fail(ml_staff, text, path, needle):
    with pytest.raises(ValidationFailed) as exc:
        _import(ml_staff, None, text=text)
    assert any(p == path and needle in m for p, m in _errors(exc)), _errors(exc)
    assert not EvalSet.objects.exists() and not AuditEvent.objects.exists()


def test_case_errors_name_the_line_and_the_field(ml_staff):
    good = t1_case(1)
    bad_text = t1_case(2)
    bad_text["comments"][0].pop("text")
    bad_tool = t1_case(3, expected_tools=[{"binding": "catalog.nope", "arguments": {}}])
    dup = t1_case(1)
    text = "\n".join(json.dumps(c) for c in (good, bad_text, bad_tool, dup))
    with pytest.raises(ValidationFailed) as exc:
        _import(ml_staff, None, text=text)
    paths = [p for p, _ in _errors(exc)]
    assert "line 2.comments[0].text" in paths
    assert "line 3.expected_tools[0].binding" in paths
    assert "line 4.id" in paths
    assert not EvalSet.objects.exists() and not EvalCase.objects.exists()


def test_a_set_holds_one_kind(ml_staff):
    with pytest.raises(ValidationFailed) as exc:
        _import(ml_staff, None, text=canonical_jsonl([t1_case(1), t4_case(7)]))
    assert _errors(exc) == [("line 2.kind", "a t1 set holds t1 cases, not t4")]
    _import(ml_staff, [t1_case(1)])
    with pytest.raises(ValidationFailed) as exc:  # an existing t1 set does not take a t4 version
        _import(ml_staff, [t4_case(7)], kind="t4")
    assert _errors(exc)[0][0] == "kind"
    assert EvalSetVersion.objects.count() == 1


@pytest.mark.parametrize("field,value,path", [
    ("name", "Has Spaces", "name"), ("name", "", "name"), ("name", "x" * 65, "name"),
    ("kind", "t9", "kind"), ("note", "n" * 2001, "note"),
])
def test_request_fields_are_checked(ml_staff, field, value, path):
    kwargs = {"user": ml_staff, "name": "ok-name", "kind": "t1", "jsonl_text": canonical_jsonl([t1_case(1)]),
              "note": ""}
    kwargs[field] = value
    with pytest.raises(ValidationFailed) as exc:
        services.eval_set_import(**kwargs)
    assert _errors(exc)[0][0] == path
    assert not EvalSet.objects.exists()


def test_size_limits(ml_staff, monkeypatch):
    monkeypatch.setattr(services, "MAX_IMPORT_BYTES", 1000)
    with pytest.raises(ValidationFailed) as exc:
        _import(ml_staff, [t1_case(1)])
    assert _errors(exc)[0][0] == "jsonl" and "at most" in _errors(exc)[0][1]
    with pytest.raises(ValidationFailed) as exc:
        services.eval_set_import(user=ml_staff, name="b", kind="t1", jsonl_text=b"\xff\xfe{}", note="")
    assert _errors(exc)[0] == ("jsonl", "not UTF-8 at byte 0")


# --- the browser's filters -----------------------------------------------------------------------------------


def test_filters_by_tag_text_and_kind_fields(ml_staff):
    cases = [t1_case(1, tags=["price", "typo"], text="hw much iz the serum"),
             t1_case(2, tags=["stock"], text="any HydraGlow left?",
                     expected_tools=[{"binding": "catalog.stock", "arguments": {"link_id": 101}}],
                     forbidden_claims=[{"kind": "false_stock", "text": "sold out"}]),
             t1_case(3, tags=["price"], text="coupon pls")]
    version, _ = _import(ml_staff, cases)
    ids = lambda qs: [c.case_id for c in qs]  # noqa: E731
    assert ids(selectors.eval_case_list(version=version, tag="price")) == ["t1-001", "t1-003"]
    assert ids(selectors.eval_case_list(version=version, tag="pri")) == []  # a tag is matched whole
    assert ids(selectors.eval_case_list(version=version, q="HYDRAGLOW")) == ["t1-002"]
    assert ids(selectors.eval_case_list(version=version, q="100%_")) == []  # LIKE wildcards are plain text
    assert ids(selectors.eval_case_list(version=version, facets={"tool": "catalog.stock"})) == ["t1-002"]
    assert ids(selectors.eval_case_list(version=version, facets={"claim": "efficacy"})) == ["t1-001", "t1-003"]
    assert ids(selectors.eval_case_list(version=version, tag="price", q="coupon")) == ["t1-003"]
    assert ids(selectors.eval_case_list(version=version, facets={"nonsense": "x"})) == ["t1-001", "t1-002", "t1-003"]
    assert version.facet_counts["tag"] == {"price": 2, "typo": 1, "stock": 1}
    assert version.facet_counts["tool"] == {"catalog.product_info": 2, "catalog.stock": 1}
    choices = {f["key"]: dict(f["values"]) for f in selectors.facet_choices(version)}
    assert choices["claim"] == {"efficacy": 2, "false_stock": 1} and "instruction" not in choices


def test_t4_facets_are_instructions(ml_staff):
    version, _ = _import(ml_staff, [t4_case(1), t4_case(2, "detectable_format:title")], name="t4-mini", kind="t4")
    choices = {f["key"]: dict(f["values"]) for f in selectors.facet_choices(version)}
    assert choices == {"instruction_group": {"punctuation": 1, "detectable_format": 1},
                       "instruction": {"punctuation:no_comma": 1, "detectable_format:title": 1}}
    found = selectors.eval_case_list(version=version, facets={"instruction_group": "detectable_format"})
    assert [c.case_id for c in found] == ["ifeval-2"]


# --- pinning -------------------------------------------------------------------------------------------------


def test_pin_is_for_ml_leads_and_recorded(ml_staff, ml_lead):
    v1, _ = _import(ml_staff, [t1_case(1)])
    with pytest.raises(NotAllowed):
        services.eval_set_pin(user=ml_staff, eval_set=v1.eval_set, version=v1)
    pinned = services.eval_set_pin(user=ml_lead, eval_set=v1.eval_set, version=v1)
    assert pinned.pinned == v1
    event = AuditEvent.objects.get(action="eval_set.pinned")
    assert (event.actor, event.to_state) == (ml_lead, "v1")
    other, _ = _import(ml_staff, [t1_case(2)], name="other")
    with pytest.raises(ValidationFailed):
        services.eval_set_pin(user=ml_lead, eval_set=v1.eval_set, version=other)
    services.eval_set_pin(user=ml_lead, eval_set=v1.eval_set, version=None)
    assert EvalSet.objects.get(pk=v1.eval_set_id).pinned is None
    assert AuditEvent.objects.filter(action="eval_set.unpinned").count() == 1


# --- seeding -------------------------------------------------------------------------------------------------


def test_seed_demo_imports_the_shipped_sets_once():
    from training_jobs.evals.cases import EVAL_SETS

    first = services.eval_sets_seed_demo()
    names = {v.eval_set.name for v in first}
    assert "t4-ifeval" in names
    t4 = next(v for v in first if v.eval_set.name == "t4-ifeval")
    assert t4.case_count == 541 and t4.eval_set.kind == "t4" and t4.eval_set.pinned == t4
    assert t4.author is None and t4.change_note == "seeded from data/ifeval/input_data.jsonl"
    for spec in EVAL_SETS.values():  # the built T1–T3 files, when present, round-trip byte for byte
        if spec.path.is_file():
            version = next(v for v in first if v.eval_set.name == spec.name)
            assert services.eval_set_export(version=version).encode("utf-8") == spec.path.read_bytes()
    again = services.eval_sets_seed_demo()
    assert [v.pk for v in again] == [v.pk for v in first]
    assert EvalSetVersion.objects.count() == len(first)
    case = selectors.eval_case_get(version=t4, case_id="ifeval-1000")
    assert case.data["instruction_id_list"] == ["punctuation:no_comma", "detectable_format:number_highlighted_sections",
                                                "length_constraints:number_words"]


# --- a recorded turn as a case -------------------------------------------------------------------------------


def test_save_a_preview_turn_as_a_case(manager, preview_turn):
    room, turn_id = preview_turn
    gold = "The HydraGlow serum is $24.9 right now (list price $34) and 180 are in stock."
    version, case_id = services.eval_case_save_from_turn(
        user=manager, room=room, turn_id=turn_id, set_name="regressions", gold_reply=gold, tags=["price", "stock"],
        note="good answer, keep it", forbidden_claims=[{"kind": "efficacy", "text": "cures dry skin"}])
    assert version.number == 1 and version.eval_set.kind == "t1" and case_id == f"turn-{turn_id}"
    case = selectors.eval_case_get(version=version, case_id=case_id).data
    assert case["comments"] == [{"viewer": "cm_alice", "text": "how much is #101? and stock??"}]
    assert case["harness"] == "glow-gadget@1" and case["gold_reply"] == gold
    assert case["room"]["products"][0]["link_id"] == 101 and case["room"]["clock_minute"] == room.room_state["clock_minute"]
    assert case["expected_tools"] == [{"binding": "catalog.product_info", "arguments": {"link_id": 101}}]
    assert case["expected_skills"] == ["price_stock_qa"]
    facts = {(f["field"], f["say"]) for f in case["gold_facts"]}
    assert {("price", "24.9"), ("list_price", "34"), ("stock", "180")} <= facts
    assert all(f["binding"] == "catalog.product_info" and f["link_id"] == 101 for f in case["gold_facts"])
    assert case["forbidden_claims"] == [{"kind": "efficacy", "text": "cures dry skin"}]
    assert case["tags"] == ["price", "stock", "preview"] and case["source"] == f"preview:{room.pk}#{turn_id}"
    parse_case(case)  # a valid case as it is stored
    event = AuditEvent.objects.get(action="eval_case.saved_from_turn")
    assert event.actor == manager and event.data["turn_id"] == turn_id and event.to_state == case_id


def test_a_saved_turn_appends_to_the_latest_version(manager, ml_staff, preview_turn):
    room, turn_id = preview_turn
    v1, _ = _import(ml_staff, [t1_case(1), t1_case(2)], name="regressions")
    v2, case_id = services.eval_case_save_from_turn(user=manager, room=room, turn_id=turn_id, set_name="regressions",
                                                    gold_reply="It is $24.9.", tags=[], note="")
    assert v2.number == 2 and v2.parent == v1 and v2.case_count == 3 and v2.author == manager
    exported = services.eval_set_export(version=v2)
    assert exported.startswith(services.eval_set_export(version=v1))  # v1's lines, unchanged, then the new case
    assert json.loads(exported.splitlines()[-1])["id"] == case_id
    # the same turn again: refused, nothing new
    with pytest.raises(ValidationFailed) as exc:
        services.eval_case_save_from_turn(user=manager, room=room, turn_id=turn_id, set_name="regressions",
                                          gold_reply="It is $24.9!", tags=[], note="")
    assert exc.value.errors[0]["path"] == "turn_id"
    assert EvalSetVersion.objects.filter(eval_set__name="regressions").count() == 2


def test_save_from_turn_errors_are_located_and_save_nothing(manager, preview_turn, ml_staff):
    room, turn_id = preview_turn
    base = {"user": manager, "room": room, "turn_id": turn_id, "set_name": "regressions", "gold_reply": "ok $24.9",
            "tags": [], "note": ""}
    cases = [({"gold_reply": "  "}, "gold_reply"), ({"set_name": "Bad Name"}, "set_name"),
             ({"tags": ["Not A Tag"]}, "tags[0]"), ({"tags": [{"x": 1}]}, "tags[0]"),
             ({"forbidden_claims": [{"kind": "lies", "text": "x"}]}, "forbidden_claims[0].kind"),
             ({"forbidden_claims": [{"kind": "efficacy"}]}, "forbidden_claims[0]"),
             ({"forbidden_claims": ["efficacy"]}, "forbidden_claims[0]")]
    for change, path in cases:
        with pytest.raises(ValidationFailed) as exc:
            services.eval_case_save_from_turn(**{**base, **change})
        assert exc.value.errors[0]["path"] == path, (change, exc.value.errors)
    _import(ml_staff, [t4_case(1)], name="ifeval-mini", kind="t4")
    with pytest.raises(ValidationFailed) as exc:  # turns go into T1 sets
        services.eval_case_save_from_turn(**{**base, "set_name": "ifeval-mini"})
    assert exc.value.errors[0]["path"] == "kind"
    with pytest.raises(services.TurnNotFound):
        services.eval_case_save_from_turn(**{**base, "turn_id": "f" * 32})
    assert not EvalSet.objects.filter(name="regressions").exists()
    assert not AuditEvent.objects.filter(action__startswith="eval_case").exists()


def test_save_from_turn_respects_who_may_see_the_room(preview_turn, manager2, reviewer, ml_staff):
    room, turn_id = preview_turn
    kwargs = {"room": room, "turn_id": turn_id, "set_name": "regressions", "gold_reply": "It is $24.9.", "tags": [],
              "note": ""}
    with pytest.raises(services.TurnNotFound):  # another manager, not invited: the room does not exist for them
        services.eval_case_save_from_turn(user=manager2, **kwargs)
    with pytest.raises(NotAllowed):  # a reviewer sees previews but does not author cases
        services.eval_case_save_from_turn(user=reviewer, **kwargs)
    from streams import services as stream_services

    stream_services.preview_member_add(user=room.created_by, room=room, username=manager2.username)
    version, _ = services.eval_case_save_from_turn(user=manager2, **kwargs)
    assert version.author == manager2


def test_save_a_scenario_run_turn_with_its_fault(manager, manager2, harness_with_history, scripted_model,
                                                 scripted_endpoint, monkeypatch, django_capture_on_commit_callbacks):
    """A real scenario run (the quick cut of after-sales-faults, played to the end in this process): any preview
    user may save its turns — here the one whose stock call was denied — and the case carries that fault."""
    from streams import selectors as stream_selectors
    from streams import services as stream_services
    from streams import tasks
    from tests.streams.test_scenario_runs import FakeClock, _script_quick_run, drain, quick_yaml

    queued = {"turns": [], "ticks": []}  # what the workers would run, run here by drain()
    monkeypatch.setattr(tasks.preview_turn, "delay", lambda *args: queued["turns"].append(args))
    monkeypatch.setattr(tasks.preview_clock_tick, "apply_async",
                        lambda args, countdown=0: queued["ticks"].append((*args, countdown)))
    scenario = stream_services.scenario_import(yaml_text=quick_yaml(), user=manager)
    _script_quick_run(scripted_endpoint)
    with django_capture_on_commit_callbacks(execute=True):
        run = stream_services.scenario_run_start(user=manager, version=harness_with_history["v1"],
                                                 scenario=scenario, endpoint=scripted_model)
    drain(queued, django_capture_on_commit_callbacks, FakeClock())
    run = stream_selectors.preview_room_get(room_id=run.pk)
    denied = stream_selectors.preview_transcript(room_id=run.pk)[1]
    version, case_id = services.eval_case_save_from_turn(
        user=manager2, room=run, turn_id=denied["turn_id"], set_name="fault-seeds",
        gold_reply="Sorry, I can't check the stock right now, please look at the product card.", tags=["fault"],
        note="", forbidden_claims=[{"kind": "false_stock", "text": "any stock figure for #202"}])
    case = selectors.eval_case_get(version=version, case_id=case_id).data
    assert case["comments"] == [{"viewer": "Bo", "text": "is the hair dryer #202 in stock?"}]
    assert case["tool_faults"] == {"catalog.stock": {"binding": "catalog.stock", "kind": "permission_denied"}}
    assert "expected_tools" not in case  # the denied call returned nothing to expect (empty: left out)
    assert case["tags"] == ["fault", "scenario-run"] and case["source"].startswith(f"run:{run.pk}#")
    assert version.author == manager2 and version.facet_counts["fault"] == {"permission_denied": 1}
