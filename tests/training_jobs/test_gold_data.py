"""Gold data: deterministic by seed, train and held-out disjoint (phrasings, viewers, link ids), lean prompt."""

from __future__ import annotations

import json
import re

from training_jobs.tiny_model.gold import (
    CORES,
    VIEWERS,
    generate,
    heldout_link_ids,
    load_demo_room,
    product_aliases,
    to_record,
)


def _core_pattern(core: str) -> str:
    """A core phrasing as a regex: its literal words, any text where a placeholder sits."""
    return ".*".join(re.escape(piece.lower()) for piece in re.split(r"\{\w+\}", core))


def _dump(ts):
    return [json.dumps(to_record(t), sort_keys=True) for t in ts]


def test_deterministic_by_seed():
    assert _dump(generate(30, seed=3)) == _dump(generate(30, seed=3))
    assert _dump(generate(30, seed=3)) != _dump(generate(30, seed=4))


def test_no_heldout_leakage():
    for intent, t in CORES.items():
        assert not set(t["train"]) & set(t["heldout"]), intent
    assert not set(VIEWERS["train"]) & set(VIEWERS["heldout"])
    reserved = heldout_link_ids(0)
    train = generate(300, seed=0, split="train")
    held = generate(60, seed=0, split="heldout")
    train_comments = {t.meta["comment"].lower() for t in train}
    for t in held:
        assert t.meta["comment"].lower() not in train_comments
        if t.meta["link_id"] is not None:
            assert t.meta["link_id"] in reserved
    for t in train:
        assert t.meta["link_id"] not in reserved
        # the room in the system prompt never lists a reserved id
        assert not any(f"Link {i}:" in t.messages[0]["content"] for i in reserved)


def test_all_intents_and_link_formats_present():
    ts = generate(400, seed=1)
    assert {t.intent for t in ts} == {"price", "stock", "shipping", "coupon", "chit_chat", "compliance"}
    texts = " ".join(t.meta["comment"].lower() for t in ts)
    assert "#" in texts and "link " in texts and "number " in texts
    mentions = {t.meta["mention"] for t in ts}
    assert mentions == {None, "link", "name"}


def test_named_products_resolve_to_one_link_id():
    assert product_aliases(load_demo_room())[202] == ["dryer", "hair dryer"]
    for t in generate(300, seed=5):
        if t.meta["mention"] != "name":
            continue
        room = t.meta["room"]
        aliases = product_aliases(room)[t.meta["link_id"]]
        named = [a for a in aliases if a in t.meta["comment"].lower()]
        assert named, t.meta["comment"]
        # the name the viewer used appears in exactly one product title of the room
        titles = [p["title"].lower() for p in room["products"]]
        assert all(sum(a in title for title in titles) == 1 for a in named)
        # and the gold tool call carries that product's link id
        call = t.messages[4]["tool_calls"][0]["function"]
        assert f'"link_id": {t.meta["link_id"]}' in call["arguments"]


def test_tool_call_arguments_are_json_strings():
    for t in generate(20, seed=2):
        for m in t.messages:
            for c in m.get("tool_calls") or []:
                assert isinstance(c["function"]["arguments"], str)


def test_heldout_ids_split_keeps_training_phrasings_with_reserved_ids():
    reserved = heldout_link_ids(0)
    train_cores = {core for t in CORES.values() for core in t["train"]}
    for t in generate(40, seed=0, split="heldout_ids"):
        assert t.meta["link_id"] is None or t.meta["link_id"] in reserved
        comment = t.meta["comment"].lower()
        assert any(re.search(_core_pattern(core), comment) for core in train_cores), comment
