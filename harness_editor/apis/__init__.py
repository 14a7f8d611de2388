"""REST API of the harness registry (mounted at /api/ by console.api_urls), one module per part of the registry:
:mod:`.harnesses`, :mod:`.versions`, :mod:`.review` (submit, gate, approve with the review checklist, reject),
:mod:`.labels`; what they share is in :mod:`.common`.

Thin views, HackSoft style: parse the input (nested ``InputSerializer`` + the manifest parser), let
:class:`console.apis.RolePermission` check the role for the method, call one service or selector, render
with an output serializer. Rules about the particular user and object (author-only edits, four eyes, only
approved versions carry labels, the review checklist) live in the services; their errors become 4xx bodies in
:func:`console.apis.exception_handler`.

The names are re-exported here so ``from harness_editor import apis`` (console.api_urls) and
``from harness_editor.apis import ...`` (import_apis, contract_apis) keep working.
"""

from harness_editor.apis.common import (
    HARNESS_TAG,
    LABEL_TAG,
    VERSION_TAG,
    CommentInputSerializer,
    HarnessOutputSerializer,
    LabelOutputSerializer,
    ManifestField,
    ManifestFieldExtension,
    ManifestInputSerializer,
    VersionDetailOutputSerializer,
    VersionOutputSerializer,
    _harness,
    _manifest_from,
    _version,
    _version_response,
    _with_labels,
)
from harness_editor.apis.harnesses import (
    HarnessDetailApi,
    HarnessListCreateApi,
    ValidateApi,
)
from harness_editor.apis.labels import (
    LabelDetailApi,
    LabelHistoryApi,
    LabelListApi,
    LabelRollbackApi,
    _label,
)
from harness_editor.apis.review import (
    ApproveInputSerializer,
    FlippedCaseSerializer,
    GateMetricSerializer,
    GateOutputSerializer,
    GateRuleSerializer,
    GateScoreSerializer,
    GateSetSerializer,
    ReviewChecklistApi,
    VersionApproveApi,
    VersionGateApi,
    VersionRejectApi,
    VersionSubmitApi,
)
from harness_editor.apis.versions import (
    DEMO_ROOM,
    ChangeOutputSerializer,
    HarnessDiffApi,
    VersionDetailApi,
    VersionExportApi,
    VersionListCreateApi,
    VersionRenderApi,
    demo_room,
)

__all__ = [
    "DEMO_ROOM", "HARNESS_TAG", "LABEL_TAG", "VERSION_TAG", "ApproveInputSerializer", "ChangeOutputSerializer",
    "CommentInputSerializer", "FlippedCaseSerializer", "GateMetricSerializer", "GateOutputSerializer",
    "GateRuleSerializer", "GateScoreSerializer", "GateSetSerializer", "HarnessDetailApi", "HarnessDiffApi",
    "HarnessListCreateApi", "HarnessOutputSerializer", "LabelDetailApi", "LabelHistoryApi", "LabelListApi",
    "LabelOutputSerializer", "LabelRollbackApi", "ManifestField", "ManifestFieldExtension",
    "ManifestInputSerializer", "ReviewChecklistApi", "ValidateApi", "VersionApproveApi", "VersionDetailApi",
    "VersionDetailOutputSerializer", "VersionExportApi", "VersionGateApi", "VersionListCreateApi",
    "VersionOutputSerializer", "VersionRejectApi", "VersionRenderApi", "VersionSubmitApi", "_harness", "_label",
    "_manifest_from", "_version", "_version_response", "_with_labels", "demo_room",
]
