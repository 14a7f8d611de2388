"""The one model path: an OpenAI-compatible chat-completions client with streaming (SSE over httpx).

Works unchanged against vLLM (``--enable-auto-tool-choice --tool-call-parser hermes``), the local CPU server
(``transformers serve``) and OpenAI itself: the request body holds only standard OpenAI fields plus the
endpoint's ``extra_body``.

Faults of the local server that this client absorbs (see ../shared/STACK.md): reasoning arrives as a
non-standard ``reasoning_content`` delta (yielded on its own channel); leaked special tokens such as
``<|im_end|>`` are stripped from content; a 500 on malformed tool-call JSON becomes a :class:`ModelError`
(kind ``http``, status 500) that the engine can retry.

Every failure is a :class:`ModelError` with a ``kind``; nothing hangs: connect timeout, per-read timeout and
a total deadline per request (checked between chunks; the worst case is bounded by ``timeout_s`` plus one
read timeout).

A caller with its own wall-clock budget (the turn engine's turn deadline) passes ``budget_s``: every timeout
of the request is capped at it, and once a connection is made (or the response has started on a reused one) a
watchdog shuts the socket down when the budget runs out, so a slow connect, a server that never answers and a
stream that stalls mid-way are all cut at the budget, not one read timeout later. Running
out of the caller's budget is the error kind ``deadline`` (the endpoint's own limits stay ``timeout``).
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from streams.engine.outbound import check_url

ModelErrorKind = Literal["timeout", "deadline", "connect", "http", "protocol", "replay"]

SPECIAL_TOKEN_RE = re.compile(r"<\|[A-Za-z0-9_]{1,40}\|>")
_MAX_ERROR_BODY = 2000


class ModelEndpoint(BaseModel):
    """Where a model is served, and how long to wait for it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(min_length=1)  # e.g. http://127.0.0.1:8001/v1
    model: str = Field(min_length=1)
    # Read from an administrator's secret where the request is made; never in a repr, a dump or a log.
    api_key: str = Field("", repr=False, exclude=True)
    timeout_s: float = Field(default=60.0, gt=0, le=3600)  # total deadline per request
    connect_timeout_s: float = Field(default=5.0, gt=0, le=600)
    read_timeout_s: float | None = Field(default=None, gt=0, le=3600)  # idle gap between chunks; default timeout_s
    kind: Literal["vllm", "local", "openai"] = "local"
    extra_body: dict[str, Any] = Field(default_factory=dict)

    @field_validator("base_url")
    @classmethod
    def _http_only(cls, url: str) -> str:
        # the form of the URL only (http(s), no credentials); the console also checks its host against
        # HAT_OUTBOUND_HOSTS (streams.models.ModelEndpoint.as_config)
        return check_url(url, None)


class ModelError(Exception):
    """The endpoint failed: ``kind`` says how (timeout, deadline, connect, http, protocol, replay). ``deadline``
    means the caller's budget (``budget_s``) ran out, not the endpoint's own timeouts."""

    def __init__(self, kind: str, message: str, status: int | None = None):
        self.kind = kind
        self.message = message
        self.status = status
        super().__init__(kind, message, status)

    def __str__(self) -> str:
        status = f" {self.status}" if self.status is not None else ""
        return f"{self.kind}{status}: {self.message}"

    @property
    def transient(self) -> bool:
        """Worth one more try within the turn (a 5xx, e.g. the local server's 500 on bad tool JSON)."""
        return self.kind == "http" and self.status is not None and self.status >= 500


@dataclass(frozen=True, slots=True)
class NativeToolCall:
    """One complete tool call from the endpoint's ``tool_calls`` deltas (arguments as the raw string)."""

    index: int
    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class ChatDelta:
    """One piece of a streamed response. Native tool calls arrive complete, in one delta at the end."""

    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[NativeToolCall, ...] = ()
    finish_reason: str | None = None
    usage: dict[str, Any] | None = field(default=None)


