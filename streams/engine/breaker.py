"""Endpoint faults without losing the show: a circuit breaker per endpoint, recovery probes, and failover to the
next endpoint of a deployment (issue 12 §5). Plain Python, no Django.

- :class:`CircuitBreaker` — ``closed`` → ``open`` after ``failure_threshold`` consecutive failures (connection
  refused, timeouts, 5xx, a stream cut mid-way), or at once after a fault that cost a reply; ``open`` →
  ``half_open`` when its cool-down has passed and a recovery probe starts; the probe closes it or opens it again
  (the cool-down doubles on each failed probe, up to ``max_cooldown_s``). Thread-safe; the clock is injectable.
- :class:`BreakerBoard` — one breaker per endpoint base URL, shared by every session of the process
  (:func:`default_board`). Probes run on a daemon thread of the board (``background=True``), so a recovered
  endpoint is used again without anyone acting and no turn waits for a probe; a probe is ``GET <root>/health``
  (vLLM), else ``GET <base>/models`` (any OpenAI-compatible server).
- :class:`FailoverBackend` — a ``ChatBackend`` for :func:`streams.engine.turn.run_turn`: each model call goes to the
  first endpoint whose breaker is closed; a call that fails before anything was streamed goes on to the next
  endpoint within the turn's remaining budget; after something was streamed the error goes to the turn (its own
  retry or fallback line: a half-spoken reply is never sent again). When every breaker is open the call fails at
  once, so the turn speaks its fallback line well within its deadline.

Events (through ``on_event(type, payload)``, always in the thread that calls ``stream_chat`` or ``poll_events``):
``fault`` {kind: endpoint_down | endpoint_slow | endpoint_error | endpoints_unavailable, endpoint, message,
mid_stream}; ``failover`` {from, to, reason: failed | open | recovered}, told when the endpoint it moved to starts
answering; ``breaker`` {endpoint, state: open | half_open | closed, failures, retry_in_s}.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from streams.engine.client import ChatDelta, ModelEndpoint, ModelError, OpenAIChatClient, _ssl_context

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
SAMPLING_KEYS = ("temperature", "max_tokens", "top_p", "seed", "stop")  # what OpenAIChatClient.stream_chat takes
DEFAULT_MAX_COOLDOWN_S = 30.0  # the longest a recovered endpoint waits for its probe (after a long outage)
MIN_BLAMED_BUDGET_S = 1.0  # a request cut by the turn's deadline blames its endpoint only if it had this long

Clock = Callable[[], float]
ProbeFn = Callable[[ModelEndpoint, float], "tuple[bool, str]"]


def breaker_key(base_url: str) -> str:
    return base_url.rstrip("/")


# --- the breaker ---------------------------------------------------------------------------------------------


class CircuitBreaker:
    """The state of one endpoint. ``on_change(breaker, old, new)`` is called after each transition, outside the
    lock, in the thread that caused it."""

    def __init__(self, key: str, *, failure_threshold: int = 3, cooldown_s: float = 5.0,
                 max_cooldown_s: float | None = None, clock: Clock = time.monotonic,
                 on_change: Callable[[CircuitBreaker, str, str], None] | None = None):
        if max_cooldown_s is None:
            max_cooldown_s = max(DEFAULT_MAX_COOLDOWN_S, cooldown_s)
        if failure_threshold < 1 or cooldown_s <= 0 or max_cooldown_s < cooldown_s:
            raise ValueError("failure_threshold >= 1 and 0 < cooldown_s <= max_cooldown_s")
        self.key = key
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self.clock = clock
        self.on_change = on_change
        self._lock = threading.Lock()
        self._state = CLOSED
        self.failures = 0  # consecutive, while closed
        self.failed_probes = 0  # since it last opened: each doubles the cool-down
        self.retry_at: float | None = None  # when open: the earliest time of the next probe
        self.last_error = ""

    @property
    def state(self) -> str:
        return self._state

    def allow(self) -> bool:
        """May a call go to this endpoint now? Only when closed: while open or probing the probe decides."""
        return self._state == CLOSED

    def due(self) -> bool:
        """Open with the cool-down over: a probe may start."""
        with self._lock:
            return self._state == OPEN and self.retry_at is not None and self.clock() >= self.retry_at

    def retry_in_s(self) -> float | None:
        with self._lock:
            if self._state != OPEN or self.retry_at is None:
                return None
            return max(0.0, self.retry_at - self.clock())

    def record_success(self) -> None:
        """A call completed. Ignored unless closed: a call that started before the breaker opened proves nothing
        about new connections (only the probe closes an open breaker)."""
        with self._lock:
            if self._state == CLOSED:
                self.failures = 0

    def record_failure(self, message: str = "", *, trip: bool = False) -> None:
        """A call failed. ``trip``: the fault cost a reply (a stream cut mid-way, the deadline with no token):
        open at once rather than after ``failure_threshold`` consecutive failures."""
        with self._lock:
            if self._state != CLOSED:
                return
            self.failures += 1
            self.last_error = message[:500]
            if not (trip or self.failures >= self.failure_threshold):
                return
            self.failed_probes = 0
            self._open()
        self._changed(CLOSED, OPEN)

    def begin_probe(self) -> bool:
        """open and due → half_open; True when the caller now owns the probe (exactly one caller does)."""
        with self._lock:
            if self._state != OPEN or self.retry_at is None or self.clock() < self.retry_at:
                return False
            self._state = HALF_OPEN
            self.retry_at = None
        self._changed(OPEN, HALF_OPEN)
        return True

    def end_probe(self, ok: bool, message: str = "") -> None:
        """The probe's verdict: closed (failures forgotten) or open again with a longer cool-down."""
        with self._lock:
            if self._state != HALF_OPEN:
                return
            if ok:
                self._state, self.failures, self.failed_probes, self.retry_at = CLOSED, 0, 0, None
            else:
                self.failed_probes += 1
                self.last_error = message[:500]
                self._open()
            new = self._state
        self._changed(HALF_OPEN, new)

    def snapshot(self) -> dict[str, Any]:
        retry = self.retry_in_s()
        return {"state": self._state, "failures": self.failures,
                "retry_in_s": None if retry is None else round(retry, 3), "last_error": self.last_error}

    def _open(self) -> None:  # under the lock
        self._state = OPEN
        cooldown = min(self.max_cooldown_s, self.cooldown_s * (2 ** min(self.failed_probes, 16)))
        self.retry_at = self.clock() + cooldown

    def _changed(self, old: str, new: str) -> None:
        if self.on_change is not None:
            self.on_change(self, old, new)


