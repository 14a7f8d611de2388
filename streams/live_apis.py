"""REST API of live sessions (mounted at /api/ by console.api_urls through streams.live_api_urls).

For people (token or session auth, console roles): list and read sessions (VIEW_LIVE); start and end one, create,
list and revoke its tokens (RUN_LIVE).

For the platform a session's comments come from (no console user):
- ``POST live/sessions/<id>/comments`` with ``Authorization: Bearer <ingest token>`` (:class:`LiveTokenAuthentication`):
  401 without a token or with an unknown one, 403 for a revoked one or one of another scope or session, 404 for
  no such session, 409 once it ended; 202 with what became of each comment, after they are stored.
- ``POST live/sessions/<id>/webhook``, HMAC-signed with the session's webhook key (headers ``X-Hat-Timestamp``:
  Unix seconds, ``X-Hat-Signature``: ``sha256=`` + hex HMAC-SHA256(key, timestamp + "." + raw body)); 401 for a
  missing, stale (more than 300 s off) or wrong signature, 409 for a signed request taken before (a replay inside
  the window), 415 for a body that is not JSON. The body is parsed only once the signature holds.

Past the token's or the session's limit of new comments a minute (``handling.per_token_per_minute``,
``per_session_per_minute``) a request is refused whole: 429 with ``Retry-After`` (and ``retry_after_s``, ``limit``
in the body), nothing stored.

A body is one comment (``{"id", "viewer_id", "viewer", "text", "ts"}``) or a batch (``{"comments": [...]}``, at
most 100); a bad one is a 400 naming each problem's path (``comments[2].text``) and nothing of it is stored.
"""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser
from django.http.request import RawPostDataException
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from console import jsonsafe, roles
from console.apis import ERRORS_READ, ERRORS_WRITE, ApiView, ErrorSerializer, Pagination, paginated_response
from console.errors import ValidationFailed
from streams import live_selectors as selectors
from streams.live.schemas import MAX_BATCH, IngestInvalid, parse_ingest
from streams.models import Deployment, LiveRoom, LiveSession, LiveToken
from streams.services import live_ingest_guards as guards
from streams.services import live_sessions as services

TAG = "live sessions"
INGEST_TAG = "live ingest"
RETRY_AFTER = OpenApiParameter("Retry-After", OpenApiTypes.INT, OpenApiParameter.HEADER, response=[429],
                               description="seconds until the refused request fits the limit")


def _session(session_id) -> LiveSession:
    try:
        return selectors.live_session_get(session_id=session_id)
    except LiveSession.DoesNotExist:
        raise exceptions.NotFound(f"no live session {session_id}") from None


def _refused(exc: guards.IngestLimited) -> Response:
    """429 with Retry-After: answered, not raised, so the refusal's count on the session is kept."""
    return Response(guards.refusal_message(exc), status=status.HTTP_429_TOO_MANY_REQUESTS,
                    headers={"Retry-After": exc.retry_after_header})


def _invalid(exc: IngestInvalid) -> ValidationFailed:
    return ValidationFailed("the comments are invalid", errors=[{"path": e.path, "message": e.message}
                                                                for e in exc.errors])


# --- authentication of the platform -------------------------------------------------------------------------------


class TokenHolder(AnonymousUser):
    """Whoever presents a live token: authenticated for that token's session and scope, no console role."""

    def __init__(self, token: LiveToken):
        super().__init__()
        self.token = token

    @property
    def is_anonymous(self) -> bool:
        return False

    @property
    def is_authenticated(self) -> bool:
        return True

    def __str__(self) -> str:
        return f"live token {self.token.prefix}…"


class LiveTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer <token>``: a live session's token (request.auth). Unknown → 401; whether it may
    act here (scope, session, revoked) is the view's question (403)."""

    keyword = b"bearer"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("send 'Authorization: Bearer <token>'")
        try:
            secret = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("unknown token") from None
        token = selectors.live_token_by_secret(secret)
        if token is None:
            raise exceptions.AuthenticationFailed("unknown token")
        return TokenHolder(token), token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="live"'


