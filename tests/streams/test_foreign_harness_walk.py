"""Issue 13's "Done when" walk: two harnesses the project did not write, taken through the console's real services.

(a) The order desk (harness_editor/demo/order_desk.yaml): a customer-service agent with a written policy and 16
    tools, every one fixture-bound. validate -> render -> a preview turn whose tools answer from their fixtures
    (scripted endpoint over real HTTP) -> a scenario run of data/harnesses/order_desk_scenarios/order-desk-day.yaml
    on the real Celery worker (the scenario's own fixtures first, a tool fault) -> an HSA dataset built from that
    run's recorded turns. One more preview turn against the shared vLLM server (HAT_TEST_VLLM_URL), when it runs.
    The evaluation step (an eval set from the written gold turns, a run of the approved version on the real worker,
    scored by the rules): tests/training_jobs/test_eval_foreign_harness.py (test_order_desk_evaluation_run_...).
(b) data/harnesses/public_functions.json: 63 public-style function definitions (Python-style types, dotted
    names) -> import (every change reported) -> validate (every error at once) -> render.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from pathlib import Path

import pytest
from django.conf import settings

from harness_editor import services as harness_services
from harness_editor.render import render_prompt
from harness_editor.schemas import (
    LOAD_SKILL_TOOL,
    ManifestError,
    load_yaml,
    manifest_from_yaml,
    manifest_to_json,
    parse_manifest,
)
from harness_editor.schemas.bindings import binding_label
from streams import selectors, services
from streams.models import PreviewEvent
from tests.streams.scripted_endpoint import hermes_calls, native_calls, reply

ROOT = Path(__file__).resolve().parents[2]
ORDER_DESK = ROOT / "harness_editor" / "demo" / "order_desk.yaml"
ORDER_DESK_DAY = ROOT / "data" / "harnesses" / "order_desk_scenarios" / "order-desk-day.yaml"
PUBLIC_FUNCTIONS = ROOT / "data" / "harnesses" / "public_functions.json"

needs_shared_db = pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                     reason="the Celery worker needs the PostgreSQL test database")

WHERE_IS_A1002 = ("Order A1002 has shipped with ParcelCo, tracking number PC7781234. The latest scan says it "
                  "arrived at the Oakland delivery hub.")


def order_desk():
    return manifest_from_yaml(ORDER_DESK.read_text(encoding="utf-8"))


def _create(user, slug: str = "order-desk"):
    return harness_services.harness_create(user=user, slug=slug, name="Order desk", manifest=order_desk(),
                                           change_note="brought in from outside the live room")


def _approved(manager, reviewer):
    v1 = _create(manager)
    harness_services.version_submit(user=manager, version=v1)
    return harness_services.version_approve(user=reviewer, version=v1, comment="policy read")


# --- (a) the order desk ---------------------------------------------------------------------------------------


def test_order_desk_validates_with_every_tool_bound():
    from streams.tool_bindings import EMPTY_RUNTIME, binding_availability

    m = order_desk()
    assert len(m.tools) >= 12 and {binding_label(t.binding) for t in m.tools} == {"fixture"}
    assert binding_availability(m, EMPTY_RUNTIME) == []  # fixtures need nothing from the host
    rendered = render_prompt(m, comments=[{"text": "where is my order A1002?"}])
    assert [t["function"]["name"] for t in rendered.tools] == [t.name for t in m.tools] + [LOAD_SKILL_TOOL]
    assert "Refunds are possible within 30 days of delivery" in rendered.system_text
    assert rendered.messages[-1]["content"] == "[customer] where is my order A1002?"


@pytest.mark.django_db
def test_order_desk_preview_turn_answers_from_fixtures(manager, scripted_model, scripted_endpoint,
                                                       django_capture_on_commit_callbacks):
    version = _create(manager)
    room = services.preview_open(user=manager, version=version, endpoint=scripted_model)
    with django_capture_on_commit_callbacks(execute=False):
        turn_id = services.preview_comment_post(user=manager, room=room, text="Hi, where is my order A1002?",
                                                viewer="dana")
    scripted_endpoint.add(hermes_calls(("load_skill", {"skill_id": "order_status"})),
                          native_calls(("lookup_order", {"order_id": "A1002"}),
                                       ("track_shipment", {"order_id": "A1002"})),
                          reply(WHERE_IS_A1002))
    result = services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    failed = [(e.hook_id, e.detail) for e in result.events if e.type == "hook_result" and not e.passed]
    assert (result.reply, result.fallback, result.reason, failed) == (WHERE_IS_A1002, False, "ok", [])

    first = scripted_endpoint.requests[0]
    assert first["messages"][-1]["content"] == "[dana] Hi, where is my order A1002?"
    assert "Store policy" in first["messages"][0]["content"]
    assert [t["function"]["name"] for t in first["tools"]][:3] == ["lookup_order", "list_orders", "track_shipment"]
    # what the model saw back: the fixtures' answers, never live-room data
    tool_msgs = [json.loads(m["content"]) for m in scripted_endpoint.requests[-1]["messages"]
                 if m["role"] == "tool" and m["content"].startswith("{")]  # not the skill's body
    assert tool_msgs[-2]["status"] == "shipped" and tool_msgs[-1]["tracking_number"] == "PC7781234"
    assert not any("link_id" in json.dumps(m) for m in tool_msgs)

    (t,) = selectors.preview_transcript(room_id=room.pk)
    assert t["state"] == "done" and t["reply"]["text"] == WHERE_IS_A1002
    assert [c["name"] for c in t["tools"]] == ["load_skill", "lookup_order", "track_shipment"]
    results = [e.payload for e in PreviewEvent.objects.filter(room=room, turn_id=turn_id, type="tool_result")]
    assert [(r["name"], r["binding"]) for r in results if r["name"] != LOAD_SKILL_TOOL] == [
        ("lookup_order", "fixture"), ("track_shipment", "fixture")]


def _script_order_desk_day(ep) -> list[str]:
    """The model's side of the shift, turn by turn (the replies the harness accepts)."""
    replies = [
        WHERE_IS_A1002,
        "I've opened return R-5521 for order A1001; the prepaid label goes to your account e-mail. The refund "
        "of 48 dollars follows once the parcel is scanned at our warehouse.",
        "Yes, the refund of 72 dollars for order A1005 was sent on 2026-11-20 to your original payment method. "
        "Your bank usually shows it within 3 to 5 business days.",
        "Order A1003 is cancelled. The refund of 54 dollars goes to your original payment method within 5 to 10 "
        "business days.",
        "Order A1006 is still processing, so nothing has shipped yet. I can't check tracking right now, but it "
        "holds one pair of wool-lined boots.",
    ]
    ep.add(hermes_calls(("load_skill", {"skill_id": "order_status"})),
           native_calls(("lookup_order", {"order_id": "A1002"}), ("track_shipment", {"order_id": "A1002"})),
           reply(replies[0]))
    ep.add(hermes_calls(("load_skill", {"skill_id": "returns_refunds"})),
           native_calls(("verify_identity", {"order_id": "A1001", "email": "dana@example.com", "postal_code": "94110"})),
           native_calls(("check_return_eligibility", {"order_id": "A1001"})),
           native_calls(("start_return", {"order_id": "A1001", "items": [{"sku": "TEE-ORG-BLU-M", "quantity": 2}],
                                          "reason": "too_small"})),
           reply(replies[1]))
    ep.add(hermes_calls(("load_skill", {"skill_id": "returns_refunds"})),
           native_calls(("get_refund_status", {"order_id": "A1005"})),
           reply(replies[2]))
    ep.add(hermes_calls(("load_skill", {"skill_id": "cancellations"})),
           native_calls(("verify_identity", {"order_id": "A1003", "email": "dana@example.com", "postal_code": "94110"}),
                        ("lookup_order", {"order_id": "A1003"})),
           native_calls(("cancel_order", {"order_id": "A1003", "reason": "ordered_by_mistake"})),
           reply(replies[3]))
    ep.add(hermes_calls(("load_skill", {"skill_id": "order_status"})),
           native_calls(("lookup_order", {"order_id": "A1006"}), ("track_shipment", {"order_id": "A1006"})),
           reply(replies[4]))
    return replies


