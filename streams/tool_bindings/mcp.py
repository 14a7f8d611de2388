"""The MCP binding: list a Model Context Protocol server's tools (``tools/list``) and call one (``tools/call``).

A server is an entry of the administrator's allow-list (``HAT_MCP_SERVERS``, parsed into :class:`McpServer`):
a command spawned over stdio, or a streamable-HTTP URL. Header and environment values may name secrets
(``{secret:NAME}``), resolved from the secrets mapping at call time and never shown: every resolved value is
scrubbed from results and errors.

Sync API over the async SDK (``mcp`` 2.x ``Client``); the turn engine is synchronous and runs in threads.

- stdio: the server keeps running between calls, one process per server (and resolved environment) per console
  process, owned by a background event loop (:mod:`streams.tool_bindings.mcp_sessions`, which says why and how
  it is stopped: idle, timeout, lost connection, exit). Starting an interpreter and its imports per call cost
  1-4 s a call on this project's loaded CPU hosts; a call on a running server takes ~10 ms.
- HTTP, and every ``tools/list``: a private event loop and connection per call (handshake, one request, close):
  a round trip of overhead, no server-side session to go stale, nothing left behind in a web process.

Every call is bounded by its timeout (starting, handshake and request together).

Every failure is a tool fault the hooks understand, ``{"error": ..., "code": ...}``:

- ``timeout``: the server did not answer within the call's timeout (connect, handshake and call together);
- ``binding_unavailable``: the server cannot be reached (not running, refused, command not found) or a secret it
  needs is not configured;
- ``mcp_error``: the server answered with a protocol error (unknown tool, invalid arguments) or something that
  is not MCP (a stdio server writing other lines to its stdout: said at once, not waited out), or a result too
  large;
- ``tool_error``: the tool ran and reported an error (``isError``).

Plain Python, no Django.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shlex
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 120.0
# What one result may weigh once serialised: it goes back to the model, so it is held to what a prompt can carry.
MAX_RESULT_BYTES = 262_144
# Bytes of server stderr kept for an error message (a server that dies at start says why there).
_STDERR_TAIL = 2_000
_CONNECTION_CLOSED = -32000  # the SDK's code for a connection that ended under a request
_SECRET_RE = re.compile(r"\{secret:([A-Za-z0-9_.\-]+)\}")
_HIDDEN = "[secret]"

FaultCode = Literal["timeout", "mcp_error", "binding_unavailable", "tool_error"]


@dataclass(frozen=True)
class McpServer:
    """One allow-listed MCP server.

    ``transport`` ``stdio``: ``command`` (argv) is spawned with ``env`` added to a minimal inherited environment;
    ``http``: streamable HTTP at ``url``, with ``headers`` on every request. Values of ``headers`` and ``env`` may
    hold ``{secret:NAME}`` placeholders (resolved from the secrets mapping at call time). ``timeout_s``: the
    default bound of one call (a binding's own ``timeout_s`` may lower it)."""

    name: str
    transport: Literal["stdio", "http"]
    command: tuple[str, ...] = ()
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S
    outbound_hosts: tuple[str, ...] | None = None  # HAT_OUTBOUND_HOSTS as the caller read it; None: not checked

    def refusal(self) -> str | None:
        """Why an http server's host and port may not be reached (the outbound allow-list, read as for HTTP tool
        endpoints: an entry without a port allows 80/443 only), or None."""
        if self.transport != "http" or self.outbound_hosts is None:
            return None
        from streams.engine.outbound import OutboundRefused, check_url

        try:
            check_url(self.url, self.outbound_hosts, ports="default")
        except OutboundRefused as exc:
            return str(exc)
        return None

    def __post_init__(self) -> None:
        if isinstance(self.command, str):  # a command line written as one string in settings
            object.__setattr__(self, "command", tuple(shlex.split(self.command)))
        else:
            object.__setattr__(self, "command", tuple(self.command))
        if self.transport not in ("stdio", "http"):
            raise ValueError(f"MCP server {self.name!r}: transport is 'stdio' or 'http', not {self.transport!r}")
        if self.transport == "stdio" and not self.command:
            raise ValueError(f"MCP server {self.name!r}: a stdio server needs a command")
        if self.transport == "http" and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"MCP server {self.name!r}: an http server needs an http(s) URL")
        if not (0 < self.timeout_s <= MAX_TIMEOUT_S):
            raise ValueError(f"MCP server {self.name!r}: timeout_s must be in (0, {MAX_TIMEOUT_S:g}]")


