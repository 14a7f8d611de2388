"""Evaluation of a harness the project did not write (issue 13): eval cases that name their calls by the harness's
tools (fixture, http, mcp or built-in bound), checked through the real dispatcher, judged by what carries a call out
(so HSA-renamed variants still match), saved from recorded turns, built from the order desk's written gold turns,
and an evaluation run of the order desk on the real Celery worker against the scripted endpoint."""

from __future__ import annotations

import copy
import hashlib
import json
import random
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import settings

from harness_editor import services as harness_services
from harness_editor.schemas import ManifestError, load_yaml, manifest_from_yaml
from harness_editor.schemas.bindings import binding_kind
from streams.tool_bindings import call_bound_tool
from tests.streams.preview_helpers import scripted_model  # noqa: F401  (fixture)
from tests.streams.scripted_endpoint import hermes_calls, native_calls, reply, scripted_endpoint  # noqa: F401
from training_jobs.evals.cases import EVAL_SETS, case_to_json, cases_to_jsonl, parse_case, read_cases
from training_jobs.evals.open_calls import call_identity, expected_identity, field_value, same_value, stable_key
from training_jobs.evals.written_cases import cases_from_written_turns

ROOT = Path(__file__).resolve().parents[2]
ORDER_DESK = ROOT / "harness_editor" / "demo" / "order_desk.yaml"
ORDER_DESK_TURNS = ROOT / "tests" / "training_jobs" / "data" / "order_desk_turns.yaml"

needs_shared_db = pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                     reason="the Celery worker needs the PostgreSQL test database")


def order_desk():
    return manifest_from_yaml(ORDER_DESK.read_text(encoding="utf-8"))


def turns():
    return load_yaml(ORDER_DESK_TURNS.read_text(encoding="utf-8"))


def where_is(**changes):
    case = {"id": "where-a1002", "kind": "t1", "harness": "order_desk",
            "comments": [{"viewer": "customer", "text": "where is my order A1002?"}],
            "gold_facts": [{"tool": "lookup_order", "arguments": {"order_id": "A1002"}, "field": "status",
                            "value": "shipped", "say": "shipped"}],
            "expected_tools": [{"tool": "lookup_order", "arguments": {"order_id": "A1002"}},
                               {"tool": "track_shipment", "arguments": {"order_id": "A1002"}}]}
    case.update(changes)
    return case


def errors_of(data, **kw):
    with pytest.raises(ManifestError) as exc:
        parse_case(data, **kw)
    return [(e.path, e.message) for e in exc.value.errors]


# --- the schema ---------------------------------------------------------------------------------------------------


def test_committed_built_in_cases_keep_their_bytes_and_hashes():
    """``tool`` is an optional field at the end and ``binding`` gained a default: canonical JSON is unchanged."""
    for spec in EVAL_SETS.values():
        lines = spec.path.read_text(encoding="utf-8").splitlines(keepends=True)[:150]
        text = "".join(lines)
        assert cases_to_jsonl(read_cases(text)) == text, spec.name


def test_a_case_names_calls_by_tool_and_needs_no_room():
    case = parse_case(where_is())
    assert case.room == {} and [t.tool for t in case.expected_tools] == ["lookup_order", "track_shipment"]
    assert json.loads(case_to_json(case))["gold_facts"][0] == {
        "arguments": {"order_id": "A1002"}, "field": "status", "value": "shipped", "say": "shipped",
        "tool": "lookup_order"}  # no "binding": it is at its default
    assert parse_case(json.loads(case_to_json(case))) == case


def test_tool_calls_are_checked_through_the_dispatcher_with_every_error_located():
    fact = where_is()["gold_facts"][0]
    data = where_is(
        gold_facts=[{**fact, "value": "delivered"}, {**fact, "tool": "find_parcel"},
                    {**fact, "arguments": {"order_number": "A1002"}}, {**fact, "field": "eta"},
                    {**fact, "arguments": {"order_id": "Z9"}}],
        expected_tools=[{"tool": "lookup_order", "arguments": {"order_id": "Z9"}},
                        {"tool": "track_shipment", "arguments": {"order_id": "A1002", "carrier": "x"}}])
    got = errors_of(data)
    assert got[0] == ("gold_facts[0].value", "lookup_order answers 'shipped' at 'status', not 'delivered'")
    assert got[1][0] == "gold_facts[1].tool" and "has no tool 'find_parcel'" in got[1][1]
    assert "lookup_order" in got[1][1]  # the tools it has
    assert got[2] == ("gold_facts[2].arguments.order_number", "lookup_order declares no parameter 'order_number'")
    assert got[3][0] == "gold_facts[3].field" and "no field 'eta'" in got[3][1] and "status" in got[3][1]
    assert got[4] == ("gold_facts[4].arguments", "lookup_order answers this call with a fault: no order with "
                      "this number")
    assert got[5] == ("expected_tools[0].arguments", "lookup_order answers these arguments with a fault: no order "
                      "with this number")
    assert got[6] == ("expected_tools[1].arguments.carrier", "track_shipment declares no parameter 'carrier'")
    assert len(got) == 7


