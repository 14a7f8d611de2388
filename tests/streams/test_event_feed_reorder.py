"""The consumer's reorder window (streams.event_feed.REORDER_WAIT_S), driven directly: a run that arrives after a
gap is held until the run before it comes from the layer, and only a gap still open after the wait is read from the
store. The end-to-end order over a real channel layer is tested in test_live_consumers.py."""

from __future__ import annotations

import asyncio
import json

from streams import event_feed
from streams.event_feed import StoredEventsConsumer
from streams.events import EVENT_MESSAGE_TYPE, events_frame


class Recording(StoredEventsConsumer):
    def __init__(self, stored):
        super().__init__()
        self.stored, self.frames, self.reads = stored, [], 0
        self.last_seq = 1
        self._held, self._gap_timer, self._send_lock = {}, None, asyncio.Lock()

    async def send(self, text_data=None, bytes_data=None, close=False):
        self.frames.append([(e["seq"], e["payload"]["from"]) for e in json.loads(text_data)["events"]])

    def list_events(self, *, after, up_to, limit):
        self.reads += 1
        return [e for e in self.stored if after < e["seq"] <= (up_to or 10**9)][:limit]


def event(seq, source):
    return {"seq": seq, "turn_id": None, "type": "muted", "payload": {"from": source}, "at": None}


def message(*events):
    return {"type": EVENT_MESSAGE_TYPE, "first": events[0]["seq"], "last": events[-1]["seq"],
            "text": events_frame(list(events))}


STORED = [event(2, "store"), event(3, "store"), event(4, "store")]


def test_a_run_after_a_gap_waits_for_the_one_before_it_and_both_go_out_from_memory():
    async def go():
        c = Recording(STORED)
        await c.preview_event(message(event(3, "layer")))
        await c.preview_event(message(event(4, "layer")))
        assert c.frames == []  # held: 2 has not come yet
        await asyncio.sleep(event_feed.REORDER_WAIT_S / 5)
        await c.preview_event(message(event(2, "layer")))
        await asyncio.sleep(event_feed.REORDER_WAIT_S * 2)  # the timer was stopped: no read after all
        return c

    c = asyncio.run(go())
    assert c.frames == [[(2, "layer")], [(3, "layer")], [(4, "layer")]]
    assert c.reads == 0 and c.last_seq == 4 and c._held == {} and c._gap_timer is None


def test_a_gap_still_open_after_the_wait_is_read_from_the_store_once():
    async def go():
        c = Recording(STORED)
        await c.preview_event(message(event(3, "layer")))
        await c.preview_event(message(event(4, "layer")))
        await asyncio.sleep(event_feed.REORDER_WAIT_S * 3)
        await c.preview_event(message(event(2, "layer")))  # too late: already sent from the store
        return c

    c = asyncio.run(go())
    assert c.frames == [[(2, "store"), (3, "store"), (4, "store")]]
    assert c.reads == 1 and c.last_seq == 4 and c._held == {}


def test_an_overlap_with_what_was_sent_is_read_from_the_store():
    async def go():
        c = Recording(STORED)
        c.last_seq = 2
        await c.preview_event(message(event(2, "layer"), event(3, "layer")))
        return c

    c = asyncio.run(go())
    assert c.frames == [[(3, "store")]] and c.last_seq == 3
