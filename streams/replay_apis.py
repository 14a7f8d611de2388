"""REST API of session replays and of saving a session as an eval set (routes in streams.live_api_urls, under
``/api/live/sessions/<session>/``): list and start a session's replays, one replay with its summary, its turns
side by side (``?outcome=regressed``), cancel and resume; save the session's answered turns as an eval set.

Thin views, HackSoft style: the input serializer checks the shape and finds the named rows (a harness version or
endpoint that does not exist is a 400 on its field), one service does the rest; its located errors come back as a
400 (nothing saved), its refusals as 403, a finished replay's cancel as 409. A session or replay that does not
exist (or a replay asked for under another session) is a 404. Permissions: :mod:`streams.replay_views`.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from console import roles
from console.apis import ERRORS_READ, ERRORS_WRITE, ApiView, ErrorSerializer, Pagination, paginated_response
from harness_editor.models import HarnessVersion, Label
from streams import replay_selectors as selectors
from streams.models import LiveSession, ModelEndpoint, SessionReplay
from streams.services import session_eval_sets, session_replays as services

TAG = "session replays"


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "turns, stored, replayed, skipped, failed, changed, regressed, improved, and "
                                     "per side (original, new): fallbacks, judge_problems, turns_with_problems, "
                                     "inaccurate, accuracy_mean, effectiveness_mean, hook_failures, total_ms_mean"})
class SummaryField(serializers.JSONField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "reply, fallback, reason, version {id, slug, number}, hooks [{hook_id, kind, "
                                     "point, passed, on_fail, message, detail}], hook_failures, tools [{name, "
                                     "arguments, ok, error, fault}], skills, judgement {accuracy, effectiveness, "
                                     "accuracy_reason, effectiveness_reason, skills_ok, problems [{rule, message, "
                                     "span}]}, timings; original: spoken, rejected; new: why"})
class SideField(serializers.JSONField):
    pass


class ReplayOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    session = serializers.UUIDField(source="session_id")
    status = serializers.ChoiceField(choices=SessionReplay.Status.choices)
    stage = serializers.CharField()
    progress_done = serializers.IntegerField()
    progress_total = serializers.IntegerField()
    percent = serializers.IntegerField()
    harness = serializers.CharField(source="harness_version.harness.slug")
    harness_version = serializers.IntegerField(source="harness_version.number")
    endpoint = serializers.CharField(source="endpoint.name")
    request_model = serializers.CharField()
    sampling = serializers.DictField()
    seed = serializers.IntegerField()
    deadline_s = serializers.FloatField(allow_null=True)
    summary = SummaryField()
    error = serializers.CharField()
    resumes = serializers.IntegerField()
    created_by = serializers.CharField(source="created_by.username")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    class Meta:
        ref_name = "SessionReplay"


class ReplayTurnOutputSerializer(serializers.Serializer):
    position = serializers.IntegerField()
    turn_id = serializers.CharField()
    outcome = serializers.ChoiceField(choices=[(o, o) for o in selectors.OUTCOMES])
    comments = serializers.ListField(child=serializers.DictField())
    original = SideField()
    new = SideField()
    changed = serializers.BooleanField()
    regressed = serializers.BooleanField()
    improved = serializers.BooleanField()
    skipped = serializers.CharField()
    error = serializers.CharField()

    class Meta:
        ref_name = "SessionReplayTurn"


def _session(session_id) -> LiveSession:
    try:
        return selectors.live_session_get(session_id=session_id)
    except LiveSession.DoesNotExist:
        raise exceptions.NotFound("no such live session") from None


def _replay(session_id, replay_id) -> SessionReplay:
    try:
        return selectors.session_replay_get(session_id=session_id, replay_id=replay_id)
    except SessionReplay.DoesNotExist:
        raise exceptions.NotFound("no such replay of this session") from None


class ReplayListApi(ApiView):
    # starting also needs RUN_LIVE or RUN_EVAL: the service refuses (403) with the reason
    required_perms = {"GET": roles.VIEW_LIVE, "POST": roles.VIEW_LIVE}
    pagination_class = Pagination

    class InputSerializer(serializers.Serializer):
        harness = serializers.CharField(max_length=64, help_text="the harness's slug")
        harness_version = serializers.IntegerField(min_value=1, max_value=2**31 - 1, required=False,
                                                   help_text="a version number, drafts too (or give label)")
        label = serializers.CharField(max_length=64, required=False, help_text="a label, e.g. staging")
        endpoint = serializers.CharField(max_length=64, help_text="a model endpoint's name")
        request_model = serializers.CharField(max_length=200, required=False, allow_blank=True, default="",
                                              help_text="the model name requests carry (a loaded LoRA adapter's); "
                                                        "default the endpoint's")
        sampling = serializers.DictField(required=False, help_text="temperature (0–2), top_p (0–1), max_tokens")
        seed = serializers.IntegerField(min_value=0, max_value=2**31 - 1, default=0)
        deadline_s = serializers.FloatField(min_value=0.001, max_value=600, required=False, allow_null=True,
                                            help_text="seconds per turn (default: the harness's own)")
        name = serializers.CharField(max_length=120, required=False, allow_blank=True, default="")

        class Meta:
            ref_name = "SessionReplayStartInput"

        def validate(self, data):
            if "harness_version" in data and "label" in data:
                raise serializers.ValidationError({"label": ["give a harness version number or a label, not both"]})
            versions = HarnessVersion.objects.select_related("harness").filter(harness__slug=data["harness"])
            if not versions.exists():
                raise serializers.ValidationError({"harness": [f"no harness {data['harness']!r}"]})
            if "harness_version" in data:
                version = versions.filter(number=data["harness_version"]).first()
                if version is None:
                    raise serializers.ValidationError(
                        {"harness_version": [f"{data['harness']} has no version {data['harness_version']}"]})
            else:
                name = data.get("label", "production")
                label = Label.objects.filter(harness__slug=data["harness"], name=name).first()
                if label is None:
                    raise serializers.ValidationError({"label": [f"{data['harness']} has no label {name!r}"]})
                version = label.version
            endpoint = ModelEndpoint.objects.filter(name=data["endpoint"]).first()
            if endpoint is None:
                raise serializers.ValidationError({"endpoint": [f"no model endpoint {data['endpoint']!r}"]})
            return {**data, "harness_version": version, "endpoint": endpoint}

    @extend_schema(tags=[TAG], operation_id="session_replay_list",
                   responses={200: ReplayOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request, session_id):
        return paginated_response(view=self, queryset=selectors.session_replay_list(session=_session(session_id)),
                                  serializer_class=ReplayOutputSerializer)

    @extend_schema(tags=[TAG], operation_id="session_replay_start", request=InputSerializer,
                   description="Queue a replay of the session's answered turns on the gpu queue under another harness "
                               "version (drafts too) and/or model. Operators (RUN_LIVE) and ML staff (RUN_EVAL) may; "
                               "a bad request is a 400 naming its field, nothing saved.",
                   responses={201: ReplayOutputSerializer, **ERRORS_WRITE})
    def post(self, request, session_id):
        session = _session(session_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        replay = services.session_replay_start(
            user=request.user, session=session, harness_version=d["harness_version"], endpoint=d["endpoint"],
            request_model=d["request_model"], sampling=d.get("sampling"), seed=d["seed"],
            deadline_s=d.get("deadline_s"), name=d["name"])
        return Response(ReplayOutputSerializer(replay).data, status=status.HTTP_201_CREATED)


class ReplayDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_LIVE}

    @extend_schema(tags=[TAG], operation_id="session_replay_retrieve",
                   responses={200: ReplayOutputSerializer, **ERRORS_READ})
    def get(self, request, session_id, replay_id):
        return Response(ReplayOutputSerializer(_replay(session_id, replay_id)).data)


class ReplayTurnListApi(ApiView):
    required_perms = {"GET": roles.VIEW_LIVE}

    @extend_schema(tags=[TAG], operation_id="session_replay_turns",
                   parameters=[OpenApiParameter("outcome", str, enum=list(selectors.OUTCOMES),
                                                description="only the turns with this outcome")],
                   responses={200: ReplayTurnOutputSerializer(many=True), **ERRORS_READ, 400: ErrorSerializer})
    def get(self, request, session_id, replay_id):
        replay = _replay(session_id, replay_id)
        outcome = request.query_params.get("outcome") or None
        if outcome is not None and outcome not in selectors.OUTCOMES:
            raise exceptions.ValidationError({"outcome": [f"one of {', '.join(selectors.OUTCOMES)}"]})
        turns = selectors.replay_turn_list(replay=replay, outcome=outcome)
        return Response(ReplayTurnOutputSerializer(turns, many=True).data)


class ReplayCancelApi(ApiView):
    required_perms = {"POST": roles.VIEW_LIVE}

    @extend_schema(tags=[TAG], operation_id="session_replay_cancel", request=None,
                   description="Cancel a queued replay now, or ask a running one to stop after its current turn "
                               "(resumable). 409 once finished; only its starter or an ML lead may (403).",
                   responses={200: ReplayOutputSerializer, **ERRORS_WRITE})
    def post(self, request, session_id, replay_id):
        replay = services.session_replay_cancel(user=request.user, replay=_replay(session_id, replay_id))
        return Response(ReplayOutputSerializer(replay).data)


class ReplayResumeApi(ApiView):
    required_perms = {"POST": roles.VIEW_LIVE}

    @extend_schema(tags=[TAG], operation_id="session_replay_resume", request=None,
                   description="Queue a cancelled or failed replay again: it plays the turns not stored yet. 409 for "
                               "any other status; only its starter or an ML lead may (403).",
                   responses={200: ReplayOutputSerializer, **ERRORS_WRITE})
    def post(self, request, session_id, replay_id):
        replay = services.session_replay_resume(user=request.user, replay=_replay(session_id, replay_id))
        return Response(ReplayOutputSerializer(replay).data)


class SaveEvalSetApi(ApiView):
    # also SAVE_EVAL_CASE (and IMPORT_EVAL_SET to replace a set's cases): the service refuses (403) with the reason
    required_perms = {"POST": roles.VIEW_LIVE}

    class InputSerializer(serializers.Serializer):
        set_name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="",
                                         help_text="the T1 set (created when missing); default live-<room>-<session>")
        append = serializers.BooleanField(default=True, help_text="append to the set's latest cases (false: the "
                                                                  "new version holds only this session's)")
        turn_ids = serializers.ListField(child=serializers.CharField(max_length=64), required=False,
                                         max_length=10_000, help_text="only these turns (default: every answered "
                                                                      "turn)")
        tags = serializers.ListField(child=serializers.CharField(max_length=200), required=False, default=list,
                                     max_length=100)
        note = serializers.CharField(max_length=4000, required=False, allow_blank=True, default="")

        class Meta:
            ref_name = "SessionSaveEvalSetInput"

    class OutputSerializer(serializers.Serializer):
        eval_set = serializers.CharField(source="version.eval_set.name")
        version = serializers.IntegerField(source="version.number")
        case_count = serializers.IntegerField(source="version.case_count")
        created = serializers.BooleanField()
        cases = serializers.ListField(child=serializers.CharField())
        left_out = serializers.ListField(child=serializers.DictField())

        class Meta:
            ref_name = "SessionSaveEvalSetOutput"

    @extend_schema(tags=[TAG], operation_id="session_save_eval_set", request=InputSerializer,
                   description="Save the session's answered turns as T1 cases of an eval set (a new set, or a new "
                               "version of one), through the eval-set import; gold facts come from the recorded "
                               "tool results. 201 with the version; 200 when the set already held exactly these "
                               "cases.",
                   responses={201: OutputSerializer, 200: OutputSerializer, **ERRORS_WRITE})
    def post(self, request, session_id):
        session = _session(session_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        saved = session_eval_sets.live_session_save_as_eval_set(
            user=request.user, session=session, set_name=d["set_name"], append=d["append"],
            turn_ids=d.get("turn_ids") or None, tags=d["tags"], note=d["note"])
        return Response(self.OutputSerializer(saved).data,
                        status=status.HTTP_201_CREATED if saved["created"] else status.HTTP_200_OK)