def test_binding_or_tool_exactly_one_and_built_in_cases_still_need_a_room():
    assert errors_of(where_is(expected_tools=[{"arguments": {}}])) == [
        ("expected_tools[0].binding", "name the call by a built-in binding id or by a tool of the harness (tool)")]
    assert ("expected_tools[0].tool", "name the call by binding or by tool, not both") in errors_of(
        where_is(expected_tools=[{"tool": "lookup_order", "binding": "catalog.stock",
                                  "arguments": {"order_id": "A1002"}}]))
    got = errors_of(where_is(expected_tools=[{"binding": "campaign.state"}], harness="skincare_v1"))
    assert ("room", "a t1 case needs a room") in got


def test_a_slug_version_case_is_checked_against_the_manifest_given():
    m = order_desk()
    data = where_is(harness="order-desk@1")
    assert parse_case(data).harness == "order-desk@1"  # no manifest to check against: structure only
    assert parse_case(data, manifest=m).expected_tools[0].tool == "lookup_order"
    unbound = m.model_copy(update={"tools": [t.model_copy(update={"binding": None}) if t.name == "track_shipment"
                                             else t for t in m.tools]})
    assert errors_of(data, manifest=unbound) == [
        ("expected_tools[1].tool", "track_shipment has no binding: a turn calling it gets the fault 'unbound', so "
                                   "no correct turn makes this call")]


# --- the order desk's written turns as cases ----------------------------------------------------------------------


def test_written_turns_become_cases_whose_facts_the_fixtures_back():
    m = order_desk()
    written = turns()
    cases = cases_from_written_turns(m, written, harness="order_desk")
    assert [c.id for c in cases] == [f"written-{t['id']}" for t in written]
    assert all(c.room == {} and c.harness == "order_desk" and c.gold_reply == t["reply"]
               for c, t in zip(cases, written))
    assert [[(x.tool, x.arguments) for x in c.expected_tools] for c in cases] == [
        [(x["tool"], x["arguments"]) for x in t.get("calls") or []] for t in written]
    assert [c.expected_skills for c in cases] == [[t["skill"]] for t in written]
    facts = [f for c in cases for f in c.gold_facts]
    assert len(facts) >= 20
    for f in facts:  # independently of the validation: call the tool through the dispatcher, read the field
        result = call_bound_tool(m.tool(f.tool), {}, f.arguments)
        found, value = field_value(result, f.field)
        assert found and same_value(value, f.value), f
        assert f.say.casefold() in next(c.gold_reply.casefold() for c in cases if f in c.gold_facts)
    again = cases_from_written_turns(m, written, harness="order_desk")
    assert cases_to_jsonl(again) == cases_to_jsonl(cases)  # deterministic: one hash for one set of turns


def test_a_refused_written_turn_is_located():
    bad = copy.deepcopy(turns())
    bad[2]["calls"][0]["tool"] = "find_orders"
    bad[5]["calls"][0]["arguments"] = {"order_id": "A9999"}  # no such order: the fixture answers a fault
    with pytest.raises(ManifestError) as exc:
        cases_from_written_turns(order_desk(), bad, harness="order_desk")
    assert [e.path for e in exc.value.errors] == ["turns[2].calls[0].tool", "turns[5].calls[0]"]


# --- identity that survives HSA's renames -------------------------------------------------------------------------