# --- probes --------------------------------------------------------------------------------------------------


def probe_endpoint(endpoint: ModelEndpoint, timeout_s: float = 2.0) -> tuple[bool, str]:
    """Is the server behind ``endpoint`` answering? ``GET <root>/health`` (vLLM: 200 once the engine runs), else
    ``GET <base>/models`` for servers without /health. Returns (ok, what was seen)."""
    base = endpoint.base_url.rstrip("/")
    root = base[:-3] if base.endswith("/v1") else base
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    try:
        with httpx.Client(timeout=timeout_s, verify=_ssl_context(), trust_env=False, headers=headers) as http:
            r = http.get(f"{root}/health")
            if r.status_code == 200:
                return True, "GET /health: 200"
            if r.status_code not in (404, 405):
                return False, f"GET /health: {r.status_code}"
            r = http.get(f"{base}/models")
            return r.status_code == 200, f"GET /models: {r.status_code}"
    except httpx.HTTPError as exc:
        return False, f"{type(exc).__name__}: {exc}"[:300]


# --- the board -----------------------------------------------------------------------------------------------


class BreakerBoard:
    """One :class:`CircuitBreaker` per endpoint base URL, shared by every session (and thread) of a process.

    ``background=True``: a daemon thread, started when a breaker opens and gone when none is open, probes each
    open breaker when its cool-down is over. ``background=False`` (tests): :meth:`probe_due` runs the due probes in
    the caller's thread (FailoverBackend calls it before each request, bounded by the request's budget).
    ``probe`` replaces :func:`probe_endpoint` (tests). Listeners (:meth:`subscribe`) get every transition."""

    def __init__(self, *, failure_threshold: int = 3, cooldown_s: float = 5.0, max_cooldown_s: float | None = None,
                 probe_timeout_s: float = 2.0, clock: Clock = time.monotonic, probe: ProbeFn | None = None,
                 background: bool = True):
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self.probe_timeout_s = probe_timeout_s
        self.clock = clock
        self.probe = probe or probe_endpoint
        self.background = background
        self._breakers: dict[str, CircuitBreaker] = {}
        self._endpoints: dict[str, ModelEndpoint] = {}  # the config a probe uses (its API key)
        self._listeners: weakref.WeakSet[Any] = weakref.WeakSet()
        self._plain_listeners: list[Callable[[str, str, str], None]] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._thread_pid = 0
        self._stopped = False

    def breaker(self, endpoint: ModelEndpoint | str) -> CircuitBreaker:
        key = breaker_key(endpoint if isinstance(endpoint, str) else endpoint.base_url)
        with self._cond:
            b = self._breakers.get(key)
            if b is None:
                b = self._breakers[key] = CircuitBreaker(
                    key, failure_threshold=self.failure_threshold, cooldown_s=self.cooldown_s,
                    max_cooldown_s=self.max_cooldown_s, clock=self.clock, on_change=self._on_change)
            if not isinstance(endpoint, str):
                self._endpoints[key] = endpoint
            return b

    def states(self) -> dict[str, str]:
        with self._cond:
            return {k: b.state for k, b in self._breakers.items()}

    def subscribe(self, listener: Any) -> Callable[[], None]:
        """``listener(key, old, new)``: a plain callable (held strongly: call the returned function to stop), or
        an object with a ``breaker_changed(key, old, new)`` method (held weakly: dropped when collected)."""
        with self._cond:
            if hasattr(listener, "breaker_changed"):
                self._listeners.add(listener)
                return lambda: self._listeners.discard(listener)
            self._plain_listeners.append(listener)
            return lambda: self._plain_listeners.remove(listener) if listener in self._plain_listeners else None

    def probe_due(self, timeout_s: float | None = None) -> list[tuple[str, bool]]:
        """Probe every breaker whose cool-down is over, now, in this thread; [(key, ok)]."""
        with self._cond:
            due = [(k, b) for k, b in self._breakers.items() if b.due()]
        out = []
        for key, b in due:
            if not b.begin_probe():
                continue  # another thread took it
            endpoint = self._endpoints.get(key) or ModelEndpoint(base_url=key, model="probe")
            try:
                ok, seen = self.probe(endpoint, timeout_s if timeout_s is not None else self.probe_timeout_s)
            except Exception as exc:  # a probe bug must leave the breaker open, not half-open forever
                ok, seen = False, f"probe failed: {type(exc).__name__}: {exc}"
            b.end_probe(ok, seen)
            out.append((key, ok))
        return out

    def ensure_probing(self) -> None:
        """With ``background``: make sure the probe thread runs while a breaker is open (it may be gone, e.g. in a
        forked worker: threads do not survive a fork)."""
        if self.background and any(b.state != CLOSED for b in list(self._breakers.values())):
            self._ensure_thread()

    def close(self) -> None:
        """Stop the probe thread (tests; a process's board lives as long as the process)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    # -- internals --

    def _on_change(self, b: CircuitBreaker, old: str, new: str) -> None:
        if new == OPEN and self.background:
            self._ensure_thread()
        with self._cond:
            listeners = list(self._listeners) + list(self._plain_listeners)
        for listener in listeners:
            try:
                (getattr(listener, "breaker_changed", None) or listener)(b.key, old, new)
            except Exception:  # a listener's bug must not break the breaker
                pass

    def _ensure_thread(self) -> None:
        with self._cond:
            alive = self._thread is not None and self._thread.is_alive() and self._thread_pid == os.getpid()
            if not alive and not self._stopped:
                self._thread = threading.Thread(target=self._probe_loop, name="hat-breaker-probes", daemon=True)
                self._thread_pid = os.getpid()
                self._thread.start()
            self._cond.notify_all()

    def _probe_loop(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                waits = [b.retry_in_s() for b in self._breakers.values() if b.state == OPEN]
                waits = [w for w in waits if w is not None]
                if not waits:
                    self._thread = None
                    return
                wait = min(waits)
                if wait > 0:
                    # real seconds, capped: an injected clock (tests) is re-read at least every 0.5 s
                    self._cond.wait(min(wait, 0.5))
                    continue
            self.probe_due()


_DEFAULT_BOARD: BreakerBoard | None = None
_DEFAULT_LOCK = threading.Lock()


def default_board() -> BreakerBoard:
    """The process's board: every session's FailoverBackend shares it, so one session's faults spare the others."""
    global _DEFAULT_BOARD
    with _DEFAULT_LOCK:
        if _DEFAULT_BOARD is None:
            _DEFAULT_BOARD = BreakerBoard()
        return _DEFAULT_BOARD


