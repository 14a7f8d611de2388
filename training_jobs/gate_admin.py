"""Admin of the approval gate's policy: administrators set it here (a policy with its required sets and
thresholds inline); every save and delete is recorded on the audit timeline with the policy before and after."""

from __future__ import annotations

from django.contrib import admin

from training_jobs.gate_models import GatePolicy, GateRequirement
from training_jobs.gate_services import gate_policy_recorded, policy_snapshot


class GateRequirementInline(admin.TabularInline):
    model = GateRequirement
    extra = 1
    fields = ("eval_set", "metric", "minimum", "max_drop")


@admin.register(GatePolicy)
class GatePolicyAdmin(admin.ModelAdmin):
    list_display = ("__str__", "enabled", "endpoint", "k", "seed", "regression_needs_ci", "updated_by", "updated_at")
    list_filter = ("enabled",)
    list_select_related = ("harness", "endpoint", "updated_by")
    fields = ("harness", "enabled", "endpoint", "k", "seed", "regression_needs_ci", "note", "updated_by",
              "updated_at")
    readonly_fields = ("updated_by", "updated_at")
    inlines = [GateRequirementInline]

    def save_model(self, request, obj, form, change):
        # the snapshot from before the change (requirements included) is read before anything is written
        obj._audit_before = policy_snapshot(GatePolicy.objects.get(pk=obj.pk)) if change else None
        obj.updated_by = request.user
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)  # the requirements: the audit row shows them
        policy = form.instance
        gate_policy_recorded(user=request.user, policy=policy, before=getattr(policy, "_audit_before", None))

    def delete_model(self, request, obj):
        gate_policy_recorded(user=request.user, policy=obj, before=policy_snapshot(obj), deleted=True)
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)
