"""REST plumbing shared by every app's ``apis.py``, plus the audit timeline API.

- :class:`ApiView` is the base of every console API view: token or session auth (anonymous callers get
  401 with ``WWW-Authenticate: Token``), and a role permission per HTTP method from ``required_perms``
  (``user.has_perm(roles.X)``, the same question views and services ask).
- :func:`exception_handler` turns every error into one body shape,
  ``{"detail": message, "code": code, "errors": [{"path": ..., "message": ...}]}``: domain errors from
  :mod:`console.errors` (with their own status), manifest errors (400 ``invalid_manifest``), serializer
  errors (400 ``invalid``, one entry per field), a body Django cannot read (413 ``too_large``, 400
  ``parse_error``) and DRF's own 401/403/404/405. Bad input is never a 500 (see also console.middleware and
  console.parsing).
"""

from __future__ import annotations

from django.core.exceptions import BadRequest, ObjectDoesNotExist, SuspiciousOperation
from django.http import JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from console import roles
from console.errors import DomainError, EditConflict
from console.middleware import body_error
from harness_editor.schemas import ManifestError
from console.selectors import audit_list


# --- errors -------------------------------------------------------------------------------------------

def _flatten(detail, path: str = "") -> list[dict]:
    """DRF's nested ``{"field": ["msg"], "obj": {"sub": [...]}}`` -> ``[{"path": "obj.sub", "message": ...}]``."""
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            key = "" if key == "non_field_errors" else str(key)
            out += _flatten(value, f"{path}.{key}" if path and key else (key or path))
        return out
    if isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            return [{"path": path, "message": str(item)} for item in detail]
        out = []
        for index, item in enumerate(detail):
            if item:  # DRF uses {} for list children without errors
                out += _flatten(item, f"{path}[{index}]")
        return out
    return [{"path": path, "message": str(detail)}]


def _body(detail: str, code: str, errors: list[dict] | None = None, **extra) -> dict:
    return {"detail": detail, "code": code, "errors": errors or [], **extra}


def exception_handler(exc, context):
    if isinstance(exc, DomainError):
        extra = {}
        if isinstance(exc, EditConflict):
            extra["current_lock_version"] = exc.current_lock_version
        return Response(_body(exc.message, exc.code, list(exc.errors), **extra), status=exc.status_code)
    if isinstance(exc, ManifestError):
        errors = [{"path": e.path, "message": e.message} for e in exc.errors]
        count = len(errors)
        return Response(
            _body(f"the manifest is invalid ({count} problem{'s' if count != 1 else ''})", "invalid_manifest",
                  errors),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, ObjectDoesNotExist):  # a selector's .get() that a view did not translate itself
        exc = exceptions.NotFound()
    if isinstance(exc, (SuspiciousOperation, MultiPartParserError, BadRequest)):  # Django reading the body
        status_code, code, message = body_error(exc)  # e.g. 413 too_large past DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response(_body(message, code), status=status_code)
    if isinstance(exc, exceptions.ValidationError):
        errors = _flatten(exc.detail)
        return Response(_body("the request is invalid", "invalid", errors), status=exc.status_code)

    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.APIException):
        detail = exc.detail
        code = exc.get_codes()
        if isinstance(detail, (list, dict)):  # not produced by DRF's own 4xx exceptions, but be safe
            response.data = _body("the request failed", "error", _flatten(detail))
        else:
            response.data = _body(str(detail), code if isinstance(code, str) else "error")
    return response


@csrf_exempt  # nothing is changed here; a POST must get this 404, not the CSRF failure page
def api_not_found(request, *args, **kwargs) -> JsonResponse:
    """Any /api/ address no route matches (an id that is not a UUID, a slug with spaces, a typo): the API's 404
    body, not the HTML page."""
    return JsonResponse(_body("there is no API endpoint at this address", "not_found"), status=404)


class ErrorItemSerializer(serializers.Serializer):
    path = serializers.CharField()
    message = serializers.CharField()

    class Meta:
        ref_name = "ErrorItem"


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
    code = serializers.CharField()
    errors = ErrorItemSerializer(many=True)

    class Meta:
        ref_name = "Error"


class ConflictSerializer(ErrorSerializer):
    current_lock_version = serializers.IntegerField(required=False)

    class Meta:
        ref_name = "Conflict"


def document_bad_input(result: dict, generator, request, public) -> dict:
    """drf-spectacular postprocessing hook: the answers every operation can give to malformed input, whatever its
    own ``extend_schema`` lists. An operation with query parameters or a body may answer 400 (console.middleware:
    a NUL character; console.parsing: JSON too deep or not JSON); one with a body may answer 413 (over
    ``DATA_UPLOAD_MAX_MEMORY_SIZE``) and 415 (a content type it does not parse). All with the error body."""
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            has_query = any(p.get("in") == "query" for p in operation.get("parameters", []))
            has_body = "requestBody" in operation
            if has_query or has_body:
                responses.setdefault("400", {"content": error, "description": "malformed input"})
            if has_body:
                responses.setdefault("413", {"content": error, "description": "the body is too large"})
                responses.setdefault("415", {"content": error, "description": "a body type other than those listed"})
    return result


# Standard error responses for extend_schema(responses=...).
ERRORS_READ = {401: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer}
ERRORS_WRITE = {**ERRORS_READ, 400: ErrorSerializer, 409: ConflictSerializer}


# --- views ------------------------------------------------------------------------------------------------

class RolePermission(BasePermission):
    """Authenticated, and holding the permission the view names for this method in ``required_perms``.

    A method the view does not handle needs only authentication, so the caller gets the honest 405."""

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        method = request.method.upper()
        if method in ("HEAD", "OPTIONS"):
            method = "GET"
        perm = view.required_perms.get(method)
        return perm is None or request.user.has_perm(perm)


class ApiView(APIView):
    # Token first, so an anonymous caller is told how to authenticate (401 + WWW-Authenticate: Token).
    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [RolePermission]
    required_perms: dict[str, str] = {}


class Pagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 500


def paginated_response(*, view: APIView, queryset, serializer_class, transform=None) -> Response:
    """Paginate ``queryset`` with :class:`Pagination` (``?limit=&offset=``) and serialize the page.

    ``transform`` may decorate the page's objects (e.g. attach labels) before serializing."""
    paginator = Pagination()
    page = paginator.paginate_queryset(queryset, view.request, view=view)
    if transform is not None:
        transform(page)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)


# --- audit ----------------------------------------------------------------------------------------------

class AuditListApi(ApiView):
    """The append-only audit timeline, newest first."""

    required_perms = {"GET": roles.VIEW_AUDIT}
    pagination_class = Pagination

    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        at = serializers.DateTimeField()
        actor = serializers.CharField(source="actor.username", allow_null=True, default=None)
        action = serializers.CharField()
        scope = serializers.CharField()
        target = serializers.CharField()
        from_state = serializers.CharField()
        to_state = serializers.CharField()
        comment = serializers.CharField()
        data = serializers.JSONField()

        class Meta:
            ref_name = "AuditEvent"

    @extend_schema(
        operation_id="audit_list",
        parameters=[OpenApiParameter("scope", OpenApiTypes.STR,
                                     description="only this scope, e.g. harness:glow-gadget")],
        responses={200: OutputSerializer(many=True), 401: ErrorSerializer, 403: ErrorSerializer},
    )
    def get(self, request):
        scope = request.query_params.get("scope") or None
        return paginated_response(view=self, queryset=audit_list(scope=scope), serializer_class=self.OutputSerializer)