def test_calls_match_across_hsa_renames_of_fixture_and_mcp_tools():
    """A variant with every tool renamed, parameters renamed and arguments wrapped (HSA's own operators, share 1):
    each written call, relabelled as HSA relabels the gold turn, is the same call to evaluation."""
    from training_jobs.hsa.operators import apply_chain, operator
    from training_jobs.hsa.samples import ToolCall
    from training_jobs.hsa.state import harness_state, validate_state
    from training_jobs.hsa.written import written_sample

    base = order_desk()
    ops = [operator("rename_tools", pool="heldout", share=1.0), operator("rename_tool_params", pool="heldout",
                                                                          share=1.0),
           operator("wrap_tool_arguments", pool="heldout", share=1.0)]
    compared = 0
    for i, turn in enumerate(turns()):
        sample = written_sample(base, turn, index=i)
        state, relabelled, _rename, applied = apply_chain(ops, harness_state(base), sample, random.Random(i))
        variant = validate_state(state)
        assert {"rename_tools", "rename_tool_params", "wrap_tool_arguments"} <= set(applied) or not turn.get("calls")
        before = [s for s in sample.target if isinstance(s, ToolCall)]
        after = [s for s in relabelled.target if isinstance(s, ToolCall)]
        for b, a in zip(before, after, strict=True):
            assert a.name != b.name  # renamed
            want = expected_identity(b.name, b.arguments, base)
            got = call_identity(variant.tool(a.name), a.arguments)
            assert got == want and want.arguments["answer"] != "none", (b, a)
            compared += 1
    assert compared >= 15

    # MCP: HSA pins the server's tool name when it renames the manifest tool; the arguments are not reshaped
    data = load_yaml(ORDER_DESK.read_text(encoding="utf-8"))
    data["tools"][0]["binding"] = {"kind": "mcp", "server": "orders"}
    mcp_base = manifest_from_yaml(json.dumps(data))
    state, _ = operator("rename_tools", pool="heldout", share=1.0).edit_harness(harness_state(mcp_base),
                                                                                random.Random(0))
    mcp_variant = validate_state(state)
    renamed = next(t for t in mcp_variant.tools if binding_kind(t.binding) == "mcp")
    assert renamed.name != "lookup_order"
    assert stable_key(renamed) == stable_key(mcp_base.tool("lookup_order")) == "mcp:orders/lookup_order"
    assert call_identity(renamed, {"order_id": "A1"}) == expected_identity("lookup_order", {"order_id": "A1"},
                                                                           mcp_base)


def test_the_judge_reads_a_variant_turn_in_the_cases_terms():
    """judge_case with base_manifest: the case's tool calls (base names) against a turn played under a renamed
    variant — the expected calls are found, so no call is reported missing."""
    from streams.engine.events import ToolCallEvent, ToolResultEvent
    from training_jobs.evals.judging import expectation_for, turn_calls

    base = order_desk()
    data = load_yaml(ORDER_DESK.read_text(encoding="utf-8"))
    tool = next(t for t in data["tools"] if t["name"] == "lookup_order")
    tool["parameters"]["properties"] = {"purchase_ref": tool["parameters"]["properties"]["order_id"]}
    tool["parameters"]["required"] = ["purchase_ref"]
    for c in tool["binding"]["cases"]:
        c["when"] = {"purchase_ref": c["when"]["order_id"]}
    variant = manifest_from_yaml(json.dumps(data).replace("lookup_order", "fetch_purchase"))
    case = parse_case(where_is(expected_tools=[{"tool": "lookup_order", "arguments": {"order_id": "A1002"}}]))
    result = SimpleNamespace(events=[
        ToolCallEvent.model_construct(call_id="c1", name="fetch_purchase", arguments={"purchase_ref": "A1002"},
                                      valid=True, error=None),
        ToolResultEvent.model_construct(call_id="c1", name="fetch_purchase", binding="fixture", error=None,
                                        fault=None, result={"status": "shipped"})])
    calls, _, _ = turn_calls(result, variant)
    expected = expectation_for(case, variant, base).calls
    assert [(c.binding, dict(c.arguments)) for c in calls] == [(e.binding, dict(e.arguments)) for e in expected]
    # without the base, the case's tool is not in the variant: the call cannot be matched
    assert expectation_for(case, variant).calls[0].binding == "missing:lookup_order"


# --- a recorded turn, an imported set, a run -----------------------------------------------------------------------


def _version(manager, reviewer, slug="order-desk"):
    v1 = harness_services.harness_create(user=manager, slug=slug, name="Order desk", manifest=order_desk(),
                                         change_note="brought in from outside the live room")
    harness_services.version_submit(user=manager, version=v1)
    return harness_services.version_approve(user=reviewer, version=v1, comment="policy read")