class _SpecialTokenFilter:
    """Strips ``<|...|>`` tokens from streamed text, holding back a possible partial token at the end."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str) -> str:
        text = self._held + text
        self._held = ""
        text = SPECIAL_TOKEN_RE.sub("", text)
        cut = text.rfind("<|")
        if cut != -1 and "|>" not in text[cut:] and len(text) - cut <= 44:
            self._held = text[cut:]
            text = text[:cut]
        elif text.endswith("<"):
            self._held = "<"
            text = text[:-1]
        return text

    def flush(self) -> str:
        held, self._held = self._held, ""
        return SPECIAL_TOKEN_RE.sub("", held)


class _Cutoff:
    """When one request must end: the endpoint's ``timeout_s`` or the caller's budget, whichever is first.

    With a budget, :meth:`trace` (a new connection) or :meth:`arm` (the response on a reused one) starts a
    timer that shuts the socket down at the deadline: a read
    blocked on a stalled stream then returns at once (EOF or a network error) and :attr:`fired` tells the
    client it was cut, not finished."""

    __slots__ = ("deadline", "by_budget", "limit_s", "fired", "_timer")

    def __init__(self, timeout_s: float, budget_s: float | None):
        self.by_budget = budget_s is not None and budget_s < timeout_s
        self.limit_s = budget_s if self.by_budget else timeout_s  # type: ignore[assignment]
        self.deadline = time.monotonic() + self.limit_s
        self.fired = threading.Event()
        self._timer: threading.Timer | None = None

    def expired(self) -> bool:
        return self.fired.is_set() or time.monotonic() >= self.deadline

    def error(self) -> ModelError:
        if self.by_budget:
            return ModelError("deadline", f"turn deadline reached: request cut after {self.limit_s:.3g} s")
        return ModelError("timeout", f"response not finished within {self.limit_s:g} s")

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's trace hook: arm the watchdog as soon as a new connection is up. Otherwise a connect that
        took most of the budget is followed by a wait for the headers capped at the whole budget again."""
        if name == "connection.connect_tcp.complete" and self.by_budget:
            stream = info.get("return_value")
            self._arm(stream.get_extra_info("socket") if stream is not None else None)

    def arm(self, response: httpx.Response) -> None:
        if not self.by_budget:
            return
        stream = response.extensions.get("network_stream")
        self._arm(stream.get_extra_info("socket") if stream is not None else None)

    def _arm(self, sock: socket.socket | None) -> None:
        if sock is None or self._timer is not None:  # a test transport: the capped read timeout and the
            return  # per-chunk check still hold; or armed already when the connection was made

        def cut() -> None:
            self.fired.set()
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv(); close() from another thread does not
            except OSError:
                pass

        self._timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), cut)
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


_SSL_CONTEXT: ssl.SSLContext | None = None
_SSL_LOCK = threading.Lock()


def _ssl_context() -> ssl.SSLContext:
    """One verifying TLS context per process: building one loads the CA bundle (~80 ms here), which a client
    per turn would otherwise pay before its first request, i.e. on every turn's time to first token."""
    global _SSL_CONTEXT
    with _SSL_LOCK:
        if _SSL_CONTEXT is None:
            _SSL_CONTEXT = httpx.create_ssl_context()
        return _SSL_CONTEXT