def _wait(pred, timeout: float = 120.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _run_order_desk_day(manager, reviewer, scripted_model, scripted_endpoint):
    """The support shift played to its end through the workers' path (ticks and turns on the real Celery worker);
    returns (the run's room, its job, the replies scripted)."""
    from streams.models import ScenarioRun as ScenarioRunJob

    version = _approved(manager, reviewer)
    scenario = services.scenario_import(yaml_text=ORDER_DESK_DAY.read_text(encoding="utf-8"), user=manager)
    replies = _script_order_desk_day(scripted_endpoint)
    run = services.scenario_run_start(user=manager, version=version, scenario=scenario, endpoint=scripted_model)
    job = _wait(lambda: (j := ScenarioRunJob.objects.get(pk=run.pk)).is_finished and j, what="the scenario run")
    return run, job, replies


def _turns(transcript) -> list[tuple]:
    """What each turn did, for an assertion message."""
    return [(t["comments"][0]["text"][:30], [c["name"] for c in t["tools"]],
             [(h["hook_id"], h.get("detail")) for h in t["hooks"] if not h["passed"]], t["reply"]["text"][:60])
            for t in transcript]


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_order_desk_scenario_run_on_the_worker(manager, reviewer, scripted_model, scripted_endpoint,
                                               celery_worker_process):
    run, job, replies = _run_order_desk_day(manager, reviewer, scripted_model, scripted_endpoint)
    assert job.status == "succeeded", job.error
    transcript = selectors.preview_transcript(room_id=run.pk)
    assert [t["reply"]["text"] for t in transcript] == replies, _turns(transcript)
    assert all(t["state"] == "done" and not t["reply"]["fallback"] for t in transcript)
    # the harness's own fixture table answered; the scenario's own fixture answered an order only it knows; the
    # tracking tool's fault reached the model as a tool fault
    assert transcript[0]["tools"][2]["result"]["result"]["tracking_number"] == "PC7781234"
    assert transcript[0]["tools"][2]["result"]["binding"] == "fixture"
    a1006 = transcript[4]["tools"]
    assert a1006[1]["name"] == "lookup_order" and a1006[1]["result"]["result"]["ship_to_city"] == "Denver"
    assert a1006[2]["name"] == "track_shipment" and a1006[2]["result"]["fault"] == "timeout"
    s = job.summary
    assert (s["comments"], s["turns"], s["replies"], s["fallbacks"], s["failed_turns"]) == (5, 5, 5, 0, 0)
    assert s["tool_faults_by_kind"] == {"timeout": 1}


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_order_desk_hsa_dataset_from_its_run(manager, reviewer, ml_staff, scripted_model, scripted_endpoint,
                                             celery_worker_process):
    from training_jobs import services as training_services
    from training_jobs.models import Dataset
    from training_jobs.services.datasets import collect_samples, parse_sources

    run, job, _ = _run_order_desk_day(manager, reviewer, scripted_model, scripted_endpoint)
    assert job.status == "succeeded", job.error
    sources = {"scenarios": [], "demo_manifests": [], "preview_rooms": [str(run.pk)]}
    samples, recorded = collect_samples(parse_sources(sources))
    # the A1006 turn ran under a tool fault: left out; the other four are right
    assert len(samples) == 4 and recorded["kept"] == 4, recorded
    dataset = training_services.dataset_build_start(
        user=ml_staff, recipe={"name": "order-desk", "seed": 3, "variants_per_sample": 2, "harness_pool_size": 4},
        sources=sources)
    try:
        dataset = _wait(lambda: (d := Dataset.objects.get(pk=dataset.pk)).is_finished and d, timeout=240,
                        what="the dataset build")
        assert dataset.status == "succeeded", dataset.error
        assert dataset.sample_count == 4 and dataset.stats["recorded_turns"]["kept"] == 4
        assert dataset.stats["rows"] == dataset.row_counts[dataset.split] >= dataset.sample_count
        assert dataset.stats["operators"]
    finally:
        shutil.rmtree(training_services.datasets_dir() / str(dataset.pk), ignore_errors=True)


ORDER_DESK_TURNS = ROOT / "tests" / "training_jobs" / "data" / "order_desk_turns.yaml"  # written gold turns


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_order_desk_hsa_dataset_from_written_turns_on_the_worker(manager, reviewer, ml_staff,
                                                                  celery_worker_process):
    """HSA for a harness the reference policy does not know: the team's written gold turns for the approved
    version, each answered by the tools' fixtures, augmented and built into a dataset by the real worker."""
    from training_jobs import services as training_services
    from training_jobs.models import Dataset

    version = _approved(manager, reviewer)
    turns = load_yaml(ORDER_DESK_TURNS.read_text(encoding="utf-8"))
    dataset = training_services.dataset_build_start(
        user=ml_staff, recipe={"name": "order-desk", "seed": 3, "variants_per_sample": 2, "harness_pool_size": 4},
        sources={"scenarios": [], "demo_manifests": [],
                 "written": [{"version": f"{version.harness.slug}@{version.number}", "turns": turns}]})
    try:
        dataset = _wait(lambda: (d := Dataset.objects.get(pk=dataset.pk)).is_finished and d, timeout=240,
                        what="the dataset build")
        assert dataset.status == "succeeded", dataset.error
        assert dataset.sample_count == len(turns)
        assert dataset.stats["rows"] == dataset.row_counts[dataset.split] > 0
        assert any(c.get("applied") for c in dataset.stats["operators"].values()), dataset.stats["operators"]
    finally:
        shutil.rmtree(training_services.datasets_dir() / str(dataset.pk), ignore_errors=True)


def order_desk_lean():
    """The order desk cut to what the tiny demo model's 2,048-token context holds: two reply skills, the two order
    tools (fixture-bound as in the full harness), the policy, no skills index boilerplate beyond the default."""
    data = load_yaml(ORDER_DESK.read_text(encoding="utf-8"))
    data["skills"] = [s for s in data["skills"] if s["id"] in ("order_status", "small_talk")]
    data["skills"][0]["allowed_tools"] = ["lookup_order", "track_shipment"]
    data["tools"] = [t for t in data["tools"] if t["name"] in ("lookup_order", "track_shipment")]
    data["hooks"] = [h for h in data["hooks"] if h["kind"] in ("tool_args", "retry_control")]
    data["prompt"]["blocks"] = [b for b in data["prompt"]["blocks"] if b["role"] != "compliance"]
    return parse_manifest(data)


@pytest.mark.django_db
def test_order_desk_turn_on_real_vllm(manager, vllm_server):
    """One real turn of the (lean) order desk on vLLM (the shared server of HAT_TEST_VLLM_URL, else the session's):
    the tiny demo model never saw this harness, so only the plumbing is asserted: the prompt fits, tokens stream,
    and any tool it calls answers from its fixture, never with live-room data."""
    from streams.models import ModelEndpoint

    m = order_desk_lean()
    assert render_prompt(m, comments=[{"text": "where is my order A1002?"}]).estimated_tokens() < 1400
    version = harness_services.harness_create(user=manager, slug="order-desk-lean", name="Order desk (lean)",
                                              manifest=m)
    endpoint = ModelEndpoint.objects.create(name="vllm-walk", base_url=vllm_server.openai_base_url.rstrip("/"),
                                            model=vllm_server.model, kind="vllm", timeout_s=120, connect_timeout_s=5)
    room = services.preview_open(user=manager, version=version, endpoint=endpoint)
    turn_id = services.preview_comment_post(user=manager, room=room, text="where is my order A1002?")
    result = services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    assert result is not None and result.reply and result.timings.model_calls >= 1
    errors = [e for e in result.events if e.type == "error"]
    assert result.reason != "model_error" and not errors, errors
    assert any(e.type == "token" for e in result.events)  # streamed from the model
    for e in result.events:
        if e.type == "tool_result" and e.name != LOAD_SKILL_TOOL:
            assert e.binding == "fixture" or e.result.get("code") in ("unknown_tool", "invalid_arguments")
            assert "link_id" not in json.dumps(e.result)  # never live-room data


# --- (b) public-style function definitions --------------------------------------------------------------------

FUNCTION_DESK = {
    "name": "Function desk",
    "description": "A general assistant over public function-calling definitions.",
    "skills": [{"id": "use_functions", "kind": "reply", "description": "Answer by calling the right function.",
                "body": "Pick the function whose description fits, fill its arguments from the request."}],
    "prompt": {"layout": "markdown", "blocks": [
        {"id": "persona", "role": "persona", "title": "Assistant", "content": "You answer with function calls."},
        {"id": "skills", "role": "skills_index", "title": "Skills"}]},
    "constraints": {"reply_max_chars": 800, "speakable": False, "tone": "neutral"},
    "conventions": {"speaker_label": "user", "output_format": ["Plain text."],
                    "fallback_reply": "Sorry, I could not complete that request."},
}


def _imported():
    from harness_editor.importers import import_into_manifest, import_tools

    payload = json.loads(PUBLIC_FUNCTIONS.read_text(encoding="utf-8"))
    result = import_tools(payload, source="functions")
    data, conflicts = import_into_manifest(FUNCTION_DESK, result)
    return payload, result, data, conflicts


def test_public_functions_import_validate_render():
    payload, result, data, conflicts = _imported()
    assert len(payload) >= 50 and len(result.tools) == len(payload) and not conflicts
    kinds = {c.kind for c in result.changes}
    assert {"renamed", "type_mapped", "duplicate_name", "dropped_key"} <= kinds
    renamed = {c.message for c in result.changes if c.kind == "renamed"}
    assert any("math.factorial" in m and "math_factorial" in m for m in renamed), sorted(renamed)[:5]
    by_name = {t["name"]: t for t in result.tools}
    hypot = by_name["math_hypot"]["parameters"]
    assert hypot["properties"]["x"]["type"] == "number" and hypot["required"] == ["x", "y"]  # float; z has a default
    interval = by_name["geometry_calculate_area_under_curve"]["parameters"]["properties"]["interval"]
    assert interval["type"] == "array" and "prefixItems" in interval or "items" in interval  # a tuple
    assert "weather_get_forecast_2" in by_name  # the duplicate kept under a new name, and said so

    m = parse_manifest(data)  # valid as imported: unbound tools are warnings, not errors
    assert len(m.tools) == len(payload) and all(t.binding is None for t in m.tools)
    rendered = render_prompt(m, comments=[{"text": "what is 5 factorial?"}])
    assert len(rendered.tools) == len(payload) + 1 and rendered.messages[-1]["content"] == "[user] what is 5 factorial?"
    assert manifest_to_json(parse_manifest(json.loads(manifest_to_json(m)))) == manifest_to_json(m)


def test_public_functions_every_error_at_once():
    """Three kinds of mistakes in one edit (a bad name, a Python type left in a schema, a duplicate name) are
    reported together, each at its own path: one round trip, not three."""
    _, _, data, _ = _imported()
    broken = copy.deepcopy(data)
    broken["tools"][0]["name"] = "math.factorial"
    broken["tools"][5]["parameters"]["properties"]["radius"]["type"] = "float"
    broken["tools"][9]["name"] = broken["tools"][8]["name"]
    with pytest.raises(ManifestError) as exc:
        parse_manifest(broken)
    paths = [e.path for e in exc.value.errors]
    assert "tools[0].name" in paths, paths
    assert any(p.startswith("tools[5].parameters") for p in paths), paths
    assert "tools[9].name" in paths, paths


def test_walk_data_is_loadable_as_yaml_too():
    """The scenario and harness files parse on their own (what seed_demo and the console import)."""
    from streams.scenarios import load_scenario

    s = load_scenario(ORDER_DESK_DAY)
    assert s.fixtures["lookup_order"][0].when == {"order_id": "A1006"}
    assert set(load_yaml(ORDER_DESK.read_text(encoding="utf-8"))) >= {"conventions", "tools", "prompt"}
