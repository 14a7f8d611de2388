"""Database-level guarantees for harness versions.

Once a version leaves ``draft`` its content is frozen; the only allowed change is the review decision
(submitted -> approved | rejected, with who/when/comment). Drafts may only move to ``submitted``.
Non-draft versions can never be deleted. Enforced by a trigger so raw SQL and queryset.update() obey too.
"""

from django.db import migrations

FROZEN = ["harness_id", "number", "parent_id", "author_id", "change_note", "manifest_json", "content_hash",
          "created_at", "lock_version", "submitted_at"]
DECISION = ["decided_at", "decided_by_id", "decision_comment"]

PG_FUNCTION = """
CREATE OR REPLACE FUNCTION harness_version_guard() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.status <> 'draft' THEN
            RAISE EXCEPTION 'harness version % is % and can never be deleted', OLD.id, OLD.status
                USING ERRCODE = 'restrict_violation';
        END IF;
        RETURN OLD;
    END IF;
    IF OLD.status = 'draft' THEN
        IF NEW.status NOT IN ('draft', 'submitted') THEN
            RAISE EXCEPTION 'harness version %: a draft can only be submitted, not %', OLD.id, NEW.status
                USING ERRCODE = 'restrict_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF {frozen_changed} THEN
        RAISE EXCEPTION 'harness version % is % and immutable', OLD.id, OLD.status
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status
       AND NOT (OLD.status = 'submitted' AND NEW.status IN ('approved', 'rejected')) THEN
        RAISE EXCEPTION 'harness version %: % -> % is not an allowed transition', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF OLD.status IN ('approved', 'rejected') AND ({decision_changed}) THEN
        RAISE EXCEPTION 'harness version %: the review decision is final', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER harness_version_guard BEFORE UPDATE OR DELETE ON harness_editor_harnessversion
    FOR EACH ROW EXECUTE FUNCTION harness_version_guard();
""".format(
    frozen_changed=" OR ".join(f"NEW.{c} IS DISTINCT FROM OLD.{c}" for c in FROZEN),
    decision_changed=" OR ".join(f"NEW.{c} IS DISTINCT FROM OLD.{c}" for c in DECISION),
)
PG_DROP = """
DROP TRIGGER IF EXISTS harness_version_guard ON harness_editor_harnessversion;
DROP FUNCTION IF EXISTS harness_version_guard();
"""

# SQLite (the embedded default): the same rules as separate triggers; RAISE(ABORT) -> IntegrityError.
SQLITE_TRIGGERS = [
    """CREATE TRIGGER harness_version_no_delete BEFORE DELETE ON harness_editor_harnessversion
       WHEN OLD.status <> 'draft'
       BEGIN SELECT RAISE(ABORT, 'harness version is not a draft and can never be deleted'); END;""",
    """CREATE TRIGGER harness_version_draft_exit BEFORE UPDATE ON harness_editor_harnessversion
       WHEN OLD.status = 'draft' AND NEW.status NOT IN ('draft', 'submitted')
       BEGIN SELECT RAISE(ABORT, 'a draft can only be submitted'); END;""",
    """CREATE TRIGGER harness_version_frozen BEFORE UPDATE ON harness_editor_harnessversion
       WHEN OLD.status <> 'draft' AND ({})
       BEGIN SELECT RAISE(ABORT, 'harness version is immutable'); END;""".format(
        " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in FROZEN)
    ),
    """CREATE TRIGGER harness_version_transition BEFORE UPDATE ON harness_editor_harnessversion
       WHEN OLD.status <> 'draft' AND NEW.status IS NOT OLD.status
            AND NOT (OLD.status = 'submitted' AND NEW.status IN ('approved', 'rejected'))
       BEGIN SELECT RAISE(ABORT, 'not an allowed transition'); END;""",
    """CREATE TRIGGER harness_version_decision_final BEFORE UPDATE ON harness_editor_harnessversion
       WHEN OLD.status IN ('approved', 'rejected') AND ({})
       BEGIN SELECT RAISE(ABORT, 'the review decision is final'); END;""".format(
        " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in DECISION)
    ),
]
SQLITE_DROP = ["harness_version_no_delete", "harness_version_draft_exit", "harness_version_frozen",
               "harness_version_transition", "harness_version_decision_final"]


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_FUNCTION, params=None)
    elif schema_editor.connection.vendor == "sqlite":
        for sql in SQLITE_TRIGGERS:
            schema_editor.execute(sql)
    else:
        raise RuntimeError(f"no immutability trigger for database vendor {schema_editor.connection.vendor}")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_DROP, params=None)
    else:
        for name in SQLITE_DROP:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("harness_editor", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
