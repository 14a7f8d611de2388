"""The live-room simulator: a scenario (:mod:`streams.scenarios`) played on a simulated clock.

:class:`ScenarioRun` owns a deep copy of the scenario's room in exactly the shape :mod:`streams.bindings`
works on, applies the timeline to it as simulated time passes, hands out the viewer comments that became
due and says which tool faults are active. It never runs a model: the turn engine consumes the comments,
the room and the faults (``ScenarioRun.room`` is the live dict; bindings called on it may mutate it,
e.g. ``coupons.issue`` decrements a coupon's ``remaining``, which is what a live room does).

Deterministic: for one seed, the comments (times, viewers, texts), the applied events and the fault draws
are the same whatever the step sizes used to get there. Events and comments are processed in time order
(events first at equal times), so a template is filled from the room as it is at the comment's minute.
Every generated comment draws from its own ``random.Random`` seeded with a string (stable across
processes, unlike ``hash()``).

:class:`SimulatedClock` maps real time to scenario minutes (``speed`` = simulated minutes per real
second) with pause / resume / step; it reads an injectable time source and never sleeps.

Plain Python, no Django.
"""

from __future__ import annotations

import copy
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NamedTuple

from streams.bindings import DEFAULT_LOW_STOCK_THRESHOLD, active_flash_sale
from streams.engine.faults import ToolFault
from streams.scenarios import (
    CouponAdd,
    CouponExpire,
    FlashSaleEnd,
    FlashSaleStart,
    Persona,
    PhaseChange,
    PriceChange,
    Restock,
    Scenario,
    StockChange,
    template_slots,
)

__all__ = ["AppliedEvent", "ScenarioRun", "SimComment", "SimulatedClock", "Tick"]


# --- the clock ----------------------------------------------------------------------------------------


class SimulatedClock:
    """Scenario minutes from real time: ``minute = start + speed * running seconds + steps``.

    ``speed`` is simulated minutes per real second (``speed=1`` plays a 60-minute scenario in one real
    minute). ``time_source`` returns seconds (default :func:`time.monotonic`); tests pass a fake one.
    ``end_minute`` (optional) caps the reading.
    """

    def __init__(self, speed: float = 1.0, *, start_minute: float = 0.0, paused: bool = False,
                 end_minute: float | None = None, time_source: Callable[[], float] = time.monotonic):
        self._check_speed(speed)
        self._now = time_source
        self._speed = float(speed)
        self._base_minute = float(start_minute)  # the reading at _base_time
        self._base_time = self._now()
        self._paused = paused
        self.end_minute = end_minute

    @staticmethod
    def _check_speed(speed: float) -> None:
        if not (isinstance(speed, (int, float)) and math.isfinite(speed) and speed > 0):
            raise ValueError(f"speed must be a positive number of simulated minutes per second, got {speed!r}")

    def _raw(self) -> float:
        if self._paused:
            return self._base_minute
        return self._base_minute + (self._now() - self._base_time) * self._speed

    def _rebase(self) -> None:
        self._base_minute = self.minute
        self._base_time = self._now()

    @property
    def minute(self) -> float:
        m = self._raw()
        return m if self.end_minute is None else min(m, self.end_minute)

    @property
    def speed(self) -> float:
        return self._speed

    @speed.setter
    def speed(self, speed: float) -> None:
        self._check_speed(speed)
        self._rebase()
        self._speed = float(speed)

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def finished(self) -> bool:
        return self.end_minute is not None and self._raw() >= self.end_minute

    def pause(self) -> float:
        if not self._paused:
            self._rebase()
            self._paused = True
        return self._base_minute

    def resume(self) -> float:
        if self._paused:
            self._base_time = self._now()
            self._paused = False
        return self.minute

    def step(self, minutes: float = 1.0) -> float:
        """Jump forward (paused or running) and return the new reading."""
        if not (math.isfinite(minutes) and minutes >= 0):
            raise ValueError(f"step must be a non-negative number of minutes, got {minutes!r}")
        self._rebase()
        self._base_minute += minutes
        if self.end_minute is not None:
            self._base_minute = min(self._base_minute, self.end_minute)
        return self._base_minute


# --- run records --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SimComment:
    """A viewer comment that became due. ``link_ids`` are the products it is about when known (the
    scripted ``link_id`` or the products a template filled in): ground truth for gold data and judges."""

    minute: float
    viewer_id: str
    viewer_name: str
    persona_id: str
    persona_kind: str
    text: str
    link_ids: tuple[int, ...] = ()
    source: Literal["scripted", "template"] = "scripted"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["link_ids"] = list(self.link_ids)
        return d


