"""Request input that no view can use is refused before any view, form or query sees it.

:class:`BadInputMiddleware` answers 400 when a NUL character is in a query parameter (name or value), a header
(cookies included), a form field or an uploaded file's name, and 404 when it is in the path: PostgreSQL refuses
NUL in text, so such a value reached the database as a ``DataError`` (a 500) in every list filter. It also reads form bodies itself, so
a body Django cannot parse (over ``DATA_UPLOAD_MAX_MEMORY_SIZE``, too many fields, a broken multipart body) is
answered here as well.

Under ``/api/`` the answer is the API's error body (as :func:`console.apis.exception_handler` writes it:
``{"detail", "code", "errors": [{"path", "message"}]}``, 413 ``too_large`` for a body over the limit, 400
otherwise); a page gets a short 400 page that says what was wrong. JSON bodies are the API parser's
(:class:`console.parsing.SafeJSONParser`).
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import BadRequest, RequestDataTooBig, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.utils.html import format_html

NUL = "\x00"
NUL_MESSAGE = "NUL characters are not allowed"
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith("/api/")


def body_error(exc: Exception) -> tuple[int, str, str]:
    """(status, code, message) for an exception raised while Django read or parsed a request body."""
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return 413, "too_large", f"the request body is larger than {limit} bytes"
    if isinstance(exc, MultiPartParserError):
        return 400, "parse_error", f"the multipart body could not be parsed: {exc}"
    return 400, "bad_request", str(exc) or "the request body could not be read"


def error_response(request: HttpRequest, status: int, code: str, message: str, path: str = "") -> HttpResponse:
    if is_api(request):
        errors = [{"path": path, "message": message}] if path else []
        return JsonResponse({"detail": message, "code": code, "errors": errors}, status=status)
    where = format_html(" (<code>{}</code>)", path) if path else ""
    page = format_html(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Bad request</title></head>'
        "<body><h1>Bad request</h1><p>{}{}</p><p><a href=\"/\">Back to the console</a></p></body></html>",
        message, where)
    return HttpResponse(page, status=status)


def _nul_in_pairs(pairs) -> str | None:
    for key, values in pairs:
        if NUL in key:
            return key.replace(NUL, "?")
        if any(NUL in value for value in values):
            return key
    return None


def nul_location(request: HttpRequest) -> str | None:
    """Where the request's query, headers or form carry a NUL (None: nowhere). Reads form bodies."""
    where = _nul_in_pairs(request.GET.lists())
    if where is not None:
        return where
    for name, value in request.META.items():
        if (name.startswith("HTTP_") or name in ("CONTENT_TYPE", "CONTENT_LENGTH")) and NUL in str(value):
            return f"header {name.removeprefix('HTTP_').replace('_', '-').title()}"
    for name, value in request.COOKIES.items():  # a quoted cookie may spell NUL as "\000"
        if NUL in name or NUL in value:
            return f"cookie {name.replace(NUL, '?')}"
    content_type = request.META.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
    if request.method == "POST" and content_type in FORM_TYPES:
        where = _nul_in_pairs(request.POST.lists())
        if where is not None:
            return where
        for field, files in request.FILES.lists():
            if NUL in field or any(NUL in (f.name or "") for f in files):
                return field.replace(NUL, "?")
    return None


class BadInputMiddleware:
    """400 (or 413) for input nothing downstream can store or parse; see the module's docstring."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if NUL in request.path_info:  # no object is named with a NUL: nothing lives at such an address
            if not is_api(request):
                raise Http404("there is nothing at this address")
            return error_response(request, 404, "not_found", "there is nothing at this address")
        try:
            where = nul_location(request)
        except (SuspiciousOperation, MultiPartParserError, BadRequest) as exc:
            if not is_api(request):
                raise  # Django's own 400 page
            return error_response(request, *body_error(exc))
        if where is not None:
            return error_response(request, 400, "invalid", NUL_MESSAGE, where)
        return self.get_response(request)
