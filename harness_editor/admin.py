"""Admin for the registry. Writes that carry rules (transitions, label moves) belong to the console's
services, so the admin shows versions and labels read-only and only lets harness metadata be edited."""

from django.contrib import admin

from console.admin import ReadOnlyAdmin
from harness_editor.models import Harness, HarnessVersion, Label


@admin.register(Harness)
class HarnessAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_by", "created_at")
    search_fields = ("slug", "name")
    readonly_fields = ("slug", "created_by", "created_at")

    def has_add_permission(self, request):
        return False  # a harness is born with its first version: use the console

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(HarnessVersion)
class HarnessVersionAdmin(ReadOnlyAdmin):
    list_display = ("harness", "number", "status", "author", "content_hash", "created_at")
    list_filter = ("status", "harness")
    search_fields = ("harness__slug", "change_note", "content_hash")
    list_select_related = ("harness", "author")

    def get_queryset(self, request):
        return super().get_queryset(request).defer("manifest_json")


@admin.register(Label)
class LabelAdmin(ReadOnlyAdmin):
    list_display = ("harness", "name", "version", "moved_by", "moved_at")
    list_select_related = ("harness", "version", "moved_by")