@dataclass(frozen=True, slots=True)
class AppliedEvent:
    """A timeline event as it was applied: ``summary`` is one human line for the preview room."""

    minute: int
    kind: str
    params: dict[str, Any]
    summary: str
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Tick(NamedTuple):
    minute: float
    room: dict[str, Any]  # a snapshot (deep copy) taken after this tick's events
    comments: list[SimComment]


@dataclass(order=True, slots=True)
class _Item:
    at: float
    order: int  # 0 = event (before comments at the same minute), 1 = comment
    persona: int
    seq: int
    payload: Any = field(compare=False)


# --- the run ------------------------------------------------------------------------------------------


def _fmt_money(value: Any, currency: str) -> str:
    return f"{currency}{float(value):.2f}"


def _short(title: str) -> str:
    """How a viewer names a product: 'HydraGlow Hyaluronic Serum 30 ml' -> 'hyaluronic serum',
    'Daily Shield Mineral Sunscreen SPF 50 PA++++ 50 ml' -> 'mineral sunscreen' (the last two words before
    a size, a number or an all-caps code)."""
    words: list[str] = []
    for w in title.split():
        if any(ch.isdigit() for ch in w) or (len(w) > 1 and w.isupper()):
            break
        words.append(w)
    return " ".join((words or title.split())[-2:]).lower()


