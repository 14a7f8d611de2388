"""Semantic manifest diff. Pure Python: no Django, no database."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness_editor.diff import Change, ManifestDiff, diff_manifests
from harness_editor.schemas import Manifest, load_yaml, manifest_from_yaml, parse_manifest

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"
V1, V2, V3 = (manifest_from_yaml((DEMO / f"skincare_v{i}.yaml").read_text(encoding="utf-8")) for i in (1, 2, 3))
V1_DATA = load_yaml((DEMO / "skincare_v1.yaml").read_text(encoding="utf-8"))


def edited(fn: Callable[[dict[str, Any]], Any]) -> Manifest:
    d = copy.deepcopy(V1_DATA)
    fn(d)
    return parse_manifest(d)


def only(diff: ManifestDiff, **match: Any) -> Change:
    found = [c for c in diff.changes if all(getattr(c, k) == v for k, v in match.items())]
    assert len(found) == 1, (match, [(c.component, c.kind, c.key, c.path) for c in diff.changes])
    return found[0]


def tool(d: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in d["tools"] if t["name"] == name)


def test_identical_manifests_have_an_empty_diff() -> None:
    d = diff_manifests(V1, manifest_from_yaml((DEMO / "skincare_v1.yaml").read_text(encoding="utf-8")))
    assert d.is_empty and not d.breaking and d.summary() == {} and d.changes == []


def test_v1_to_v2_is_a_non_breaking_campaign_change() -> None:
    d = diff_manifests(V1, V2)
    assert not d.breaking, [c.summary for c in d.changes if c.breaking]
    assert d.summary() == {"manifest": 1, "skill": 2, "tool": 3, "hook": 1, "prompt_block": 1, "constraint": 1}
    assert only(d, component="skill", kind="added").key == "bundle_offer"
    body = only(d, component="skill", kind="changed", key="coupon_strategy")
    assert body.path == "skills[coupon_strategy].body" and not body.breaking
    assert body.text_diff[0].startswith("--- skills[coupon_strategy].body (before)")
    assert any(line.startswith("+6. Coupons do not stack") for line in body.text_diff)
    param = only(d, component="tool", kind="added", key="pin_product")
    assert param.path == "tools[pin_product].parameters.properties.duration_seconds" and not param.breaking
    amap = only(d, component="tool", key="pin_product", path="tools[pin_product].argument_map")
    assert not amap.breaking and amap.after == {"link_id": "link_id", "duration_s": "duration_seconds"}
    c = only(d, component="constraint")
    assert (c.key, c.path, c.before, c.after) == ("reply_max_chars", "constraints.reply_max_chars", 200, 160)
    hook = only(d, component="hook")
    assert hook.path == "hooks[banned-medical-claims].phrases" and "dermatologist approved" in hook.summary
    assert only(d, component="prompt_block").path == "prompt.blocks[rules].items"


def test_v2_to_v3_is_breaking_with_rename_new_required_param_and_reorder() -> None:
    d = diff_manifests(V2, V3)
    assert d.breaking
    ren = only(d, component="tool", kind="renamed")
    assert (ren.key, ren.before, ren.after, ren.breaking) == (
        "get_product_details",
        "lookup_product",
        "get_product_details",
        True,
    )
    added = only(d, component="tool", kind="added", key="check_stock")
    assert added.path == "tools[check_stock].parameters.properties.item_id" and added.breaking
    assert only(d, component="tool", kind="removed", key="check_stock").breaking
    assert only(d, component="tool", path="tools[check_stock].argument_map").breaking
    reorder = only(d, component="prompt_block", kind="reordered")
    assert reorder.before == ["persona", "room", "rules", "compliance", "skills", "format"]
    assert reorder.after == ["persona", "room", "compliance", "rules", "skills", "format"]
    assert not reorder.breaking
    # Skills that only follow the tool rename do not report an allowed_tools change.
    assert not [c for c in d.changes if c.path.endswith(".allowed_tools")]
    assert not [c for c in d.changes if c.component == "skill" and c.breaking]


def test_tool_rename_detected_by_binding_and_description() -> None:
    def rename(d: dict[str, Any]) -> None:
        t = tool(d, "check_stock")
        t["name"] = "stock_level"
        t["parameters"]["properties"] = {"item": t["parameters"]["properties"]["link_id"]}
        t["parameters"]["required"] = ["item"]
        t["argument_map"] = {"link_id": "item"}
        for s in d["skills"]:
            s["allowed_tools"] = ["stock_level" if n == "check_stock" else n for n in s["allowed_tools"]]

    d = diff_manifests(V1, edited(rename))
    ren = only(d, kind="renamed")
    assert (ren.component, ren.before, ren.after, ren.breaking) == ("tool", "check_stock", "stock_level", True)
    assert not [c for c in d.changes if c.kind == "removed" and c.path == "tools[check_stock]"]


def test_tool_removed_and_added() -> None:
    def swap(d: dict[str, Any]) -> None:
        d["tools"] = [t for t in d["tools"] if t["name"] != "pin_product"]
        for s in d["skills"]:
            s["allowed_tools"] = [n for n in s["allowed_tools"] if n != "pin_product"]

    d = diff_manifests(V1, edited(swap))
    removed = only(d, component="tool", kind="removed")
    assert removed.key == "pin_product" and removed.breaking
    flash = only(d, component="skill", path="skills[flash_sale_push].allowed_tools")
    assert flash.breaking  # a tool was taken away from the skill
    back = diff_manifests(edited(swap), V1)
    assert not only(back, component="tool", kind="added").breaking


def _add_param(name: str, node: dict[str, Any], required: bool) -> Callable[[dict[str, Any]], None]:
    def fn(d: dict[str, Any]) -> None:
        params = tool(d, "get_shipping_policy")["parameters"]
        params["properties"][name] = node
        if required:
            params.setdefault("required", []).append(name)

    return fn


def test_optional_param_added_is_not_breaking_required_is() -> None:
    opt = only(diff_manifests(V1, edited(_add_param("note", {"type": "string"}, False))), kind="added")
    assert opt.path == "tools[get_shipping_policy].parameters.properties.note" and not opt.breaking
    req = only(diff_manifests(V1, edited(_add_param("note", {"type": "string"}, True))), kind="added")
    assert req.breaking and "required parameter 'note' added" in req.summary


def test_param_type_change_is_breaking() -> None:
    base = edited(_add_param("urgency", {"type": "string"}, False))
    new = edited(_add_param("urgency", {"type": "integer"}, False))
    c = only(diff_manifests(base, new), kind="changed")
    assert c.path == "tools[get_shipping_policy].parameters.properties.urgency.type" and c.breaking
    assert (c.before, c.after) == ("string", "integer")


def test_param_became_required_enum_and_description() -> None:
    base = edited(_add_param("speed", {"type": "string", "enum": ["standard", "express", "same_day"]}, False))
    req = edited(_add_param("speed", {"type": "string", "enum": ["standard", "express", "same_day"]}, True))
    c = only(diff_manifests(base, req), kind="changed")
    assert c.path.endswith("speed.required") and c.breaking and c.after is True
    assert not only(diff_manifests(req, base), kind="changed").breaking  # became optional

    fewer = edited(_add_param("speed", {"type": "string", "enum": ["standard", "express"]}, False))
    gone = only(diff_manifests(base, fewer), kind="changed")
    assert gone.path.endswith("speed.enum") and gone.breaking and "removed" in gone.summary
    assert not only(diff_manifests(fewer, base), kind="changed").breaking  # a value added

    described = edited(
        _add_param(
            "speed",
            {"type": "string", "enum": ["standard", "express", "same_day"], "description": "Delivery speed."},
            False,
        )
    )
    desc = only(diff_manifests(base, described), kind="changed")
    assert desc.path.endswith("speed.description") and not desc.breaking


def test_nested_params_are_compared_by_dotted_path() -> None:
    def nest(inner_type: str) -> Callable[[dict[str, Any]], None]:
        def fn(d: dict[str, Any]) -> None:
            t = tool(d, "lookup_product")
            t["parameters"] = {
                "type": "object",
                "properties": {
                    "args": {
                        "type": "object",
                        "properties": {"link_id": {"type": "integer"}, "lang": {"type": inner_type}},
                        "required": ["link_id"],
                    }
                },
                "required": ["args"],
            }
            t["argument_map"] = {"link_id": "args.link_id"}

        return fn

    c = only(diff_manifests(edited(nest("string")), edited(nest("array"))), kind="changed")
    assert c.path == "tools[lookup_product].parameters.properties.args.properties.lang.type" and c.breaking


def test_binding_change_is_breaking() -> None:
    def rebind(d: dict[str, Any]) -> None:
        tool(d, "check_stock")["binding"] = "catalog.product_info"

    c = only(diff_manifests(V1, edited(rebind)), path="tools[check_stock].binding")
    assert c.breaking and (c.before, c.after) == ("catalog.stock", "catalog.product_info")


def test_skill_rename_detected_by_identical_body() -> None:
    def rename(d: dict[str, Any]) -> None:
        d["skills"][2]["id"] = "small_talk"
        d["skills"][2]["description"] = "Greet viewers and keep the room lively."

    d = diff_manifests(V1, edited(rename))
    ren = only(d, kind="renamed")
    assert (ren.component, ren.before, ren.after, ren.breaking) == ("skill", "chit_chat", "small_talk", True)
    desc = only(d, path="skills[small_talk].description")
    assert not desc.breaking and desc.text_diff
    assert not [c for c in d.changes if c.kind in ("added", "removed")]


def test_skill_rename_detected_by_description_and_kind() -> None:
    def rename(d: dict[str, Any]) -> None:
        d["skills"][5]["id"] = "coupons"
        d["skills"][5]["body"] += "\n6. Thank the viewer after issuing.\n"

    d = diff_manifests(V1, edited(rename))
    assert only(d, kind="renamed").after == "coupons"
    assert only(d, path="skills[coupons].body").text_diff


def test_skill_removed_is_breaking_added_is_not_and_kind_change() -> None:
    def drop(d: dict[str, Any]) -> None:
        d["skills"].pop(3)

    removed = only(diff_manifests(V1, edited(drop)), component="skill")
    assert (removed.kind, removed.key, removed.breaking) == ("removed", "efficacy_compliance", True)
    assert not only(diff_manifests(edited(drop), V1), component="skill").breaking

    def kind(d: dict[str, Any]) -> None:
        d["skills"][2]["kind"] = "strategy"

    c = only(diff_manifests(V1, edited(kind)), component="skill")
    assert c.path == "skills[chit_chat].kind" and c.breaking


def test_reordering_skills_is_not_breaking() -> None:
    def reverse(d: dict[str, Any]) -> None:
        d["skills"].reverse()

    d = diff_manifests(V1, edited(reverse))
    c = only(d, component="skill")
    assert c.kind == "reordered" and not d.breaking and c.after[0] == "coupon_strategy"


def test_hooks_added_removed_changed() -> None:
    def change(d: dict[str, Any]) -> None:
        d["hooks"][0]["max_chars"] = 200
        d["hooks"].pop(1)
        d["hooks"].append({"id": "no-links", "kind": "reply_format", "message": "No links.", "speakable": True})

    d = diff_manifests(V1, edited(change))
    c = only(d, component="hook", kind="changed")
    assert (c.path, c.before, c.after) == ("hooks[viewer-input-guard].max_chars", 300, 200)
    assert only(d, component="hook", kind="removed").key == "tool-args"
    assert only(d, component="hook", kind="added").key == "no-links"
    assert not d.breaking


def test_prompt_layout_and_block_changes() -> None:
    def change(d: dict[str, Any]) -> None:
        d["prompt"]["layout"] = "xml"
        d["prompt"]["blocks"][0]["content"] += "\nYou never pretend to be human."
        d["prompt"]["blocks"][3]["title"] = "Compliance rules"
        d["prompt"]["blocks"].append({"id": "faq", "role": "custom", "title": "FAQ", "items": ["Open 24/7."]})

    d = diff_manifests(V1, edited(change))
    layout = only(d, component="prompt")
    assert (layout.before, layout.after) == ("markdown", "xml")
    content = only(d, path="prompt.blocks[persona].content")
    assert "+You never pretend to be human." in content.text_diff
    assert only(d, path="prompt.blocks[compliance].title").after == "Compliance rules"
    assert only(d, component="prompt_block", kind="added").key == "faq"
    assert d.summary() == {"prompt_block": 3, "prompt": 1}
    assert not d.breaking


def test_constraint_changes_have_before_and_after() -> None:
    def change(d: dict[str, Any]) -> None:
        d["constraints"].update(language="zh-CN", max_tool_rounds=1)

    d = diff_manifests(V1, edited(change))
    assert [(c.key, c.before, c.after) for c in d.changes] == [("language", "en", "zh-CN"), ("max_tool_rounds", 3, 1)]
    assert all(c.component == "constraint" and not c.breaking for c in d.changes)


def test_diff_serialises_to_json() -> None:
    d = diff_manifests(V1, V3)
    again = ManifestDiff.model_validate_json(d.model_dump_json())
    assert again == d and again.breaking
    json.loads(d.model_dump_json())
