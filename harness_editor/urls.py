"""Harness pages (mounted at "harnesses/" by console.urls)."""

from django.urls import path

from harness_editor import editor_views, import_views, review_views, views

app_name = "harness_editor"

H = "<slug:slug>/"
V = H + "v<int:number>/"

urlpatterns = [
    path("", views.harness_list, name="list"),
    path("new/", views.harness_new, name="new"),
    path("review/checklist/", review_views.review_checklist, name="review_checklist"),
    path(H, views.harness_detail, name="detail"),
    path(H + "diff/", views.version_diff, name="diff"),
    path(H + "labels/move/", views.label_move, name="label_move"),
    path(H + "labels/<str:name>/rollback/", views.label_rollback, name="label_rollback"),
    path(V, views.version_detail, name="version"),
    path(V + "edit/", editor_views.version_edit, name="edit"),
    path(V + "validate/", editor_views.version_validate, name="validate"),
    path(V + "import-tools/", import_views.version_import_tools, name="import_tools"),
    path(V + "submit/", views.version_submit, name="submit"),
    path(V + "discard/", views.version_discard, name="discard"),
    path(V + "approve/", views.version_approve, name="approve"),
    path(V + "reject/", views.version_reject, name="reject"),
    path(V + "comments/", review_views.review_comment_create, name="review_comment"),
    path(V + "comments/<int:comment_id>/resolve/", review_views.review_comment_resolve, name="review_comment_resolve"),
    path(V + "comments/<int:comment_id>/reopen/", review_views.review_comment_reopen, name="review_comment_reopen"),
    path(V + "new-draft/", views.version_new_draft, name="new_draft"),
    path(V + "export.<str:fmt>", views.version_export, name="export"),
]