def _reset_after_fork() -> None:  # a forked worker starts with fresh breakers (and no inherited lock state)
    global _DEFAULT_BOARD, _DEFAULT_LOCK
    _DEFAULT_BOARD, _DEFAULT_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


# --- failover ------------------------------------------------------------------------------------------------


@dataclass
class Route:
    """One endpoint of a deployment as FailoverBackend uses it: its name (events) and its request config."""

    name: str
    endpoint: ModelEndpoint

    @property
    def key(self) -> str:
        return breaker_key(self.endpoint.base_url)


def fault_kind(error: ModelError, *, streamed: bool, budget_s: float | None) -> str | None:
    """The ``fault`` kind of a failed call, or None when the endpoint is not to blame (a 4xx: the request's fault;
    the turn's deadline reached after tokens came, or with under MIN_BLAMED_BUDGET_S to spend)."""
    if error.kind == "connect":
        return "endpoint_down"
    if error.kind == "protocol":  # connection reset or closed, a stream cut mid-way, garbage
        return "endpoint_down"
    if error.kind == "timeout":
        return "endpoint_slow"
    if error.kind == "deadline":
        if streamed or (budget_s is not None and budget_s < MIN_BLAMED_BUDGET_S):
            return None
        return "endpoint_slow"
    if error.kind == "http" and error.status is not None:
        if error.status == 429:  # overloaded
            return "endpoint_slow"
        if error.status >= 500:
            return "endpoint_error"
    return None