class McpFault(Exception):
    """A call that ended in a tool fault (raised inside this module, returned as a dict to callers)."""

    def __init__(self, code: FaultCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# --- secrets ---------------------------------------------------------------------------------------------------


def _resolve(values: Mapping[str, str], secrets: Mapping[str, str], what: str) -> tuple[dict[str, str], list[str]]:
    """``values`` with every ``{secret:NAME}`` replaced, and the secret values used (for scrubbing)."""
    used: list[str] = []
    out: dict[str, str] = {}
    for key, value in values.items():
        def fill(match: re.Match[str], key: str = key) -> str:
            name = match.group(1)
            if name not in secrets or not secrets[name]:
                raise McpFault("binding_unavailable", f"the secret {name!r} ({what} {key}) is not configured")
            used.append(secrets[name])
            return secrets[name]

        out[str(key)] = _SECRET_RE.sub(fill, str(value))
    return out, used


class _Scrubber:
    """Replaces every secret value (and anything long enough to be one that a header carried) in text."""

    def __init__(self, values: list[str]) -> None:
        # Longest first, so a secret that contains another is hidden whole; very short values are not secrets
        # anyone could recognise and would mangle ordinary text.
        self.values = sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)

    def text(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, _HIDDEN)
        return text

    def value(self, value: Any) -> Any:
        if not self.values:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        return value


# --- the async core ---------------------------------------------------------------------------------------------

_NOT_JSON_RPC = "Failed to parse JSONRPC message from server"


class _NoParseTracebacks(logging.Filter):
    """The SDK logs a traceback for every stdout line of a stdio server that is not JSON-RPC; the fault
    (:class:`ProtocolWatch`) says it once, with the line, so those records are dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != _NOT_JSON_RPC


logging.getLogger("mcp.client.stdio").addFilter(_NoParseTracebacks())


class ProtocolWatch:
    """Sees the stdout lines of a stdio server that are not JSON-RPC (the SDK hands them to the client's message
    handler). The MCP stdio transport allows nothing else there (a banner or log lines on stdout): the first one
    calls ``on_bad`` (the caller ends the connection) and :meth:`fault` says what the server wrote, instead of the
    request waiting out its timeout."""

    def __init__(self) -> None:
        self.line: str | None = None
        self.on_bad: Callable[[], None] | None = None

    async def handler(self, message: Any) -> None:
        if isinstance(message, Exception) and self.line is None:
            errors = message.errors() if hasattr(message, "errors") else []
            got = errors[0].get("input") if errors and isinstance(errors[0], dict) else None
            self.line = " ".join(str(got if isinstance(got, str) else message).split())[:200]
            if self.on_bad is not None:
                self.on_bad()
        import anyio

        await anyio.lowlevel.checkpoint()

    def fault(self, server: McpServer) -> McpFault:
        return McpFault("mcp_error", f"MCP server {server.name!r} wrote output to stdout that is not an MCP "
                                     f"message ({self.line!r}): a stdio server may write only JSON-RPC messages "
                                     "there (logs belong on stderr)")


def _stdio_client(server: McpServer, env: Mapping[str, str], timeout_s: float, errlog: Any,
                  watch: ProtocolWatch | None = None):
    """An unentered SDK client that spawns the server's command (``env`` resolved, added to a minimal environment),
    its stderr going to ``errlog`` (a real file); ``watch`` sees what it writes to stdout that is not MCP."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=server.command[0], args=list(server.command[1:]), env=dict(env))
    return Client(stdio_client(params, errlog=errlog), mode="auto", read_timeout_seconds=timeout_s, cache=None,
                  message_handler=watch.handler if watch is not None else None)