class OpenAIChatClient:
    """Streaming chat completions against one :class:`ModelEndpoint`. Thread-safe; reuses connections."""

    def __init__(self, endpoint: ModelEndpoint, *, transport: httpx.BaseTransport | None = None):
        self.endpoint = endpoint
        read = endpoint.read_timeout_s or endpoint.timeout_s
        headers = {"Accept": "text/event-stream"}
        if endpoint.api_key:
            headers["Authorization"] = f"Bearer {endpoint.api_key}"
        self._http = httpx.Client(
            timeout=httpx.Timeout(connect=endpoint.connect_timeout_s, read=read, write=read, pool=read),
            headers=headers,
            transport=transport,
            verify=_ssl_context(),
            trust_env=False,  # loopback and cluster endpoints: never route through a proxy from the env
        )
        self.url = endpoint.base_url.rstrip("/") + "/chat/completions"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OpenAIChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request_body(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = 512,
        top_p: float | None = None,
        seed: int | None = None,
        stop: list[str] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.endpoint.model, "messages": list(messages), "stream": True}
        if tools:
            body["tools"] = list(tools)
            body["tool_choice"] = "auto"
        for key, value in (
            ("temperature", temperature),
            ("max_tokens", max_tokens),
            ("top_p", top_p),
            ("seed", seed),
            ("stop", stop),
        ):
            if value is not None:
                body[key] = value
        body.update(self.endpoint.extra_body)
        return body

    def stream_chat(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = 512,
        top_p: float | None = None,
        seed: int | None = None,
        stop: list[str] | None = None,
        budget_s: float | None = None,
    ) -> Iterator[ChatDelta]:
        """Stream one response. ``budget_s``: the caller's remaining wall-clock budget in seconds; when it is
        shorter than the endpoint's limits the request is cut at it (a ``deadline`` ModelError)."""
        body = self.request_body(
            messages, tools, temperature=temperature, max_tokens=max_tokens, top_p=top_p, seed=seed, stop=stop
        )
        if budget_s is not None and budget_s <= 0:
            raise ModelError("deadline", "turn deadline reached before the request was sent")
        cutoff = _Cutoff(self.endpoint.timeout_s, budget_s)
        extra: dict[str, Any] = {}
        if cutoff.by_budget:  # cap every phase (connect, waiting for headers, each read) at the budget
            ep, rest = self.endpoint, cutoff.limit_s
            read = min(ep.read_timeout_s or ep.timeout_s, rest)
            extra["timeout"] = httpx.Timeout(connect=min(ep.connect_timeout_s, rest), read=read, write=read, pool=read)
            extra["extensions"] = {"trace": cutoff.trace}  # the watchdog from the moment a connection is made
        try:
            with self._http.stream("POST", self.url, json=body, **extra) as response:
                cutoff.arm(response)
                if response.status_code >= 400:
                    raw = b""
                    for chunk in response.iter_bytes():
                        raw += chunk
                        if len(raw) > _MAX_ERROR_BODY or cutoff.expired():
                            break
                    text = raw[:_MAX_ERROR_BODY].decode("utf-8", "replace").strip()
                    raise ModelError("http", f"HTTP {response.status_code}: {text}", response.status_code)
                yield from self._events(response, cutoff)
        except ModelError:
            raise
        except httpx.TimeoutException as exc:
            if cutoff.by_budget and cutoff.expired():
                raise cutoff.error() from None
            raise ModelError("timeout", f"{type(exc).__name__}: endpoint did not answer in time") from None
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.NetworkError) as exc:
            if cutoff.fired.is_set():  # our watchdog broke the connection
                raise cutoff.error() from None
            kind = "connect" if isinstance(exc, httpx.ConnectError) else "protocol"
            raise ModelError(kind, f"{type(exc).__name__}: {exc}") from None
        except httpx.HTTPError as exc:
            if cutoff.fired.is_set():
                raise cutoff.error() from None
            raise ModelError("protocol", f"{type(exc).__name__}: {exc}") from None
        finally:
            cutoff.disarm()

    def _events(self, response: httpx.Response, cutoff: _Cutoff) -> Iterator[ChatDelta]:
        calls: dict[int, dict[str, Any]] = {}
        content_filter = _SpecialTokenFilter()
        finish: str | None = None
        usage: dict[str, Any] | None = None
        done = False
        for line in response.iter_lines():
            if cutoff.expired():
                raise cutoff.error()
            if not line.startswith("data:"):
                continue  # comments (": keep-alive"), event names, blank separators
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            try:
                chunk = json.loads(data)
            except ValueError:
                raise ModelError("protocol", f"stream chunk is not JSON: {data[:200]!r}") from None
            if not isinstance(chunk, dict):
                raise ModelError("protocol", f"stream chunk is not an object: {data[:200]!r}")
            if chunk.get("error"):
                err = chunk["error"]
                msg = err.get("message") if isinstance(err, dict) else str(err)
                code = err.get("code") if isinstance(err, dict) else None
                raise ModelError("http", f"error in stream: {msg}", code if isinstance(code, int) else 500)
            if isinstance(chunk.get("usage"), dict):
                usage = chunk["usage"]
            for choice in chunk.get("choices") or []:
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
                content = delta.get("content") or ""
                if not isinstance(content, str):
                    content = ""
                if content:
                    content = content_filter.feed(content)
                if isinstance(reasoning, str) and reasoning:
                    yield ChatDelta(reasoning=SPECIAL_TOKEN_RE.sub("", reasoning))
                if content:
                    yield ChatDelta(content=content)
                for tc in delta.get("tool_calls") or []:
                    if not isinstance(tc, dict):
                        continue
                    idx = tc.get("index")
                    if not isinstance(idx, int) or isinstance(idx, bool):  # servers that omit the index
                        idx = (max(calls) + 1 if calls else 0) if (tc.get("id") or not calls) else max(calls)
                    slot = calls.setdefault(idx, {"id": "", "name": "", "arguments": ""})
                    if tc.get("id"):
                        slot["id"] = tc["id"]
                    fn = tc.get("function") or {}
                    if fn.get("name"):
                        slot["name"] += fn["name"]
                    args = fn.get("arguments")
                    if isinstance(args, str):
                        slot["arguments"] += args
                    elif isinstance(args, dict):  # some servers send an object, not a string
                        slot["arguments"] += json.dumps(args, ensure_ascii=False)
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
        if not done and cutoff.fired.is_set():  # the watchdog's shutdown reads as EOF: cut, not finished
            raise cutoff.error()
        tail = content_filter.flush()
        if tail:
            yield ChatDelta(content=tail)
        native = tuple(
            NativeToolCall(i, c["id"] or f"call_{i}", c["name"], c["arguments"]) for i, c in sorted(calls.items())
        )
        yield ChatDelta(tool_calls=native, finish_reason=finish or ("tool_calls" if native else "stop"), usage=usage)
