"""The ``http`` binding: a manifest tool answered by an external JSON endpoint of the administrator's allow-list.

The allow-list (``HAT_TOOL_ENDPOINTS``, parsed by :func:`parse_tool_endpoints`) holds each endpoint's base URL, the
methods it allows, its headers (values may name a secret: ``{secret:NAME}``) and the bounds a manifest may ask for
(timeout, response size, retries). A manifest's :class:`~harness_editor.schemas.bindings.HttpBinding` names the
endpoint and a path under it; it never holds a URL host or a secret.

A call (:func:`call_http`) fills the path and query templates from the call's arguments (URL-encoded), sends the
arguments as the JSON body when the binding says so, retries connect errors and 5xx answers (bounded), stops
reading past the size cap, and picks the result out of the answer with a JSON path. Every failure is a tool fault
``{"error": ..., "code": ...}`` (``invalid_argument``, ``binding_unavailable``, ``timeout``, ``http_error``,
``too_large``, ``bad_response``); no secret value ever reaches a result, an error or a log line.

Plain Python, no Django.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness_editor.schemas import argument_path_get
from harness_editor.schemas.bindings import HttpBinding, http_path_problem
from streams.engine.outbound import OutboundRefused, check_url

TEMPLATE_RE = re.compile(r"\{([^{}]*)\}")
SECRET_RE = re.compile(r"\{secret:([A-Za-z0-9_.\-]+)\}")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
BODY_METHODS = ("POST", "PUT", "PATCH")
_PART_RE = re.compile(r"^([^\[\]]*)((?:\[\d+\])*)$")
_ERROR_TEXT_CHARS = 200


@dataclass(frozen=True)
class HttpEndpoint:
    """One entry of the administrator's allow-list. ``timeout_s``, ``max_response_bytes`` and ``max_retries`` are
    ceilings: a binding asks for less or gets these. ``outbound_hosts``: ``HAT_OUTBOUND_HOSTS`` as the caller read
    it (``streams.services.tool_runtime``), checked before every call; None checks nothing (a test's endpoint)."""

    name: str
    base_url: str
    methods: tuple[str, ...] = ("GET",)
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    max_response_bytes: int = 1_000_000
    max_retries: int = 2
    outbound_hosts: tuple[str, ...] | None = None

    def secret_names(self) -> list[str]:
        return sorted({n for v in self.headers.values() for n in SECRET_RE.findall(v)})

    def refusal(self) -> str | None:
        """Why no call may go to this endpoint's host and port (not on the outbound allow-list), or None."""
        if self.outbound_hosts is None:
            return None
        try:
            check_url(self.base_url, self.outbound_hosts, ports="default")
        except OutboundRefused as exc:
            return str(exc)
        return None


# --- the allow-list ------------------------------------------------------------------------------------------


class _EndpointSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(min_length=1, max_length=2000)
    methods: list[str] = Field(default_factory=lambda: ["GET"], min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=10.0, gt=0, le=120, allow_inf_nan=False)
    max_response_bytes: int = Field(default=1_000_000, ge=1, le=50_000_000)
    max_retries: int = Field(default=2, ge=0, le=5)

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("base_url must be an http(s) URL with a host")
        if parts.username or parts.password:
            raise ValueError("base_url must not hold a user name or password (put credentials in a header "
                             "that names a secret: {secret:NAME})")
        if parts.query or parts.fragment:
            raise ValueError("base_url must not have a query or a fragment")
        return v.rstrip("/")

    @field_validator("methods")
    @classmethod
    def _methods(cls, v: list[str]) -> list[str]:
        out = [m.upper() for m in v]
        bad = [m for m in out if m not in METHODS]
        if bad:
            raise ValueError(f"unknown method(s) {', '.join(bad)}; allowed: {', '.join(METHODS)}")
        return out

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for k, value in v.items():
            if not re.match(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$", k):
                raise ValueError(f"{k!r} is not a header name")
            rest = SECRET_RE.sub("", value)
            if "{secret" in rest:
                raise ValueError(f"header {k}: a secret is written {{secret:NAME}} (letters, digits, _ . -)")
        return v


_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$")


def load_allow_list(value: Any, what: str) -> dict[str, dict[str, Any]]:
    """An allow-list setting as ``name -> entry``: a mapping, a list of entries with ``name``, inline JSON text
    (starting with ``{`` or ``[``), or the path of a YAML or JSON file holding one. ``ValueError`` names the
    problem. Shared by ``HAT_TOOL_ENDPOINTS`` and ``HAT_MCP_SERVERS``."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("{", "[")):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{what}: inline JSON does not parse: {exc}") from None
        else:
            path = Path(text)
            try:
                raw = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"{what}: the file {text} cannot be read: {exc.strerror or exc}") from None
            try:
                if path.suffix.lower() == ".json":
                    value = json.loads(raw)
                else:
                    import yaml

                    value = yaml.safe_load(raw)
            except Exception as exc:
                raise ValueError(f"{what}: the file {text} does not parse: {exc}") from None
            if value is None:
                return {}
    if isinstance(value, list):
        out: dict[str, dict[str, Any]] = {}
        for i, entry in enumerate(value):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                raise ValueError(f"{what}[{i}]: an entry is an object with a name")
            if entry["name"] in out:
                raise ValueError(f"{what}[{i}].name: {entry['name']!r} is listed twice")
            out[entry["name"]] = {k: v for k, v in entry.items() if k != "name"}
        value = out
    if not isinstance(value, Mapping):
        raise ValueError(f"{what}: expected a mapping of name -> entry or a list of entries")
    for name, entry in value.items():
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(f"{what}: {name!r} is not an allow-list name (letters, digits, _ . -; at most 64)")
        if not isinstance(entry, Mapping):
            raise ValueError(f"{what}.{name}: an entry is an object")
    return {str(k): dict(v) for k, v in value.items()}


def _first_error(exc: ValidationError, prefix: str) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        lines.append(f"{prefix}.{loc}: {err['msg']}" if loc else f"{prefix}: {err['msg']}")
    return "; ".join(lines)


def parse_tool_endpoints(value: Any, outbound_hosts: list[str] | None = None) -> dict[str, HttpEndpoint]:
    """``HAT_TOOL_ENDPOINTS`` -> name -> :class:`HttpEndpoint`. ``ValueError`` with every problem and its path;
    with ``outbound_hosts`` (start-up), a base URL whose host and port that list does not allow is one."""
    entries = load_allow_list(value, "HAT_TOOL_ENDPOINTS")
    out: dict[str, HttpEndpoint] = {}
    problems: list[str] = []
    for name, entry in entries.items():
        try:
            spec = _EndpointSpec.model_validate(entry)
        except ValidationError as exc:
            problems.append(_first_error(exc, f"HAT_TOOL_ENDPOINTS.{name}"))
            continue
        out[name] = HttpEndpoint(name=name, base_url=spec.base_url, methods=tuple(spec.methods),
                                 headers=dict(spec.headers), timeout_s=spec.timeout_s,
                                 max_response_bytes=spec.max_response_bytes, max_retries=spec.max_retries)
        refused = (replace(out[name], outbound_hosts=tuple(outbound_hosts)).refusal()
                   if outbound_hosts is not None else None)
        if refused:
            problems.append(f"HAT_TOOL_ENDPOINTS.{name}.base_url: {refused}")
    if problems:
        raise ValueError("; ".join(problems))
    return out


# --- templates and JSON paths --------------------------------------------------------------------------------


def template_paths(template: str) -> list[str]:
    """The argument paths a template names: ``/orders/{order.id}`` -> ``["order.id"]``."""
    return [m.strip() for m in TEMPLATE_RE.findall(template)]


class _Fault(Exception):
    def __init__(self, code: str, message: str, **extra: Any):
        super().__init__(message)
        self.code, self.message, self.extra = code, message, extra

    def result(self) -> dict[str, Any]:
        return {"error": self.message, "code": self.code, **self.extra}


def _scalar_text(value: Any, path: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise _Fault("invalid_argument", f"argument {path!r} goes into the URL: it must be a string, a number or a "
                 f"boolean, not {type(value).__name__}")


def fill_template(template: str, arguments: Mapping[str, Any], *, encode: bool) -> str:
    """``template`` with each ``{path}`` replaced by that argument (URL-encoded when ``encode``); a path the call
    lacks is an ``invalid_argument`` fault."""

    def one(m: re.Match[str]) -> str:
        path = m.group(1).strip()
        found, value = argument_path_get(dict(arguments), path)
        if not found or value is None:
            raise _Fault("invalid_argument", f"missing argument {path!r} (the URL needs it)")
        text = _scalar_text(value, path)
        return quote(text, safe="") if encode else text

    return TEMPLATE_RE.sub(one, template)


def json_path_get(value: Any, path: str) -> tuple[bool, Any]:
    """``data.items[0].sku`` into a decoded JSON answer; ``""`` is the whole answer."""
    if not path:
        return True, value
    node = value
    for part in path.split("."):
        m = _PART_RE.match(part)
        if m is None:
            return False, None
        key, indexes = m.group(1), re.findall(r"\[(\d+)\]", m.group(2))
        if key:
            if not isinstance(node, Mapping) or key not in node:
                return False, None
            node = node[key]
        for i in indexes:
            if not isinstance(node, list) or int(i) >= len(node):
                return False, None
            node = node[int(i)]
    return True, node


def valid_json_path(path: str) -> bool:
    return not path or all(_PART_RE.match(p) and (p and p != "[]") for p in path.split("."))


# --- the call ------------------------------------------------------------------------------------------------


def _resolve_headers(endpoint: HttpEndpoint, secrets: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    used: list[str] = []

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        value = secrets.get(name)
        if not value:
            raise _Fault("binding_unavailable", f"the endpoint {endpoint.name!r} needs the secret {name}, which is "
                         "not set on this host")
        used.append(value)
        return value

    headers = {"Accept": "application/json", "User-Agent": "hat-console-tool-binding"}
    for k, v in endpoint.headers.items():
        headers[k] = SECRET_RE.sub(sub, v)
    return headers, used


def _redact(value: Any, secrets: list[str]) -> Any:
    """An upstream that echoes request headers must not hand a secret to the model or the event log."""
    if not secrets:
        return value
    if isinstance(value, str):
        for s in secrets:
            if s and s in value:
                value = value.replace(s, "[secret]")
        return value
    if isinstance(value, list):
        return [_redact(v, secrets) for v in value]
    if isinstance(value, dict):
        return {_redact(k, secrets): _redact(v, secrets) for k, v in value.items()}
    return value


def build_request(endpoint: HttpEndpoint, binding: HttpBinding, arguments: Mapping[str, Any]
                  ) -> tuple[str, list[tuple[str, str]]]:
    """(URL, query pairs). The URL stays under the endpoint's base URL whatever the template or arguments say."""
    path = fill_template(binding.path, arguments, encode=True)
    if path and not path.startswith("/"):
        path = "/" + path
    url = endpoint.base_url + path
    base, got = urlsplit(endpoint.base_url), urlsplit(url)
    # A stored template from before the rule, or argument values that decode to '..', are refused here too.
    problem = http_path_problem(path, filled=True)
    if ((got.scheme, got.netloc) != (base.scheme, base.netloc) or not got.path.startswith(base.path)
            or problem or got.query or got.fragment):
        raise _Fault("invalid_argument", f"the path of {endpoint.name!r} leaves its base URL"
                     + (f": {problem}" if problem else ""))
    query: list[tuple[str, str]] = []
    for key, template in binding.query.items():
        names = template_paths(template)
        lone = len(names) == 1 and template.strip() == "{" + names[0] + "}"
        if lone:
            found, value = argument_path_get(dict(arguments), names[0])
            if not found or value is None:
                continue  # an optional argument the call left out: no parameter
        query.append((key, fill_template(template, arguments, encode=False)))
    return url, query


def call_http(endpoint: HttpEndpoint, binding: HttpBinding, arguments: Mapping[str, Any], *,
              secrets: Mapping[str, str], time_left_s: float | None = None,
              sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Call the endpoint for one tool call; the result dict, or a fault dict (``error`` and ``code``)."""
    used: list[str] = []
    try:
        refused = endpoint.refusal()
        if refused:  # checked before anything is sent: no connection to a host or port the list does not allow
            raise _Fault("binding_unavailable", f"the endpoint {endpoint.name!r} is refused: {refused}")
        if binding.method not in endpoint.methods:
            raise _Fault("binding_unavailable", f"the endpoint {endpoint.name!r} does not allow {binding.method}")
        headers, used = _resolve_headers(endpoint, secrets)
        url, query = build_request(endpoint, binding, arguments)
        return _redact(_send(endpoint, binding, url, query, headers, dict(arguments), time_left_s, sleep), used)
    except _Fault as f:
        return _redact(f.result(), used)


def _send(endpoint: HttpEndpoint, binding: HttpBinding, url: str, query: list[tuple[str, str]],
          headers: dict[str, str], arguments: dict[str, Any], time_left_s: float | None,
          sleep: Callable[[float], None]) -> dict[str, Any]:
    timeout = min(binding.timeout_s, endpoint.timeout_s)
    retries = min(binding.retries, endpoint.max_retries)
    cap = min(binding.max_response_bytes, endpoint.max_response_bytes)
    start = time.monotonic()
    budget = timeout * (retries + 1) if time_left_s is None else min(timeout * (retries + 1), max(time_left_s, 0))
    deadline = start + budget
    body = arguments if binding.body == "arguments" and binding.method in BODY_METHODS else None
    where = endpoint.name
    attempt = 0
    with httpx.Client(trust_env=False, follow_redirects=False, headers=headers) as client:
        while True:
            attempt += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Fault("timeout", f"{where} did not answer within {timeout:g} s")
            try:
                status, data = _attempt(client, binding.method, url, query, body, min(timeout, left), cap, where)
            except _Retryable as r:
                if attempt <= retries and deadline - time.monotonic() > 0:
                    sleep(min(0.2 * 2 ** (attempt - 1), max(deadline - time.monotonic(), 0)))
                    continue
                raise r.fault from None
            return _answer(status, data, binding.result, where)


class _Retryable(Exception):
    def __init__(self, fault: _Fault):
        super().__init__(fault.message)
        self.fault = fault


def _attempt(client: httpx.Client, method: str, url: str, query: list[tuple[str, str]], body: Any,
             timeout: float, cap: int, where: str) -> tuple[int, bytes]:
    deadline = time.monotonic() + timeout
    try:
        with client.stream(method, url, params=query or None, json=body, timeout=httpx.Timeout(timeout)) as resp:
            if resp.status_code >= 500:
                raise _Retryable(_Fault("http_error", f"{where} answered {resp.status_code} "
                                        f"{resp.reason_phrase}".rstrip(), status=resp.status_code))
            length = resp.headers.get("content-length")
            if length and length.isdigit() and int(length) > cap:
                raise _Fault("too_large", f"the answer of {where} is larger than {cap} bytes")
            chunks, size = [], 0
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > cap:
                    raise _Fault("too_large", f"the answer of {where} is larger than {cap} bytes")
                chunks.append(chunk)
                if time.monotonic() > deadline:  # a server trickling bytes is as late as a silent one
                    raise _Fault("timeout", f"{where} did not answer within {timeout:g} s")
            return resp.status_code, b"".join(chunks)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise _Retryable(_Fault("http_error", f"{where} cannot be reached ({type(exc).__name__})")) from None
    except httpx.TimeoutException:
        raise _Fault("timeout", f"{where} did not answer within {timeout:g} s") from None
    except httpx.HTTPError as exc:  # protocol errors, a cut connection: the answer is unusable
        raise _Fault("bad_response", f"{where} sent a broken answer ({type(exc).__name__})") from None


def _answer(status: int, data: bytes, result_path: str, where: str) -> dict[str, Any]:
    decoded: Any = None
    parsed = True
    try:
        decoded = json.loads(data.decode("utf-8")) if data else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        parsed = False
    if status >= 300:
        fault: dict[str, Any] = {"error": f"{where} answered {status}", "code": "http_error", "status": status}
        if parsed and isinstance(decoded, Mapping):
            said = decoded.get("error") or decoded.get("message") or decoded.get("detail")
            if isinstance(said, str) and said:
                fault["error"] += f": {said[:_ERROR_TEXT_CHARS]}"
        return fault
    if not parsed or not data:
        return {"error": f"{where} answered with something that is not JSON", "code": "bad_response"}
    found, value = json_path_get(decoded, result_path)
    if not found:
        return {"error": f"the answer of {where} has no {result_path!r}", "code": "bad_response"}
    # The engine passes objects to the model; a list or a scalar goes under "result".
    return dict(value) if isinstance(value, Mapping) else {"result": value}
