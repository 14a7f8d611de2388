"""The audit timeline is append-only: UPDATE and DELETE are refused by the database itself.

(TRUNCATE, used only by test-database flushes, is a table-level operation and is not affected.)
"""

from django.db import migrations

PG = """
CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the audit timeline is append-only (% refused)', TG_OP USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER audit_event_append_only BEFORE UPDATE OR DELETE ON console_auditevent
    FOR EACH ROW EXECUTE FUNCTION audit_event_append_only();
"""
PG_DROP = """
DROP TRIGGER IF EXISTS audit_event_append_only ON console_auditevent;
DROP FUNCTION IF EXISTS audit_event_append_only();
"""
SQLITE = [
    """CREATE TRIGGER audit_event_no_update BEFORE UPDATE ON console_auditevent
       BEGIN SELECT RAISE(ABORT, 'the audit timeline is append-only'); END;""",
    """CREATE TRIGGER audit_event_no_delete BEFORE DELETE ON console_auditevent
       BEGIN SELECT RAISE(ABORT, 'the audit timeline is append-only'); END;""",
]


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG, params=None)
    elif schema_editor.connection.vendor == "sqlite":
        for sql in SQLITE:
            schema_editor.execute(sql)
    else:
        raise RuntimeError(f"no append-only trigger for database vendor {schema_editor.connection.vendor}")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_DROP, params=None)
    else:
        for name in ("audit_event_no_update", "audit_event_no_delete"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("console", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