def _client(server: McpServer, secrets: Mapping[str, str], timeout_s: float, errlog: Any,
            watch: ProtocolWatch | None = None):
    """An unentered SDK client for the server, and the secret values it carries."""
    from mcp import Client

    if server.transport == "stdio":
        env, used = _resolve(server.env, secrets, "env")
        return _stdio_client(server, env, timeout_s, errlog, watch), used
    if server.refusal():  # checked before anything is resolved or connected; the address is the administrators'
        raise McpFault("binding_unavailable", f"the MCP server {server.name!r} is on a host or port the outbound "
                       "allow-list (HAT_OUTBOUND_HOSTS) does not allow: an administrator lists it as host:port")
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers, used = _resolve(server.headers, secrets, "header")
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout_s), follow_redirects=False)
    transport = _OwnedHttpTransport(http, streamable_http_client(server.url, http_client=http))
    return Client(transport, mode="auto", read_timeout_seconds=timeout_s, cache=None), used


class _OwnedHttpTransport:
    """The streamable-HTTP transport with the httpx client it was given, closed together (the SDK leaves a
    client it did not create open)."""

    def __init__(self, http: Any, transport: Any) -> None:
        self.http = http
        self.transport = transport

    async def __aenter__(self):
        await self.http.__aenter__()
        try:
            return await self.transport.__aenter__()
        except BaseException:
            await self.http.__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc: Any) -> bool | None:
        try:
            return await self.transport.__aexit__(*exc)
        finally:
            await self.http.__aexit__(None, None, None)


async def _with_client(server: McpServer, secrets: Mapping[str, str], timeout_s: float,
                       use: Callable[[Any], Coroutine[Any, Any, Any]], scrub_into: list[str]) -> Any:
    import anyio

    with _StderrTail() as errlog:
        watch = ProtocolWatch()
        client, used = _client(server, secrets, timeout_s, errlog.file, watch)
        scrub_into.extend(used)
        connected = False
        try:
            with anyio.fail_after(timeout_s):
                with anyio.CancelScope() as scope:
                    watch.on_bad = scope.cancel  # a line that is not MCP ends the call now
                    async with client:
                        connected = True
                        return await use(client)
                raise watch.fault(server)
        except TimeoutError:
            if watch.line is not None:
                raise watch.fault(server) from None
            raise McpFault("timeout", f"MCP server {server.name!r} did not answer within {timeout_s:g} s") from None
        except McpFault:
            raise
        except BaseException as exc:  # noqa: BLE001 - sorted into faults below; KeyboardInterrupt etc. re-raised
            if watch.line is not None and not isinstance(exc, KeyboardInterrupt | SystemExit):
                raise watch.fault(server) from None
            fault = _fault_from(exc, server, errlog.tail(), connected=connected)
            if fault is None:
                raise
            raise fault from None


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _fault_from(exc: BaseException, server: McpServer, stderr_tail: str, *, connected: bool = True
                ) -> McpFault | None:
    """The fault an exception out of the SDK stands for, or None for one that is not ours to turn into a fault
    (KeyboardInterrupt, SystemExit, a cancellation from outside). ``connected``: the handshake had succeeded;
    before it, what would be an ``mcp_error`` means the server is not there to be used (it died at start, refused
    us, is not MCP): ``binding_unavailable``."""
    fault = _sdk_fault(exc, server, stderr_tail)
    if fault is not None and not connected and fault.code == "mcp_error":
        hint = "; check its URL and headers" if server.transport == "http" else ""
        fault = McpFault("binding_unavailable", fault.message + hint)
    return fault


def connection_lost(exc: BaseException) -> bool:
    """Whether an exception out of a call means the connection itself is gone or unusable (anything but an MCP
    error about the request: unknown tool, invalid arguments)."""
    from mcp.shared.exceptions import MCPError

    leaves = _leaves(exc)
    return not leaves or not all(isinstance(e, MCPError) and e.code != _CONNECTION_CLOSED for e in leaves)