class LiveTokenScheme(OpenApiAuthenticationExtension):
    target_class = "streams.live_apis.LiveTokenAuthentication"
    name = "liveToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "a live session's token (POST /api/live/sessions/{id}/tokens/), scope 'ingest'"}


class HasLiveToken(BasePermission):
    def has_permission(self, request, view) -> bool:
        return isinstance(request.auth, LiveToken)


# --- serializers --------------------------------------------------------------------------------------------------

# Named enum components: several "status", "feed" and "scope" fields with other values exist in the API.
def _named_choice(choices, name: str):
    @extend_schema_field(serializers.ChoiceField(choices=choices), component_name=name)
    class Field(serializers.ChoiceField):
        def __init__(self, **kwargs):
            super().__init__(choices=choices, **kwargs)

    Field.__name__ = Field.__qualname__ = f"{name}Field"
    return Field


SessionStatusField = _named_choice(LiveSession.Status.choices, "LiveSessionStatus")
FeedField = _named_choice(LiveSession.Feed.choices, "LiveFeed")
TokenScopeField = _named_choice(LiveToken.Scope.choices, "LiveTokenScope")
CommentOutcomeField = _named_choice([(s, s) for s in ("queued", "duplicate", "rate_limited", "filtered")],
                                    "LiveCommentOutcome")



class CommentInSerializer(serializers.Serializer):
    id = serializers.CharField(required=False, max_length=200,
                               help_text="the platform's id of the comment (also accepted as external_id): the "
                                         "same id again is answered 'duplicate' and stored once")
    viewer_id = serializers.CharField(max_length=200)
    viewer = serializers.CharField(required=False, max_length=120, help_text="display name (default: viewer_id)")
    text = serializers.CharField(max_length=4000)
    ts = serializers.DateTimeField(required=False, help_text="when the viewer sent it (ISO 8601 or Unix seconds)")

    class Meta:
        ref_name = "LiveCommentIn"


class CommentBatchSerializer(serializers.Serializer):
    comments = CommentInSerializer(many=True, help_text=f"1 to {MAX_BATCH} comments (or send one comment object "
                                                        "on its own)")

    class Meta:
        ref_name = "LiveCommentBatch"


class CommentResultSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="the comment's place in the request")
    external_id = serializers.CharField(help_text="its id, or the key derived when it came without one")
    comment_id = serializers.IntegerField(help_text="the stored comment (for a duplicate: the first one)")
    status = CommentOutcomeField()
    reason = serializers.CharField()
    priority = serializers.IntegerField(allow_null=True, help_text="higher is answered first")

    class Meta:
        ref_name = "LiveCommentResult"


class IngestResultSerializer(serializers.Serializer):
    results = CommentResultSerializer(many=True)

    class Meta:
        ref_name = "LiveIngestResult"


class RefusedSerializer(ErrorSerializer):
    limit = serializers.ChoiceField(choices=["token", "session"], help_text="whose limit of new comments a minute")
    retry_after_s = serializers.FloatField(help_text="seconds until the request fits (also the Retry-After header)")

    class Meta:
        ref_name = "LiveIngestRefused"


class SessionSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    title = serializers.CharField()
    status = SessionStatusField()
    room = serializers.CharField(source="room.slug")
    deployment = serializers.CharField(source="deployment.name")
    revision_in_force = serializers.IntegerField(source="revision_in_force.number", allow_null=True, default=None)
    version_in_force = serializers.SerializerMethodField()
    feed = FeedField()
    feed_config = serializers.JSONField()
    handling = serializers.JSONField(help_text="streams.live.schemas.CommentHandling")
    muted = serializers.BooleanField()
    approve_before_speak = serializers.BooleanField()
    started_by = serializers.CharField(source="started_by.username")
    started_at = serializers.DateTimeField()
    ended_by = serializers.CharField(source="ended_by.username", allow_null=True, default=None)
    ended_at = serializers.DateTimeField(allow_null=True)
    last_seq = serializers.IntegerField(help_text="the last event's seq (watch from ?after=<seq>)")

    class Meta:
        ref_name = "LiveSession"

    def get_version_in_force(self, obj) -> str | None:
        v = obj.version_in_force
        return f"{v.harness.slug}@{v.number}" if v is not None else None