class ScenarioRun:
    """One deterministic play of a scenario. ``seed`` defaults to the scenario's own seed."""

    def __init__(self, scenario: Scenario, seed: int | None = None):
        self.scenario = scenario
        self.seed = scenario.seed if seed is None else int(seed)
        self._room = scenario.initial_room()
        self._start = float(self._room.get("clock_minute") or 0)
        self._minute = self._start
        self._started = False
        self.event_log: list[AppliedEvent] = []
        self.comment_log: list[SimComment] = []
        self._pending: list[_Item] = sorted(self._schedule(), reverse=True)  # pop() takes the earliest

    # -- schedule (depends only on the scenario and the seed) --

    def _schedule(self) -> Iterator[_Item]:
        s = self.scenario
        for i, ev in enumerate(s.timeline):
            yield _Item(float(ev.at_minute), 0, -1, i, ev)
        for pi, persona in enumerate(s.personas):
            for j, c in enumerate(persona.comments):
                yield _Item(float(c.at_minute), 1, pi, j, ("scripted", persona, c))
            if not persona.templates or persona.rate_per_minute <= 0:
                continue
            end = s.duration_minutes if persona.to_minute is None else persona.to_minute
            whole, frac = divmod(persona.rate_per_minute, 1.0)
            seq = len(persona.comments)
            for minute in range(persona.from_minute, end):
                rng = random.Random(f"{self.seed}:{persona.id}:{minute}")
                count = int(whole) + (1 if rng.random() < frac else 0)
                offsets = sorted(round(rng.random(), 2) for _ in range(count))
                for k, off in enumerate(offsets):
                    yield _Item(min(minute + off, float(s.duration_minutes)), 1, pi, seq,
                                ("template", persona, (minute, k)))
                    seq += 1

    @classmethod
    def resumed(cls, scenario: Scenario, seed: int | None, minute: float, room: dict[str, Any]) -> ScenarioRun:
        """The run as it stood at ``minute`` with ``room`` as its state (a stored room, which turns may have
        changed): the schedule is replayed deterministically up to ``minute``, then the room is swapped in,
        so going on from here gives the same comments as an uninterrupted run."""
        run = cls(scenario, seed)
        run.advance_to(minute)
        run._room.clear()
        run._room.update(copy.deepcopy(room))
        return run

    # -- reading --

    @property
    def next_at(self) -> float | None:
        """The minute of the next timeline event or comment still to come (None: nothing left)."""
        while self._pending and self._pending[-1].order == 1 and self._pending[-1].at < self._start:
            self._pending.pop()  # comments before the room's starting minute are never said
        return self._pending[-1].at if self._pending else None

    @property
    def room(self) -> dict[str, Any]:
        """The current room dict (live: bindings may mutate it). Take ``snapshot()`` to keep a copy."""
        return self._room

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self._room)

    @property
    def minute(self) -> float:
        return self._minute

    @property
    def duration(self) -> int:
        return self.scenario.duration_minutes

    @property
    def finished(self) -> bool:
        return self._started and self._minute >= self.duration and not self._pending

    # -- advancing --

    def advance_to(self, minute: float) -> list[SimComment]:
        """Apply every timeline event due up to ``minute`` (inclusive) and return the comments that became
        due, in time order. ``minute`` is capped at the scenario's end; going back is an error."""
        if not math.isfinite(minute):
            raise ValueError(f"minute must be finite, got {minute!r}")
        target = min(float(minute), float(self.duration))
        if target < self._minute:
            raise ValueError(f"cannot go back from minute {self._minute:g} to {target:g}")
        self._started = True
        due: list[SimComment] = []
        while self._pending and self._pending[-1].at <= target:
            item = self._pending.pop()
            self._set_clock(item.at)
            if item.order == 0:
                self.event_log.append(self._apply(item.payload))
            elif item.at < self._start:
                continue  # said before the room's starting minute: nobody is watching yet
            else:
                comment = self._comment(item)
                due.append(comment)
                self.comment_log.append(comment)
        self._minute = target
        self._set_clock(target)
        return due

    def step(self, minutes: float = 1.0) -> list[SimComment]:
        return self.advance_to(self._minute + minutes)

    def iter_ticks(self, step_minutes: float = 1.0) -> Iterator[Tick]:
        """From the current minute to the end: a tick now, then every ``step_minutes`` (the last one exactly
        at the end). Each yields (minute, room snapshot, comments due)."""
        if not (math.isfinite(step_minutes) and step_minutes > 0):
            raise ValueError(f"step_minutes must be positive, got {step_minutes!r}")
        base = minute = self._minute
        n = 0
        while True:
            comments = self.advance_to(minute)
            yield Tick(self._minute, self.snapshot(), comments)
            if self._minute >= self.duration:
                return
            n += 1
            minute = max(min(base + n * step_minutes, float(self.duration)), self._minute)

    def _set_clock(self, at: float) -> None:
        self._room["clock_minute"] = max(int(self._start), int(math.floor(at)))

    # -- faults --

    def active_faults(self, minute: float | None = None) -> dict[str, ToolFault]:
        """Faults in force at ``minute`` (default: now), keyed by binding id; a fault with a probability
        below 1 is drawn per (seed, fault, minute), so the same minute always gives the same answer."""
        at = self._minute if minute is None else float(minute)
        out: dict[str, ToolFault] = {}
        for i, f in enumerate(self.scenario.faults):
            end = math.inf if f.to_minute is None else f.to_minute
            key = f.binding or f.tool  # a binding id/label, or a manifest tool name (find_fault tries both)
            if not (f.from_minute <= at < end) or key in out:
                continue
            if f.probability < 1.0:
                draw = random.Random(f"{self.seed}:fault:{i}:{at:.3f}").random()
                if draw >= f.probability:
                    continue
            out[key] = ToolFault(binding=key, kind=f.kind, delay_ms=f.delay_ms)
        return out

    # -- events --

    def _product(self, link_id: int) -> dict[str, Any]:
        return next(p for p in self._room["products"] if p["link_id"] == link_id)

    def _low(self, product: dict[str, Any]) -> bool:
        threshold = self._room.get("low_stock_threshold")
        return product["stock"] <= (DEFAULT_LOW_STOCK_THRESHOLD if threshold is None else threshold)

    def _apply(self, ev: Any) -> AppliedEvent:
        room, p, at = self._room, ev.params, ev.at_minute
        currency = room.get("currency") or ""
        campaign = room.setdefault("campaign", {"phase": "warm_up", "flash_sale": None})
        if isinstance(ev, FlashSaleStart):
            ends = self.duration if p.ends_at_minute is None else p.ends_at_minute
            campaign["flash_sale"] = {"link_id": p.link_id, "price": p.price, "ends_at_minute": ends}
            campaign["phase"] = p.phase
            product = self._product(p.link_id)
            summary = (f"flash sale: {product['title']} (link {p.link_id}) at {_fmt_money(p.price, currency)} "
                       f"until minute {ends}")
        elif isinstance(ev, FlashSaleEnd):
            sale = campaign.get("flash_sale")
            campaign["flash_sale"] = None
            campaign["phase"] = p.phase
            summary = f"flash sale on link {sale['link_id']} ended" if sale else "flash sale ended"
        elif isinstance(ev, PriceChange):
            product = self._product(p.link_id)
            product["price"] = p.price
            if p.list_price is not None:
                product["list_price"] = p.list_price
            summary = f"price of link {p.link_id} is now {_fmt_money(p.price, currency)}"
        elif isinstance(ev, (StockChange, Restock)):
            product = self._product(p.link_id)
            if isinstance(ev, Restock):
                product["stock"] = product["stock"] + p.quantity
            elif p.stock is not None:
                product["stock"] = p.stock
            else:
                product["stock"] = max(0, product["stock"] + p.delta)
            units = product["stock"]
            state = "sold out" if units == 0 else ("running low" if self._low(product) else "in stock")
            summary = f"stock of link {p.link_id}: {units} ({state})"
        elif isinstance(ev, CouponExpire):
            coupon = next(c for c in room.get("coupons") or [] if c["code"].lower() == p.code.lower())
            coupon["expires_at_minute"] = min(int(coupon["expires_at_minute"]), at)
            summary = f"coupon {coupon['code']} expired"
        elif isinstance(ev, CouponAdd):
            room.setdefault("coupons", []).append(p.model_dump(mode="python"))
            summary = (f"new coupon {p.code}: {_fmt_money(p.discount, currency)} off over "
                       f"{_fmt_money(p.min_spend, currency)}, until minute {p.expires_at_minute}")
        elif isinstance(ev, PhaseChange):
            campaign["phase"] = p.phase
            summary = f"phase: {p.phase}"
        else:  # pragma: no cover - the schema's union is closed
            raise TypeError(f"unknown event {ev!r}")
        return AppliedEvent(minute=at, kind=ev.kind, params=p.model_dump(mode="json"), summary=summary,
                            note=ev.note)

    # -- comments --

    def _fill(self, text: str, rng: random.Random, persona: Persona, name: str,
              link_id: int | None) -> tuple[str, tuple[int, ...]]:
        slots = set(template_slots(text))
        if not slots:
            return text.replace("{{", "{").replace("}}", "}"), ((link_id,) if link_id else ())
        room = self._room
        currency = room.get("currency") or ""
        products = room.get("products") or []
        values: dict[str, str] = {"name": name}
        used: list[int] = []
        product = None
        if link_id is not None:
            product = self._product(link_id)
        elif slots & {"product", "product_short", "link_id", "price", "list_price", "product2",
                      "product2_short", "link_id2"}:
            focus = [p for p in products if p["link_id"] in persona.focus_link_ids] or products
            product = rng.choice(focus)
        if product is not None:
            sale = active_flash_sale(room)
            price = sale["price"] if sale and sale.get("link_id") == product["link_id"] else product["price"]
            values.update(product=product["title"], product_short=_short(product["title"]),
                          link_id=str(product["link_id"]), price=_fmt_money(price, currency),
                          list_price=_fmt_money(product["list_price"], currency))
            used.append(product["link_id"])
        if slots & {"product2", "product2_short", "link_id2"}:
            others = [p for p in products if product is None or p["link_id"] != product["link_id"]]
            second = rng.choice(others)
            values.update(product2=second["title"], product2_short=_short(second["title"]),
                          link_id2=str(second["link_id"]))
            used.append(second["link_id"])
        if "coupon" in slots:
            values["coupon"] = rng.choice([c["code"] for c in room.get("coupons") or []])
        if "region" in slots:
            values["region"] = rng.choice(sorted(((room.get("shipping") or {}).get("regions") or {})))
        if link_id is not None and link_id not in used:
            used.insert(0, link_id)
        return text.format(**values), tuple(used)

    def _comment(self, item: _Item) -> SimComment:
        source, persona, ref = item.payload
        if source == "scripted":
            rng = random.Random(f"{self.seed}:{persona.id}:scripted:{item.seq}")
            name = ref.name or persona.names[0]
            text, link_ids = self._fill(ref.text, rng, persona, name, ref.link_id)
        else:
            minute, k = ref
            rng = random.Random(f"{self.seed}:{persona.id}:{minute}:{k}")
            name = rng.choice(persona.names)
            template = rng.choice(persona.templates)
            text, link_ids = self._fill(template, rng, persona, name, None)
        return SimComment(
            minute=round(item.at, 2),
            viewer_id=f"{persona.id}-{persona.names.index(name) + 1}",
            viewer_name=name,
            persona_id=persona.id,
            persona_kind=persona.kind,
            text=text,
            link_ids=link_ids,
            source=source,
        )