def _sdk_fault(exc: BaseException, server: McpServer, stderr_tail: str) -> McpFault | None:
    import anyio
    import httpx2
    from mcp.shared.exceptions import MCPError
    from pydantic import ValidationError

    leaves = _leaves(exc)
    if any(isinstance(e, (KeyboardInterrupt, SystemExit)) for e in leaves):
        return None
    if any(isinstance(e, anyio.get_cancelled_exc_class()) for e in leaves) and not any(
            isinstance(e, Exception) for e in leaves):
        return None
    where = f"MCP server {server.name!r}"
    for e in leaves:
        if isinstance(e, TimeoutError | httpx2.TimeoutException):
            return McpFault("timeout", f"{where} did not answer in time")
    for e in leaves:
        if isinstance(e, FileNotFoundError | PermissionError):
            return McpFault("binding_unavailable", f"{where}: its command cannot be started ({type(e).__name__})")
        if isinstance(e, httpx2.ConnectError | ConnectionError):
            return McpFault("binding_unavailable", f"{where} cannot be reached ({type(e).__name__})")
        if isinstance(e, httpx2.HTTPStatusError):
            status = e.response.status_code
            code: FaultCode = "binding_unavailable" if status in (401, 403, 404, 502, 503, 504) else "mcp_error"
            return McpFault(code, f"{where} answered HTTP {status}")
    for e in leaves:
        if isinstance(e, MCPError):
            # CONNECTION_CLOSED (-32000) before any answer: a server that died, or an HTTP error the SDK reported
            # as a closed connection.
            message = e.message or "error"
            if stderr_tail and e.code == _CONNECTION_CLOSED:
                message = f"{message}; its stderr ends: {stderr_tail}"
            return McpFault("mcp_error", f"{where}: {message} (MCP error {e.code})")
        if isinstance(e, ValidationError):
            return McpFault("mcp_error", f"{where} answered something that is not a valid MCP message")
        if isinstance(e, httpx2.HTTPError):
            return McpFault("binding_unavailable", f"{where} cannot be reached ({type(e).__name__})")
    first = next((e for e in leaves if isinstance(e, Exception)), exc)
    message = f"{where} failed: {type(first).__name__}: {first}"
    if stderr_tail:
        message += f"; its stderr ends: {stderr_tail}"
    return McpFault("mcp_error", message[:1000])


class _StderrTail:
    """A temporary file the stdio server's stderr goes to (a real file: the child writes to its descriptor), read
    back for error messages."""

    def __enter__(self):
        import tempfile

        self.file = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        return self

    def tail(self) -> str:
        try:
            self.file.flush()
            self.file.seek(0, 2)
            size = self.file.tell()
            self.file.seek(max(0, size - _STDERR_TAIL))
            return " ".join(self.file.read().split())[-_STDERR_TAIL:]
        except (OSError, ValueError):
            return ""

    def __exit__(self, *exc: Any) -> None:
        self.file.close()


def _run(coro_factory: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run a coroutine to its end in a private event loop: in this thread when it has no loop running, else in a
    thread of its own (an async caller must not be blocked inside its own loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_factory())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro_factory())
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="mcp-call", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _timeout(server: McpServer, timeout_s: float | None) -> float:
    value = server.timeout_s if timeout_s is None else min(float(timeout_s), server.timeout_s)
    if not value > 0:
        raise ValueError("timeout_s must be positive")
    return min(value, MAX_TIMEOUT_S)


# --- results ----------------------------------------------------------------------------------------------------


def _block_summary(block: Any) -> dict[str, Any]:
    """A content block that is not text, without its payload (images, audio and blobs do not go to the model)."""
    out: dict[str, Any] = {"type": getattr(block, "type", "unknown")}
    for attr, key in (("mime_type", "mimeType"), ("uri", "uri"), ("name", "name")):
        value = getattr(block, attr, None)
        if isinstance(value, str) and value:
            out[key] = value
    resource = getattr(block, "resource", None)
    if resource is not None:
        if isinstance(getattr(resource, "uri", None), str):
            out["uri"] = str(resource.uri)
        if isinstance(getattr(resource, "text", None), str):
            out["text"] = resource.text
    return out


def result_to_dict(result: Any) -> dict[str, Any]:
    """A ``CallToolResult`` as the JSON-able dict a binding answers with.

    ``isError``: the tool fault ``tool_error`` with the tool's text; else ``structuredContent`` when present (an
    object as it is, any other value as ``{"result": value}``); else the text content, parsed as JSON when it
    is JSON (an object as it is, another value as ``{"result": value}``), otherwise ``{"text": ...}``; content
    that is not text is listed under ``content`` without its payload."""
    blocks = list(getattr(result, "content", None) or [])
    texts = [b.text for b in blocks if getattr(b, "type", None) == "text" and isinstance(b.text, str)]
    others = [_block_summary(b) for b in blocks if getattr(b, "type", None) != "text"]
    text = "\n".join(texts)
    if getattr(result, "is_error", False):
        return {"error": text or "the tool reported an error", "code": "tool_error"}
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        return structured if isinstance(structured, dict) else {"result": structured}
    out: dict[str, Any]
    if len(texts) == 1 and not others:
        try:
            parsed = json.loads(texts[0])
        except ValueError:
            parsed = texts[0]
            out = {"text": parsed}
        else:
            out = parsed if isinstance(parsed, dict) else {"result": parsed}
        return out
    out = {"text": text}
    if others:
        out["content"] = others
    return out