class SessionDetailSerializer(SessionSerializer):
    comments = serializers.DictField(source="comment_counts", child=serializers.IntegerField(),
                                     help_text="comments per status")
    runner_id = serializers.CharField()
    runner_beat_at = serializers.DateTimeField(allow_null=True)
    comments_refused = serializers.IntegerField(help_text="comments the per-token and per-session limits refused "
                                                          "(not stored; the sender was told to retry)")

    class Meta:
        ref_name = "LiveSessionDetail"


class SessionStartedSerializer(SessionDetailSerializer):
    webhook_secret = serializers.CharField(required=False, help_text="the webhook feed's HMAC key: shown only here")

    class Meta:
        ref_name = "LiveSessionStarted"


class TokenSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    scope = TokenScopeField()
    prefix = serializers.CharField(help_text="its first characters, to tell tokens apart")
    created_by = serializers.CharField(source="created_by.username")
    created_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)

    class Meta:
        ref_name = "LiveToken"


class TokenCreatedSerializer(TokenSerializer):
    token = serializers.CharField(help_text="the bearer secret: shown only here")

    class Meta:
        ref_name = "LiveTokenCreated"


def _detail(session: LiveSession) -> dict:
    session.comment_counts = selectors.live_comment_counts(session_id=session.pk)
    return SessionDetailSerializer(session).data


# --- people: sessions and tokens ----------------------------------------------------------------------------------


class SessionListApi(ApiView):
    required_perms = {"GET": roles.VIEW_LIVE, "POST": roles.RUN_LIVE}
    pagination_class = Pagination

    class InputSerializer(serializers.Serializer):
        room = serializers.SlugField(help_text="the live room's slug")
        deployment = serializers.SlugField(help_text="the deployment's name: its approved revision is served")
        title = serializers.CharField(max_length=120)
        feed = FeedField(default=LiveSession.Feed.API)
        feed_config = serializers.JSONField(required=False, default=dict,
                                            help_text='replay: {"scenario": slug} or {"session": id}, "speed" '
                                                      "(times real speed, up to 1000), \"seed\"; others: {}")
        handling = serializers.JSONField(required=False, default=dict,
                                         help_text="batch_window_s, max_comments_per_turn, per_viewer_per_minute, "
                                                   "per_token_per_minute, per_session_per_minute, max_age_s, "
                                                   "max_chars (streams.live.schemas.CommentHandling)")

        class Meta:
            ref_name = "LiveSessionStartInput"

    @extend_schema(tags=[TAG], operation_id="live_session_list",
                   parameters=[OpenApiParameter("status", OpenApiTypes.STR, enum=LiveSession.Status.values)],
                   responses={200: SessionSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        status_ = request.query_params.get("status") or None
        if status_ is not None and status_ not in LiveSession.Status.values:
            raise ValidationFailed("the filter is invalid", errors=[
                {"path": "status", "message": f"one of {', '.join(LiveSession.Status.values)}"}])
        return paginated_response(view=self, queryset=selectors.live_session_list(status=status_),
                                  serializer_class=SessionSerializer)

    @extend_schema(tags=[TAG], operation_id="live_session_start", request=InputSerializer,
                   description="Start a live session of a room on a deployment (its approved revision, the label "
                               "resolved now). 409 when the deployment has nothing approved or no endpoint serves "
                               "it; 400 naming each bad field (feed_config.speed, handling.max_age_s). The webhook "
                               "feed's HMAC key is in this answer only.",
                   responses={201: SessionStartedSerializer, **ERRORS_WRITE})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        errors = []
        room = LiveRoom.objects.filter(slug=d["room"]).first()
        if room is None:
            errors.append({"path": "room", "message": f"no live room {d['room']!r}"})
        deployment = Deployment.objects.filter(name=d["deployment"]).first()
        if deployment is None:
            errors.append({"path": "deployment", "message": f"no deployment {d['deployment']!r}"})
        if errors:
            raise ValidationFailed("the live session is invalid", errors=errors)
        session = services.live_session_start(user=request.user, room=room, deployment=deployment, title=d["title"],
                                              feed=d["feed"], feed_config=d["feed_config"], handling=d["handling"])
        data = _detail(_session(session.pk))
        if session.webhook_secret:
            data["webhook_secret"] = session.webhook_secret
        return Response(data, status=status.HTTP_201_CREATED)


class SessionDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_LIVE}

    @extend_schema(tags=[TAG], operation_id="live_session_retrieve",
                   responses={200: SessionDetailSerializer, **ERRORS_READ})
    def get(self, request, session_id):
        return Response(_detail(_session(session_id)))


class SessionEndApi(ApiView):
    required_perms = {"POST": roles.RUN_LIVE}

    class InputSerializer(serializers.Serializer):
        reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=200)

        class Meta:
            ref_name = "LiveSessionEndInput"

    @extend_schema(tags=[TAG], operation_id="live_session_end", request=InputSerializer,
                   description="End the session: comments still queued expire, a turn in flight finishes, the "
                               "runner stops. 409 once ended.",
                   responses={200: SessionDetailSerializer, **ERRORS_WRITE})
    def post(self, request, session_id):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.live_session_end(user=request.user, session=_session(session_id),
                                  reason=serializer.validated_data["reason"])
        return Response(_detail(_session(session_id)))