@pytest.mark.django_db
def test_a_recorded_order_desk_turn_saves_as_a_case_named_by_tools(manager, ml_staff, scripted_model,
                                                                    scripted_endpoint,
                                                                    django_capture_on_commit_callbacks):
    from streams import services
    from training_jobs.eval_models import EvalCase as EvalCaseRow
    from training_jobs.eval_services import eval_case_save_from_turn

    version = harness_services.harness_create(user=manager, slug="order-desk", name="Order desk",
                                              manifest=order_desk(), change_note="imported")
    room = services.preview_open(user=manager, version=version, endpoint=scripted_model)
    with django_capture_on_commit_callbacks(execute=False):
        turn_id = services.preview_comment_post(user=manager, room=room, text="where is my order A1002?",
                                                viewer="dana")
    said = "Order A1002 has shipped with ParcelCo, tracking number PC7781234."
    scripted_endpoint.add(hermes_calls(("load_skill", {"skill_id": "order_status"})),
                          native_calls(("lookup_order", {"order_id": "A1002"}),
                                       ("track_shipment", {"order_id": "A1002"})),
                          reply(said))
    result = services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    assert result.reply == said
    set_version, case_id = eval_case_save_from_turn(user=manager, room=room, turn_id=turn_id,
                                                    set_name="order-desk-regressions", gold_reply=said)
    row = EvalCaseRow.objects.get(version=set_version, case_id=case_id)
    case = parse_case(json.loads(row.case_json), manifest=version.manifest)
    assert case.harness == "order-desk@1"
    assert [(t.tool, t.arguments) for t in case.expected_tools] == [("lookup_order", {"order_id": "A1002"}),
                                                                    ("track_shipment", {"order_id": "A1002"})]
    assert case.expected_skills == ["order_status"]
    assert {(f.tool, f.field, f.value) for f in case.gold_facts} >= {
        ("lookup_order", "status", "shipped"), ("track_shipment", "carrier", "ParcelCo"),
        ("track_shipment", "tracking_number", "PC7781234")}
    assert all(not f.binding and f.link_id is None for f in case.gold_facts)