def _fault(code: FaultCode, message: str, scrub: _Scrubber | None = None) -> dict[str, Any]:
    return {"error": scrub.text(message) if scrub else message, "code": code}


def _sized(value: dict[str, Any], server: McpServer) -> dict[str, Any]:
    try:
        size = len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except (TypeError, ValueError):
        return _fault("mcp_error", f"MCP server {server.name!r} answered a result that is not JSON")
    if size > MAX_RESULT_BYTES:
        return _fault("mcp_error", f"MCP server {server.name!r} answered {size} bytes; at most {MAX_RESULT_BYTES} "
                                   "are passed on")
    return value


# --- the API ----------------------------------------------------------------------------------------------------


def _tool_hints(tool: Any) -> dict[str, Any]:
    """What a listed tool says beyond its input, in MCP's own keys (``title``, ``annotations``, ``outputSchema``),
    each only when the server sent it: the importer carries them into the manifest and reports them."""
    out: dict[str, Any] = {}
    if isinstance(getattr(tool, "title", None), str):
        out["title"] = tool.title
    annotations = getattr(tool, "annotations", None)
    if annotations is not None:
        out["annotations"] = annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
    if getattr(tool, "output_schema", None) is not None:
        out["outputSchema"] = dict(tool.output_schema)
    return out


def list_mcp_tools(server: McpServer, *, secrets: Mapping[str, str] | None = None,
                   timeout_s: float | None = None) -> list[dict[str, Any]]:
    """Every tool the server lists (all pages): ``[{name, description, inputSchema}]``, with ``title``,
    ``annotations`` and ``outputSchema`` where the server sends them.

    Raises :class:`McpFault` (``.code``, ``.message``, secrets scrubbed) when the server cannot be listed."""
    limit = _timeout(server, timeout_s)
    used: list[str] = []

    async def use(client: Any) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _page in range(100):  # a server whose cursor never ends cannot hang the listing
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                tools.append({"name": tool.name, "description": tool.description or "",
                              "inputSchema": dict(tool.input_schema or {}), **_tool_hints(tool)})
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    try:
        tools = _run(lambda: _with_client(server, secrets or {}, limit, use, used))
    except McpFault as fault:
        raise McpFault(fault.code, _Scrubber(used).text(fault.message)) from None
    return _Scrubber(used).value(tools)


def call_mcp_tool(server: McpServer, tool_name: str, arguments: Mapping[str, Any] | None, *,
                  timeout_s: float | None, secrets: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Call ``tool_name`` on the server with ``arguments``; the result as a JSON-able dict or a tool fault
    (:func:`result_to_dict`; module docstring for the codes). Never raises for a server's behaviour."""
    used: list[str] = []
    try:
        limit = _timeout(server, timeout_s)
    except ValueError as exc:
        return _fault("mcp_error", str(exc))
    if not isinstance(tool_name, str) or not tool_name:
        return _fault("mcp_error", "no MCP tool name")

    async def use(client: Any) -> Any:
        return await client.call_tool(tool_name, dict(arguments or {}), read_timeout_seconds=limit)

    try:
        if server.transport == "stdio":  # a running server per process (mcp_sessions: why)
            from streams.tool_bindings.mcp_sessions import call_stdio

            env, resolved = _resolve(server.env, secrets or {}, "env")
            used.extend(resolved)
            result = call_stdio(server, env, use, limit)
        else:
            result = _run(lambda: _with_client(server, secrets or {}, limit, use, used))
    except McpFault as fault:
        return _fault(fault.code, fault.message, _Scrubber(used))
    scrub = _Scrubber(used)
    return scrub.value(_sized(result_to_dict(result), server))