class TokenListApi(ApiView):
    required_perms = {"GET": roles.RUN_LIVE, "POST": roles.RUN_LIVE}

    class InputSerializer(serializers.Serializer):
        scope = TokenScopeField(help_text="ingest: post comments (REST, WebSocket); overlay: read the subtitle "
                                          "overlay")

        class Meta:
            ref_name = "LiveTokenCreateInput"

    @extend_schema(tags=[TAG], operation_id="live_token_list", responses={200: TokenSerializer(many=True),
                                                                         **ERRORS_READ})
    def get(self, request, session_id):
        session = _session(session_id)
        return Response(TokenSerializer(selectors.live_tokens_of(session_id=session.pk), many=True).data)

    @extend_schema(tags=[TAG], operation_id="live_token_create", request=InputSerializer,
                   description="A bearer token for this session and one scope. The secret is in this answer only "
                               "(only its hash is stored). 409 once the session ended.",
                   responses={201: TokenCreatedSerializer, **ERRORS_WRITE})
    def post(self, request, session_id):
        session = _session(session_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token, secret = services.live_token_create(user=request.user, session=session,
                                                   scope=serializer.validated_data["scope"])
        return Response({**TokenSerializer(token).data, "token": secret}, status=status.HTTP_201_CREATED)


class TokenRevokeApi(ApiView):
    required_perms = {"POST": roles.RUN_LIVE}

    @extend_schema(tags=[TAG], operation_id="live_token_revoke", request=None,
                   description="From now on the token is refused (403). 409 if it already was revoked.",
                   responses={200: TokenSerializer, **ERRORS_WRITE})
    def post(self, request, session_id, token_id):
        session = _session(session_id)
        token = selectors.live_tokens_of(session_id=session.pk).filter(pk=token_id).first()
        if token is None:
            raise exceptions.NotFound(f"no token {token_id} in this session")
        return Response(TokenSerializer(services.live_token_revoke(user=request.user, token=token)).data)


# --- the platform: comments in ------------------------------------------------------------------------------------


class CommentIngestApi(APIView):
    authentication_classes = [LiveTokenAuthentication]
    permission_classes = [HasLiveToken]

    @extend_schema(tags=[INGEST_TAG], operation_id="live_comments_ingest", request=CommentBatchSerializer,
                   auth=[{"liveToken": []}], parameters=[RETRY_AFTER],
                   description="Viewer comments in: one comment object, or {\"comments\": [...]}. Each is stored "
                               "before this answers, with what became of it: queued, duplicate (its id came "
                               "before), rate_limited (the viewer sends too fast), filtered (the viewer-input hook "
                               "of the harness in force, or too long). 401 without a known token; 403 for a "
                               "revoked one, one of another session or not of scope 'ingest'; 409 once the session "
                               "ended; 429 with Retry-After past the token's or the session's limit of new comments "
                               "a minute (nothing of the request stored: send it again then).",
                   responses={202: IngestResultSerializer, 400: ErrorSerializer, 401: ErrorSerializer,
                              403: ErrorSerializer, 404: ErrorSerializer, 409: ErrorSerializer,
                              429: RefusedSerializer})
    def post(self, request, session_id):
        session = _session(session_id)
        services.live_token_check(request.auth, session_id=session.pk, scope=LiveToken.Scope.INGEST)
        try:
            comments = parse_ingest(request.data)
        except IngestInvalid as exc:
            raise _invalid(exc) from None
        try:
            results = services.live_comments_ingest(session=session, comments=comments, source="api",
                                                    token=request.auth)
        except guards.IngestLimited as exc:
            return _refused(exc)
        return Response({"results": results}, status=status.HTTP_202_ACCEPTED)


class WebhookApi(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(tags=[INGEST_TAG], operation_id="live_webhook", request=CommentBatchSerializer, auth=[],
                   parameters=[
                       OpenApiParameter("X-Hat-Timestamp", OpenApiTypes.STR, OpenApiParameter.HEADER, required=True,
                                        description="Unix seconds when the request was signed (within 300 s)"),
                       OpenApiParameter("X-Hat-Signature", OpenApiTypes.STR, OpenApiParameter.HEADER, required=True,
                                        description="sha256=<hex HMAC-SHA256(webhook key, timestamp + '.' + raw "
                                                    "body)>"), RETRY_AFTER],
                   description="A platform pushes comments, signed with the session's webhook key (given once when "
                               "the session started with feed 'webhook'). 401 for a missing, stale or wrong "
                               "signature (nothing is read then), 404 for a session without a webhook feed, 409 "
                               "(code 'replayed') for a signed request taken before (each is taken once inside the "
                               "300 s window: sign a retry again), 415 for a body that is not JSON; otherwise as "
                               "POST .../comments (429 past the session's limit).",
                   responses={202: IngestResultSerializer, 400: ErrorSerializer, 401: ErrorSerializer,
                              404: ErrorSerializer, 409: ErrorSerializer, 413: ErrorSerializer,
                              415: ErrorSerializer, 429: RefusedSerializer})
    def post(self, request, session_id):
        session = _session(session_id)
        if session.feed != LiveSession.Feed.WEBHOOK or not session.webhook_secret:
            raise exceptions.NotFound("this live session takes no webhook")
        media_type = (request.content_type or "").split(";")[0].strip().lower()
        if media_type and media_type != "application/json" and not media_type.endswith("+json"):
            # a form or multipart body is parsed by the middleware (console.middleware): its raw bytes, which
            # the signature covers, are gone, so it can never verify
            raise exceptions.UnsupportedMediaType(media_type, detail="the webhook takes a JSON body "
                                                                     "(Content-Type: application/json)")
        try:
            body = request.body  # the raw bytes, as signed (413 past DATA_UPLOAD_MAX_MEMORY_SIZE)
        except RawPostDataException:
            raise exceptions.UnsupportedMediaType(media_type, detail="the webhook takes a JSON body") from None
        timestamp, signature = request.headers.get("X-Hat-Timestamp"), request.headers.get("X-Hat-Signature")
        services.webhook_signature_check(secret=session.webhook_secret, body=body, timestamp=timestamp,
                                         signature=signature)
        try:
            data = jsonsafe.loads(body.decode("utf-8"))
        except jsonsafe.JsonRejected as exc:
            raise ValidationFailed("the body is invalid", errors=[{"path": exc.path, "message": exc.message}]) \
                from None
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
        try:
            comments = parse_ingest(data)
        except IngestInvalid as exc:
            raise _invalid(exc) from None
        try:
            results = services.live_comments_ingest(session=session, comments=comments, source="webhook",
                                                    signed=(signature.strip(), int(timestamp)))
        except guards.IngestLimited as exc:
            return _refused(exc)
        return Response({"results": results}, status=status.HTTP_202_ACCEPTED)


__all__ = ["CommentIngestApi", "LiveTokenAuthentication", "SessionDetailApi", "SessionEndApi", "SessionListApi",
           "TokenListApi", "TokenRevokeApi", "WebhookApi"]
