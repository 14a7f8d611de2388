"""The plain comment-handling rules of live sessions (streams.live.handling, streams.live.schemas): priority,
dedupe keys, the per-viewer rate limit, the next batch (order, expiry, the batching window) and the settings and
payload schemas. No database."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from streams.live import handling as h
from streams.live.schemas import (
    CommentHandling,
    IngestInvalid,
    feed_config_errors,
    handling_errors,
    handling_from,
    parse_ingest,
)

ROOM_YAML = Path(__file__).resolve().parents[2] / "harness_editor" / "demo" / "room.yaml"


@pytest.fixture(scope="module")
def room():
    """The demo room: products 101-104 and 201-203, the serum (101) on flash sale, nothing pinned."""
    return yaml.safe_load(ROOM_YAML.read_text(encoding="utf-8"))


def _pinned(room, link_id: int | None, flash: bool = False):
    out = copy.deepcopy(room)
    out["pinned"] = {"link_id": link_id, "title": "x", "duration_s": 60, "pinned_at_minute": 0} if link_id else None
    if not flash:
        out["campaign"] = {"phase": "regular", "flash_sale": None}
    return out


# --- priority ------------------------------------------------------------------------------------------------------


def test_product_on_screen_first_then_other_products_then_shopping_questions_then_chat(room):
    pinned = _pinned(room, 202)  # the hair dryer's card is on screen
    expected = [
        ("is the hair dryer still in stock?", h.ON_SCREEN),
        ("how much?", h.ON_SCREEN),  # names no product: about what is on screen
        ("price of link 202 pls", h.ON_SCREEN),
        ("is the dryer loud?", h.ON_SCREEN),  # a question naming the on-screen product, no topic rule
        ("how much is the serum?", h.PRODUCT),
        ("does the moisturizer cure eczema?", h.PRODUCT),
        ("any coupon for tonight?", h.SHOPPING),
        ("when will my order ship?", h.SHOPPING),
        ("what's the music playing?", h.QUESTION),
        ("hi everyone, just joined!", h.CHAT),
        ("love the lighting tonight", h.CHAT),
    ]
    got = [(text, h.comment_priority(text, pinned).score) for text, _ in expected]
    assert got == expected
    assert h.ON_SCREEN > h.PRODUCT > h.SHOPPING > h.QUESTION > h.CHAT


def test_the_flash_sale_product_counts_as_on_screen_and_nothing_on_screen_makes_no_product_first(room):
    assert h.on_screen(room) == {101}
    assert h.comment_priority("how many serums are left??", room).score == h.ON_SCREEN
    p = h.comment_priority("how much is the serum?", room)
    assert (p.score, p.link_ids, p.topics) == (h.ON_SCREEN, (101,), ("price",))
    assert "link 101" in p.reason
    bare = _pinned(room, None)
    assert h.on_screen(bare) == set()
    assert h.comment_priority("how much?", bare).score == h.PRODUCT
    assert h.comment_priority("how much is the serum?", bare).score == h.PRODUCT
    assert h.on_screen(None) == set() and h.comment_priority("hello!", None).score == h.CHAT


# --- dedupe ---------------------------------------------------------------------------------------------------------


def test_dedupe_keys_with_a_timestamp_are_exact():
    a = h.dedupe_keys(viewer_id="v1", text="How much?", ts=1700000000.0, now=5.0)
    assert a == h.dedupe_keys(viewer_id="v1", text="  how   MUCH? ", ts=1700000000.0, now=9999.0)
    assert len(a) == 1 and a[0].startswith("ts:")
    assert a != h.dedupe_keys(viewer_id="v1", text="How much?", ts=1700000001.0, now=5.0)
    assert a != h.dedupe_keys(viewer_id="v2", text="How much?", ts=1700000000.0, now=5.0)


def test_dedupe_keys_without_a_timestamp_cover_this_minute_and_the_one_before():
    first = h.dedupe_keys(viewer_id="v1", text="hi", ts=None, now=119.0)  # slot 1
    later = h.dedupe_keys(viewer_id="v1", text="hi", ts=None, now=121.0)  # slot 2: a redelivery 2 s later
    assert first[0] in later  # still a duplicate across the slot's edge
    much_later = h.dedupe_keys(viewer_id="v1", text="hi", ts=None, now=300.0)
    assert first[0] not in much_later  # saying "hi" again minutes later is a new comment
    assert h.dedupe_keys(viewer_id="v2", text="hi", ts=None, now=119.0)[0] != first[0]


# --- rate limit -----------------------------------------------------------------------------------------------------


def test_rate_limit_is_a_sliding_minute():
    now = 1000.0
    assert h.rate_limit([], now, 3).allowed
    assert h.rate_limit([now - 50, now - 10], now, 3).allowed
    refused = h.rate_limit([now - 50, now - 30, now - 10], now, 3)
    assert not refused.allowed and refused.retry_after_s == pytest.approx(10.0)
    assert h.rate_limit([now - 61, now - 30, now - 10], now, 3).allowed  # one fell out of the window


# --- the next batch -------------------------------------------------------------------------------------------------


def _q(i, prio, at):
    return h.Queued(id=i, priority=prio, at=at)


def test_next_batch_waits_for_the_window_after_the_first_comment_never_longer():
    handling = CommentHandling(batch_window_s=1.5, max_comments_per_turn=3)
    queue = [_q(1, 0, 100.0)]
    b = h.next_batch(queue, 100.5, handling)
    assert (b.take, b.wait_s) == ([], 1.0)
    queue.append(_q(2, 30, 101.0))  # a later comment does not move the window
    b = h.next_batch(queue, 101.2, handling)
    assert b.take == [] and b.wait_s == pytest.approx(0.3)
    b = h.next_batch(queue, 101.5, handling)
    assert [q.id for q in b.take] == [2, 1]  # priority first


def test_next_batch_goes_at_once_when_full_and_orders_by_priority_then_arrival():
    handling = CommentHandling(batch_window_s=10, max_comments_per_turn=3)
    queue = [_q(1, 0, 100.0), _q(2, 20, 100.1), _q(3, 30, 100.2), _q(4, 20, 100.05), _q(5, 0, 99.9)]
    b = h.next_batch(queue, 100.3, handling)
    assert [q.id for q in b.take] == [3, 4, 2]
    assert b.wait_s == 0.0 and b.expired == []
    assert [q.id for q in h.queue_order(queue)] == [3, 4, 2, 5, 1]


def test_next_batch_expires_comments_past_max_age():
    handling = CommentHandling(batch_window_s=0, max_comments_per_turn=2, max_age_s=60)
    queue = [_q(1, 30, 0.0), _q(2, 0, 50.0), _q(3, 20, 70.0)]
    b = h.next_batch(queue, 70.0, handling)
    assert [q.id for q in b.expired] == [1]
    assert [q.id for q in b.take] == [3, 2]
    only_old = h.next_batch([_q(1, 30, 0.0)], 70.0, handling)
    assert only_old.take == [] and [q.id for q in only_old.expired] == [1] and only_old.wait_s is None
    assert h.next_batch([], 70.0, handling).wait_s is None


# --- schemas --------------------------------------------------------------------------------------------------------


def test_comment_handling_defaults_and_bounds():
    d = CommentHandling()
    assert (d.batch_window_s, d.max_comments_per_turn, d.per_viewer_per_minute, d.max_age_s, d.max_chars) == (
        1.5, 3, 6, 60.0, 500)
    assert all(f.description for f in CommentHandling.model_fields.values())
    errors = {e.path: e.message for e in handling_errors({"batch_window_s": 31, "max_comments_per_turn": 0,
                                                          "per_viewer_per_minute": 1000, "max_age_s": 1,
                                                          "max_chars": 5000, "colour": "red"})}
    assert set(errors) == {"handling.batch_window_s", "handling.max_comments_per_turn",
                           "handling.per_viewer_per_minute", "handling.max_age_s", "handling.max_chars",
                           "handling.colour"}
    assert handling_errors({"max_age_s": 120}) == [] and handling_errors(None) == []
    # stored settings with a key this build no longer knows still load
    assert handling_from({"max_age_s": 120, "retired": 1}).max_age_s == 120


def test_parse_ingest_takes_one_comment_or_a_batch_and_locates_every_problem():
    one = parse_ingest({"id": 42, "viewer_id": 7, "text": "  hi  ", "ts": 1700000000})
    assert len(one) == 1 and one[0].external_id == "42" and one[0].viewer_id == "7" and one[0].text == "hi"
    assert one[0].display_name() == "7" and one[0].ts.timestamp() == 1700000000
    batch = parse_ingest({"comments": [{"external_id": "a", "viewer_id": "v", "viewer": "Vee", "text": "x"},
                                       {"viewer_id": "w", "text": "y", "ts": "2026-11-30T20:00:00Z"}]})
    assert [c.external_id for c in batch] == ["a", None] and batch[0].display_name() == "Vee"
    with pytest.raises(IngestInvalid) as exc:
        parse_ingest({"comments": [{"viewer_id": "v", "text": "ok"}, {"viewer_id": "", "text": "   ", "x": 1},
                                   {"viewer_id": "v", "text": "t" * 4001, "ts": "yesterday"}]})
    paths = {e.path for e in exc.value.errors}
    assert paths == {"comments[1].viewer_id", "comments[1].text", "comments[1].x", "comments[2].text",
                     "comments[2].ts"}
    for bad, path in [([1, 2], ""), ("text", ""), ({"comments": []}, "comments"),
                      ({"comments": [{"viewer_id": "v", "text": "x"}] * 101}, "comments"), ({"text": "x"}, "viewer_id"),
                      ({"viewer_id": True, "text": "x"}, "viewer_id")]:
        with pytest.raises(IngestInvalid) as exc:
            parse_ingest(bad)
        assert path in {e.path for e in exc.value.errors}, (bad, exc.value.errors)


def test_feed_config_per_feed():
    assert feed_config_errors("replay", {"scenario": "evening-flash-sale", "speed": 60}) == (
        {"scenario": "evening-flash-sale", "speed": 60.0}, [])
    _, errors = feed_config_errors("replay", {"speed": 0})
    assert {e.path for e in errors} == {"feed_config.speed"}  # (the source is checked once fields are valid)
    _, errors = feed_config_errors("replay", {"scenario": "a", "session": "00000000-0000-0000-0000-000000000001"})
    assert [e.path for e in errors] == ["feed_config"]
    _, errors = feed_config_errors("replay", {"scenario": "a", "speed": 1001})
    assert [e.path for e in errors] == ["feed_config.speed"]
    assert feed_config_errors("webhook", {}) == ({}, [])
    assert [e.path for e in feed_config_errors("api", {"url": "x"})[1]] == ["feed_config.url"]
