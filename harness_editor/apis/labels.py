"""Labels: list, move (to an approved version), roll back, and each label's history of moves."""

from __future__ import annotations

from drf_spectacular.utils import (
    extend_schema,
)
from rest_framework import exceptions, serializers
from rest_framework.response import Response

from console import roles
from console.apis import (
    ERRORS_READ,
    ERRORS_WRITE,
    ApiView,
    Pagination,
    paginated_response,
)
from console.errors import ValidationFailed
from harness_editor import selectors, services
from harness_editor.apis.common import (
    LABEL_TAG,
    CommentInputSerializer,
    LabelOutputSerializer,
    _harness,
)
from harness_editor.models import Harness, HarnessVersion


def _label(harness: Harness, name: str):
    label = selectors.label_list(harness=harness).filter(name=name).first()
    if label is None:
        raise exceptions.NotFound(f"{harness.slug} has no label '{name}'")
    return label


class LabelListApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS}

    @extend_schema(tags=[LABEL_TAG], operation_id="label_list",
                   responses={200: LabelOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request, slug: str):
        return Response(LabelOutputSerializer(selectors.label_list(harness=_harness(slug)), many=True).data)


class LabelDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS, "PUT": roles.MOVE_LABEL}

    class InputSerializer(serializers.Serializer):
        version = serializers.IntegerField(min_value=1, help_text="number of an approved version")
        comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)

        class Meta:
            ref_name = "LabelMoveInput"

    @extend_schema(tags=[LABEL_TAG], operation_id="label_retrieve",
                   responses={200: LabelOutputSerializer, **ERRORS_READ})
    def get(self, request, slug: str, name: str):
        return Response(LabelOutputSerializer(_label(_harness(slug), name)).data)

    @extend_schema(tags=[LABEL_TAG], operation_id="label_move", request=InputSerializer,
                   description="Point the label at an approved version (creating the label on first use).",
                   responses={200: LabelOutputSerializer, **ERRORS_WRITE})
    def put(self, request, slug: str, name: str):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        harness = _harness(slug)
        try:
            version = selectors.version_get(harness=harness, number=serializer.validated_data["version"])
        except HarnessVersion.DoesNotExist:
            raise ValidationFailed("no such version", errors=[
                {"path": "version", "message": f"{slug} has no version {serializer.validated_data['version']}"}
            ]) from None
        label = services.label_move(user=request.user, harness=harness, name=name, version=version,
                                    comment=serializer.validated_data["comment"])
        return Response(LabelOutputSerializer(label).data)


class LabelRollbackApi(ApiView):
    required_perms = {"POST": roles.MOVE_LABEL}

    @extend_schema(tags=[LABEL_TAG], operation_id="label_rollback", request=CommentInputSerializer,
                   description="Move the label back to where it pointed before its latest move.",
                   responses={200: LabelOutputSerializer, **ERRORS_WRITE})
    def post(self, request, slug: str, name: str):
        serializer = CommentInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        harness = _harness(slug)
        _label(harness, name)
        label = services.label_rollback(user=request.user, harness=harness, name=name,
                                        comment=serializer.validated_data["comment"])
        return Response(LabelOutputSerializer(label).data)


class LabelHistoryApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS}
    pagination_class = Pagination

    class OutputSerializer(serializers.Serializer):
        at = serializers.DateTimeField()
        actor = serializers.CharField(source="actor.username", allow_null=True, default=None)
        from_state = serializers.CharField()
        to_state = serializers.CharField()
        comment = serializers.CharField()
        rollback = serializers.SerializerMethodField()

        class Meta:
            ref_name = "LabelMove"

        def get_rollback(self, event) -> bool:
            return bool(event.data.get("rollback"))

    @extend_schema(tags=[LABEL_TAG], operation_id="label_history",
                   responses={200: OutputSerializer(many=True), **ERRORS_READ})
    def get(self, request, slug: str, name: str):
        harness = _harness(slug)
        _label(harness, name)
        return paginated_response(view=self, queryset=selectors.label_history(harness=harness, name=name),
                                  serializer_class=self.OutputSerializer)