@pytest.mark.django_db
def test_importing_a_set_checks_tool_calls_against_the_named_version(manager, reviewer, ml_staff):
    from console.errors import ValidationFailed
    from training_jobs.eval_services import eval_set_import

    _version(manager, reviewer)
    good = where_is(harness="order-desk@1")
    fact = good["gold_facts"][0]
    bad = where_is(id="bad", harness="order-desk@1", gold_facts=[{**fact, "value": "lost"}])
    with pytest.raises(ValidationFailed) as exc:
        eval_set_import(user=ml_staff, name="order-desk-mini", kind="t1",
                        jsonl_text="\n".join(json.dumps(c) for c in (good, bad)))
    assert exc.value.errors == [{"path": "line 2.gold_facts[0].value",
                                 "message": "lookup_order answers 'shipped' at 'status', not 'lost'"}]
    version, created = eval_set_import(user=ml_staff, name="order-desk-mini", kind="t1", jsonl_text=json.dumps(good))
    assert created and version.cases.count() == 1
    # the case page names the calls by their tools
    from django.test import Client
    from django.urls import reverse

    client = Client()
    client.force_login(ml_staff)
    page = client.get(reverse("evals:case", args=["order-desk-mini", version.number, "where-a1002"]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "lookup_order({&quot;order_id&quot;: &quot;A1002&quot;})" in html and "track_shipment(" in html


def _script(ep, written, wrong: str = "") -> None:
    """The model's side: each written turn played as written (the skill, each call, the reply); the turn with
    id ``wrong`` calls nothing and promises a delivery date instead (which the desk's policy forbids)."""
    for t in written:
        ep.add(hermes_calls(("load_skill", {"skill_id": t["skill"]})))
        if t["id"] == wrong:
            for _ in range(4):  # the hooks may ask for retries
                ep.add(reply("Your order will arrive tomorrow, I promise."))
            continue
        for call in t.get("calls") or []:
            ep.add(native_calls((call["tool"], call["arguments"])))
        ep.add(reply(t["reply"]))


def _wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_order_desk_evaluation_run_on_the_worker(manager, reviewer, ml_staff, scripted_model, scripted_endpoint,
                                                 celery_worker_process):
    """The eval set built from the written turns, imported for order-desk v1, run by the console's evaluation job
    on the real worker: every case played through the turn engine with fixture-bound tools, judged by the rules,
    scored; the one turn that skipped its tools and promised a date is the one that fails."""
    from training_jobs import eval_run_services as S
    from training_jobs.eval_run_models import EvalRun
    from training_jobs.eval_services import eval_set_import

    version = _version(manager, reviewer)
    ref = f"{version.harness.slug}@{version.number}"
    wrong = "status-a1001"
    written = sorted(turns(), key=lambda t: t["id"] == wrong)  # played last: hook retries consume no other script
    cases = cases_from_written_turns(version.manifest, written, harness=ref)
    jsonl = cases_to_jsonl(cases)
    set_version, _ = eval_set_import(user=ml_staff, name="order-desk-written", kind="t1", jsonl_text=jsonl)
    assert set_version.content_hash == hashlib.sha256(jsonl.encode()).hexdigest()
    _script(scripted_endpoint, written, wrong=wrong)
    run = S.eval_run_start(user=ml_staff, eval_set_version=set_version, endpoint=scripted_model,
                           harness_version=version, name="order desk, written turns", deadline_s=30)
    run = _wait(lambda: (r := EvalRun.objects.get(pk=run.pk)).is_finished and r, 240, "the evaluation run")
    assert run.status == EvalRun.Status.SUCCEEDED, run.error
    results = {r.case_id: r for r in run.results.all()}
    assert len(results) == len(written) and not any(r.error for r in results.values())
    failed = {cid: (r.accuracy, r.effectiveness, r.problems, r.reply[:80]) for cid, r in results.items()
              if not r.solved}
    assert set(failed) == {f"written-{wrong}"}, failed
    bad = results[f"written-{wrong}"]
    # the desk's hooks refuse the promised date until the retries run out: the fallback line, judged ineffective
    assert (bad.fallback, bad.reason, bad.effectiveness) == (True, "retries_exhausted", 0.0)
    ok = results["written-cancel-a1003"]
    assert [e["name"] for e in ok.events if e.get("type") == "tool_call"] == [
        "load_skill", "verify_identity", "lookup_order", "cancel_order"]
    assert all(e.get("binding") == "fixture" for e in ok.events if e.get("type") == "tool_result"
               and e.get("name") != "load_skill")
    from django.test import Client
    from django.urls import reverse

    client = Client()
    client.force_login(ml_staff)
    detail = client.get(reverse("eval_runs:detail", args=[run.pk]))
    page = client.get(reverse("eval_runs:case", args=[run.pk, "written-cancel-a1003"]))
    assert (detail.status_code, page.status_code) == (200, 200)
    assert "cancel_order(" in page.content.decode()
    s = run.summary
    assert (s["cases"], s["samples"], s["errors"]) == (len(written), len(written), 0)
    assert s["pass_k"]["mean"] == pytest.approx((len(written) - 1) / len(written))
    assert s["accuracy"]["mean"] is not None and s["effectiveness"]["mean"] < 1.0


def test_t3_perturbation_keeps_fixture_tables_on_the_renamed_parameters():
    """T3's parameter renames and argument wrapping move a fixture's ``when`` paths with the parameters (as HSA
    does), so a perturbed order desk still answers its calls: every ``when`` path is a parameter of its tool, and
    each written call, moved the same way, gets the same answer of the same table."""
    from training_jobs.evals.t3 import LEVELS, perturb
    from training_jobs.hsa.operators import leaf_paths

    base = order_desk()
    for seed in range(6):
        variant, tool_map = perturb(base, LEVELS["union"], seed)
        moved_any = False
        for t in variant.tools:
            params = set(leaf_paths(t.parameters))
            for c in t.binding.cases:
                assert set(c.when) <= params, (seed, t.name, sorted(c.when), sorted(params))
            old = next(b for b in base.tools if tool_map.get(b.name, b.name) == t.name)
            assert stable_key(old) == stable_key(t)  # the same answers: the same table to evaluation
            moved_any |= set(leaf_paths(old.parameters)) != params
        assert moved_any


def test_t2_held_out_variants_of_the_order_desk_keep_the_cases_calls():
    """T2 from the order desk's cases: each case gets a held-out variant its gold reply fits (its tool calls
    answered by the base harness's fixtures), and every call it names is carried out by a tool of the variant
    with the same answers (what the judge compares)."""
    from training_jobs.evals.t2 import build_t2, variant_manifest

    base = order_desk()
    t1 = cases_from_written_turns(base, turns(), harness="order_desk", prefix="t1-")
    t2 = build_t2(t1, 0)
    assert len(t2) == len(t1) and all(c.kind == "t2" for c in t2)
    renamed = 0
    for case in t2:
        variant = variant_manifest(case, base)
        for t in case.expected_tools:
            name = case.harness_variant.tool_map.get(t.tool, t.tool)
            renamed += name != t.tool
            assert stable_key(variant.tool(name)) == stable_key(base.tool(t.tool)), (case.id, t.tool)
    assert renamed > 0