class FailoverBackend:
    """A ``ChatBackend`` over a deployment's endpoints in failover order (see the module docstring).

    ``endpoints``: :class:`ModelEndpoint` configs, or ``(name, config)`` pairs (a bare config is named by its base
    URL). ``request_models``: endpoint name → the model name requests to it carry (an adapter's name), replacing
    the config's ``model``. ``board``: the breakers (default: the process's :func:`default_board`). ``on_event(type,
    payload)``: fault, failover and breaker events, called in the thread that calls :meth:`stream_chat` or
    :meth:`poll_events` (breaker changes made elsewhere — the probe thread, another session — wait there until
    then). ``slow_s``: no byte from an endpoint for this long (before the first token or between tokens) is a
    fault (``endpoint_slow``): before any token the call fails over within the turn; None keeps each endpoint's
    own read timeout (a hang is then caught by the turn's deadline: that turn speaks its fallback line).

    Thread-safe enough to share between threads; usually one per session runner. :meth:`close` when done."""

    def __init__(self, endpoints: Sequence[ModelEndpoint | tuple[str, ModelEndpoint]],
                 request_models: Mapping[str, str] | None = None, board: BreakerBoard | None = None,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None, *, slow_s: float | None = None):
        if not endpoints:
            raise ValueError("a deployment needs at least one endpoint")
        self.board = board or default_board()
        self.on_event = on_event
        self.slow_s = slow_s
        routes = []
        for item in endpoints:
            name, config = item if isinstance(item, tuple) else (item.base_url, item)
            model = (request_models or {}).get(name)
            update: dict[str, Any] = {"model": model} if model else {}
            if slow_s is not None:
                update["read_timeout_s"] = min(config.read_timeout_s or config.timeout_s, slow_s)
            routes.append(Route(name, config.model_copy(update=update) if update else config))
        self.routes: list[Route] = routes
        self._keys = {r.key for r in routes}
        self._clients: dict[str, OpenAIChatClient] = {}
        self._lock = threading.Lock()
        self._pending: deque[tuple[str, dict[str, Any]]] = deque()
        self._last_served: str = routes[0].name
        self._told: dict[str, str] = {}  # endpoint name -> the breaker state last delivered
        for r in routes:
            self.board.breaker(r.endpoint)
        self.board.subscribe(self)

    # -- ChatBackend --

    def stream_chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
                    budget_s: float | None = None, **sampling: Any) -> Iterator[ChatDelta]:
        start = time.monotonic()

        def remaining() -> float | None:
            return None if budget_s is None else budget_s - (time.monotonic() - start)

        if not self.board.background:
            left = remaining()
            self.board.probe_due(None if left is None else max(0.05, min(self.board.probe_timeout_s, left / 4)))
        elif any(not self.board.breaker(r.key).allow() for r in self.routes):
            self.board.ensure_probing()
        self.poll_events()
        kwargs = {k: v for k, v in sampling.items() if k in SAMPLING_KEYS}
        failed: Route | None = None
        last_error: ModelError | None = None
        for route in self.routes:
            breaker = self.board.breaker(route.key)
            if not breaker.allow():
                continue
            left = remaining()
            if left is not None and left <= 0:
                raise ModelError("deadline", "turn deadline reached before another endpoint could be tried")
            streamed = False
            inner = self._client(route).stream_chat(messages, tools, budget_s=left, **kwargs)
            try:
                for delta in inner:
                    if not streamed:
                        streamed = True
                        self._served(route, failed)
                    yield delta
            except ModelError as error:
                kind = fault_kind(error, streamed=streamed, budget_s=left)
                if kind is None:
                    raise
                self._emit("fault", {"kind": kind, "endpoint": route.name, "message": error.message[:500],
                                     "mid_stream": streamed})
                breaker.record_failure(str(error), trip=streamed or error.kind == "deadline")
                self.poll_events()  # the breaker's change (if any) before the failover it causes
                if streamed or error.kind == "deadline":
                    raise  # the turn's own retry or fallback: never re-send what was half spoken
                failed, last_error = route, error
                continue
            finally:
                inner.close()
            breaker.record_success()
            return
        if last_error is not None:
            raise last_error
        names = ", ".join(r.name for r in self.routes)
        message = f"no endpoint available: the circuit of every endpoint is open ({names})"
        self._emit("fault", {"kind": "endpoints_unavailable", "endpoint": names, "message": message,
                             "mid_stream": False})
        raise ModelError("connect", message)

    # -- events --

    def _served(self, route: Route, failed: Route | None) -> None:
        """The endpoint answers: a ``failover`` event when the call moved (a failure in this call, an open breaker
        skipped, or back to a preferred endpoint), said when the move worked, before its first token."""
        if failed is not None:
            self._emit("failover", {"from": failed.name, "to": route.name, "reason": "failed"})
        elif route.name != self._last_served:
            reason = "recovered" if self._index(route.name) < self._index(self._last_served) else "open"
            self._emit("failover", {"from": self._last_served, "to": route.name, "reason": reason})
        self._last_served = route.name

    def breaker_changed(self, key: str, old: str, new: str) -> None:
        """The board's listener (any thread): queued, delivered by :meth:`poll_events`."""
        if key not in self._keys:
            return
        b = self.board.breaker(key)
        snap = b.snapshot()
        for r in self.routes:
            if r.key == key:
                self._pending.append(("breaker", {"endpoint": r.name, "state": new, "failures": snap["failures"],
                                                  "retry_in_s": snap["retry_in_s"]}))

    def poll_events(self) -> int:
        """Deliver queued breaker events to ``on_event`` now (in this thread); how many. Per endpoint only the
        latest state is told, and only when it differs from the last one told (failed probes between two polls,
        half_open → open → half_open → open, are not repeated)."""
        latest: dict[str, dict[str, Any]] = {}
        while True:
            try:
                _, payload = self._pending.popleft()
            except IndexError:
                break
            latest.pop(payload["endpoint"], None)  # keep the order of the latest changes
            latest[payload["endpoint"]] = payload
        n = 0
        for name, payload in latest.items():
            if self._told.get(name) != payload["state"]:
                self._told[name] = payload["state"]
                self._emit("breaker", payload)
                n += 1
        return n

    def _emit(self, kind: str, payload: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(kind, payload)

    # -- clients --

    def _index(self, name: str) -> int:
        return next((i for i, r in enumerate(self.routes) if r.name == name), len(self.routes))

    def _client(self, route: Route) -> OpenAIChatClient:
        with self._lock:
            client = self._clients.get(route.name)
            if client is None:
                client = self._clients[route.name] = OpenAIChatClient(route.endpoint)
            return client

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()

    def __enter__(self) -> FailoverBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
