"""Versions, transitions, immutability (enforced by the database), optimistic locking, labels, audit."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from console.errors import EditConflict, InvalidTransition, NotAllowed, ValidationFailed
from console.models import AuditEvent
from harness_editor import selectors, services
from harness_editor.models import HarnessVersion
from harness_editor.schemas import content_hash, manifest_from_json, manifest_to_json, manifest_to_yaml

pytestmark = pytest.mark.django_db

Status = HarnessVersion.Status


def _db_error(fn):
    """Run fn in a savepoint and return the database error it raised (the test transaction survives)."""
    with pytest.raises(IntegrityError) as info:
        with transaction.atomic():
            fn()
    return info.value


# --- manifests through the database ---------------------------------------------------------------

def test_manifest_round_trips_yaml_json_db_byte_stable(manager, demo_manifest, demo_yaml):
    manifest = demo_manifest("skincare_v1")
    version = services.harness_create(user=manager, slug="rt", name="Round trip", manifest=manifest)
    stored = HarnessVersion.objects.get(pk=version.pk)
    assert stored.manifest_json == manifest_to_json(manifest)
    assert stored.content_hash == content_hash(manifest)
    # DB text -> model -> JSON/YAML gives the same bytes as the original model.
    assert manifest_to_json(manifest_from_json(stored.manifest_json)) == stored.manifest_json
    assert manifest_to_yaml(stored.manifest) == manifest_to_yaml(manifest)
    # and the YAML export re-imports to the same hash
    from harness_editor.schemas import manifest_from_yaml

    assert content_hash(manifest_from_yaml(manifest_to_yaml(stored.manifest))) == stored.content_hash


def test_schema_property_order_survives_the_database(manager, demo_manifest):
    manifest = demo_manifest("skincare_v1")
    data = manifest.model_dump(mode="json")
    i = next(i for i, t in enumerate(data["tools"]) if len(t["parameters"].get("properties", {})) >= 2)
    props = data["tools"][i]["parameters"]["properties"]
    data["tools"][i]["parameters"]["properties"] = dict(reversed(list(props.items())))
    from harness_editor.schemas import parse_manifest

    reordered = parse_manifest(data)
    version = services.harness_create(user=manager, slug="order", name="Order", manifest=reordered)
    stored = HarnessVersion.objects.get(pk=version.pk).manifest
    assert list(stored.tools[i].parameters["properties"]) == list(reversed(list(props)))
    assert content_hash(stored) != content_hash(manifest)


# --- numbering and drafts ---------------------------------------------------------------------------

def test_versions_are_numbered_per_harness_with_parent(harness_with_history):
    h = harness_with_history
    assert [h["v1"].number, h["v2"].number, h["v3"].number] == [1, 2, 3]
    assert h["v3"].parent_id == h["v2"].id and h["v2"].parent_id == h["v1"].id


def test_draft_save_bumps_lock_and_hash(harness_with_history, manager, demo_manifest):
    v3 = harness_with_history["v3"]
    lock = v3.lock_version
    saved = services.version_save_draft(user=manager, version=v3, manifest=demo_manifest("skincare_v1"),
                                        lock_version=lock, change_note="back to v1 content")
    assert saved.lock_version == lock + 1
    assert saved.content_hash == content_hash(demo_manifest("skincare_v1"))
    assert saved.change_note == "back to v1 content"


def test_stale_save_is_a_conflict_and_changes_nothing(harness_with_history, manager, demo_manifest):
    v3 = harness_with_history["v3"]
    stale = v3.lock_version
    services.version_save_draft(user=manager, version=v3, manifest=demo_manifest("skincare_v2"), lock_version=stale)
    before = HarnessVersion.objects.get(pk=v3.pk)
    with pytest.raises(EditConflict) as info:
        services.version_save_draft(user=manager, version=v3, manifest=demo_manifest("skincare_v1"),
                                    lock_version=stale)
    assert info.value.current_lock_version == stale + 1
    after = HarnessVersion.objects.get(pk=v3.pk)
    assert (after.manifest_json, after.lock_version) == (before.manifest_json, before.lock_version)


def test_only_the_author_edits_a_draft(harness_with_history, manager2, demo_manifest):
    v3 = harness_with_history["v3"]
    with pytest.raises(NotAllowed):
        services.version_save_draft(user=manager2, version=v3, manifest=demo_manifest("skincare_v1"),
                                    lock_version=v3.lock_version)


def test_submitted_version_cannot_be_saved_through_the_service(harness_with_history, manager, demo_manifest):
    v2 = harness_with_history["v2"]
    with pytest.raises(InvalidTransition):
        services.version_save_draft(user=manager, version=v2, manifest=demo_manifest("skincare_v1"),
                                    lock_version=v2.lock_version)


def test_discard_draft(harness_with_history, manager):
    v3 = harness_with_history["v3"]
    services.version_discard_draft(user=manager, version=v3)
    assert not HarnessVersion.objects.filter(pk=v3.pk).exists()
    assert AuditEvent.objects.filter(action="version.discarded", target="version:3").exists()


def test_cannot_discard_submitted(harness_with_history, manager):
    with pytest.raises(InvalidTransition):
        services.version_discard_draft(user=manager, version=harness_with_history["v2"])


# --- immutability in the database ------------------------------------------------------------------

def test_queryset_update_on_submitted_version_fails(harness_with_history):
    v2 = harness_with_history["v2"]
    err = _db_error(lambda: HarnessVersion.objects.filter(pk=v2.pk).update(manifest_json="{}"))
    assert "immutable" in str(err)
    assert HarnessVersion.objects.get(pk=v2.pk).manifest_json != "{}"


def test_raw_sql_update_on_approved_version_fails(harness_with_history):
    v1 = harness_with_history["v1"]

    def raw():
        with connection.cursor() as cur:
            cur.execute("UPDATE harness_editor_harnessversion SET change_note = %s WHERE id = %s", ["x", v1.pk])

    assert "immutable" in str(_db_error(raw))


@pytest.mark.parametrize("field,value", [("content_hash", "0" * 64), ("number", 99), ("lock_version", 7)])
def test_every_frozen_field_is_guarded(harness_with_history, field, value):
    v1 = harness_with_history["v1"]
    _db_error(lambda: HarnessVersion.objects.filter(pk=v1.pk).update(**{field: value}))


def test_approved_cannot_go_back_to_draft_or_submitted(harness_with_history):
    v1 = harness_with_history["v1"]
    for status in (Status.DRAFT, Status.SUBMITTED, Status.REJECTED):
        _db_error(lambda: HarnessVersion.objects.filter(pk=v1.pk).update(status=status))


def test_draft_cannot_jump_to_approved_even_in_sql(harness_with_history):
    v3 = harness_with_history["v3"]
    _db_error(lambda: HarnessVersion.objects.filter(pk=v3.pk).update(status=Status.APPROVED))


def test_review_decision_is_final(harness_with_history, reviewer2):
    v1 = harness_with_history["v1"]
    _db_error(lambda: HarnessVersion.objects.filter(pk=v1.pk).update(decision_comment="rewritten"))


def test_non_draft_versions_cannot_be_deleted(harness_with_history):
    v1 = harness_with_history["v1"]

    def raw():
        with connection.cursor() as cur:
            cur.execute("DELETE FROM harness_editor_harnessversion WHERE id = %s", [v1.pk])

    _db_error(raw)


def test_drafts_stay_editable_in_the_database(harness_with_history):
    v3 = harness_with_history["v3"]
    assert HarnessVersion.objects.filter(pk=v3.pk).update(change_note="fine") == 1


# --- transitions, four eyes -------------------------------------------------------------------------

def test_author_cannot_approve_even_with_reviewer_role(manager, demo_manifest, reviewer):
    from django.contrib.auth.models import Group

    from console import roles

    manager.groups.add(Group.objects.get(name=roles.COMPLIANCE_REVIEWER))
    v1 = services.harness_create(user=manager, slug="fe", name="Four eyes", manifest=demo_manifest())
    services.version_submit(user=manager, version=v1)
    manager = type(manager).objects.get(pk=manager.pk)  # fresh permission cache
    with pytest.raises(NotAllowed, match="four eyes"):
        services.version_approve(user=manager, version=v1)
    with pytest.raises(NotAllowed, match="four eyes"):
        services.version_reject(user=manager, version=v1, comment="no")
    assert services.version_approve(user=reviewer, version=v1).status == Status.APPROVED


def test_manager_cannot_approve(harness_with_history, manager2):
    with pytest.raises(NotAllowed):
        services.version_approve(user=manager2, version=harness_with_history["v2"])


def test_reject_needs_a_comment_and_is_recorded(harness_with_history, reviewer2):
    v2 = harness_with_history["v2"]
    with pytest.raises(ValidationFailed):
        services.version_reject(user=reviewer2, version=v2, comment="  ")
    rejected = services.version_reject(user=reviewer2, version=v2, comment="coupon wording misleading")
    assert rejected.status == Status.REJECTED and rejected.decided_by == reviewer2
    event = AuditEvent.objects.filter(action="version.rejected").get()
    assert (event.from_state, event.to_state, event.comment) == ("submitted", "rejected",
                                                                  "coupon wording misleading")


def test_cannot_approve_a_draft_or_twice(harness_with_history, reviewer):
    with pytest.raises(InvalidTransition):
        services.version_approve(user=reviewer, version=harness_with_history["v3"])
    with pytest.raises(InvalidTransition):
        services.version_approve(user=reviewer, version=harness_with_history["v1"])


def test_only_author_submits(harness_with_history, manager2):
    with pytest.raises(NotAllowed):
        services.version_submit(user=manager2, version=harness_with_history["v3"])


# --- labels ----------------------------------------------------------------------------------------

def test_only_approved_versions_carry_labels(harness_with_history, reviewer):
    h = harness_with_history
    for v in (h["v2"], h["v3"]):
        with pytest.raises(ValidationFailed, match="cannot move"):
            services.label_move(user=reviewer, harness=h["harness"], name="staging", version=v)


def test_label_name_is_validated(harness_with_history, reviewer):
    h = harness_with_history
    with pytest.raises(ValidationFailed) as info:
        services.label_move(user=reviewer, harness=h["harness"], name="Prod Uction!", version=h["v1"])
    assert info.value.errors[0]["path"] == "name"
    services.label_move(user=reviewer, harness=h["harness"], name="room:42", version=h["v1"])


def test_label_history_and_rollback(harness_with_history, reviewer, reviewer2):
    h = harness_with_history
    v2 = services.version_approve(user=reviewer2, version=h["v2"])
    services.label_move(user=reviewer, harness=h["harness"], name="production", version=v2, comment="ship v2")
    assert h["harness"].labels.get(name="production").version == v2
    history = list(selectors.label_history(harness=h["harness"], name="production"))
    assert [(e.from_state, e.to_state) for e in history] == [("v1", "v2"), ("", "v1")]

    services.label_rollback(user=reviewer, harness=h["harness"], name="production")
    assert h["harness"].labels.get(name="production").version == h["v1"]
    latest = selectors.label_history(harness=h["harness"], name="production").first()
    assert (latest.from_state, latest.to_state, latest.data["rollback"]) == ("v2", "v1", True)


def test_rollback_without_history_is_a_clear_error(harness_with_history, reviewer):
    with pytest.raises(ValidationFailed, match="nothing to roll back"):
        services.label_rollback(user=reviewer, harness=harness_with_history["harness"], name="production")
    with pytest.raises(ValidationFailed, match="no such label"):
        services.label_rollback(user=reviewer, harness=harness_with_history["harness"], name="canary")


def test_moving_to_the_same_version_is_refused(harness_with_history, reviewer):
    h = harness_with_history
    with pytest.raises(ValidationFailed, match="nothing to move"):
        services.label_move(user=reviewer, harness=h["harness"], name="production", version=h["v1"])


def test_ml_staff_cannot_move_labels(harness_with_history, ml_staff):
    h = harness_with_history
    with pytest.raises(NotAllowed):
        services.label_move(user=ml_staff, harness=h["harness"], name="staging", version=h["v1"])


# --- the audit timeline ----------------------------------------------------------------------------

def test_every_transition_and_move_is_in_the_timeline(harness_with_history):
    actions = list(AuditEvent.objects.order_by("id").values_list("action", "target", "from_state", "to_state"))
    assert actions == [
        ("harness.created", "harness:glow-gadget", "", "created"),
        ("version.created", "version:1", "", "draft"),
        ("version.submitted", "version:1", "draft", "submitted"),
        ("version.approved", "version:1", "submitted", "approved"),
        ("label.moved", "label:production", "", "v1"),
        ("version.created", "version:2", "", "draft"),
        ("version.submitted", "version:2", "draft", "submitted"),
        ("version.created", "version:3", "", "draft"),
    ]


def test_audit_timeline_is_append_only_in_the_database(harness_with_history):
    event = AuditEvent.objects.first()
    _db_error(lambda: AuditEvent.objects.filter(pk=event.pk).update(comment="edited"))
    _db_error(lambda: AuditEvent.objects.filter(pk=event.pk).delete())


def test_history_selector_does_not_load_manifests(harness_with_history, django_assert_max_num_queries):
    with django_assert_max_num_queries(1):
        rows = list(selectors.version_history(harness=harness_with_history["harness"]))
    assert all("manifest_json" in r.get_deferred_fields() for r in rows)
