"""Eval sets (T1–T4): sets, immutable content-hashed versions and their cases as rows.

A version and its cases never change once written: a trigger refuses any UPDATE of them (raw SQL and
queryset.update() included), as for harness versions (harness_editor migration 0002). Only the set's ``pinned``
pointer and description move.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

VERSION = "training_jobs_evalsetversion"
CASE = "training_jobs_evalcase"

PG_FORWARD = f"""
CREATE OR REPLACE FUNCTION eval_set_immutable() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% rows are immutable: a change is a new version', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER eval_set_version_immutable BEFORE UPDATE ON {VERSION}
    FOR EACH ROW EXECUTE FUNCTION eval_set_immutable();
CREATE TRIGGER eval_case_immutable BEFORE UPDATE ON {CASE}
    FOR EACH ROW EXECUTE FUNCTION eval_set_immutable();
"""
PG_BACKWARD = f"""
DROP TRIGGER IF EXISTS eval_set_version_immutable ON {VERSION};
DROP TRIGGER IF EXISTS eval_case_immutable ON {CASE};
DROP FUNCTION IF EXISTS eval_set_immutable();
"""
SQLITE_FORWARD = [f"""CREATE TRIGGER {name} BEFORE UPDATE ON {table}
    BEGIN SELECT RAISE(ABORT, 'eval set versions and cases are immutable: a change is a new version'); END;"""
                  for name, table in (("eval_set_version_immutable", VERSION), ("eval_case_immutable", CASE))]
SQLITE_BACKWARD = ["DROP TRIGGER IF EXISTS eval_set_version_immutable;", "DROP TRIGGER IF EXISTS eval_case_immutable;"]


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_FORWARD, params=None)
    elif schema_editor.connection.vendor == "sqlite":
        for statement in SQLITE_FORWARD:
            schema_editor.execute(statement)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_BACKWARD, params=None)
    elif schema_editor.connection.vendor == "sqlite":
        for statement in SQLITE_BACKWARD:
            schema_editor.execute(statement)


class Migration(migrations.Migration):

    dependencies = [
        ('training_jobs', '0009_jobs_lifecycle'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='EvalSet',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.SlugField(help_text="lowercase letters, digits, '-' and '_'", max_length=64, unique=True)),
                ('kind', models.CharField(choices=[('t1', 'T1 Live-Stream QA'), ('t2', 'T2 Harness-Variant QA'), ('t3', 'T3 Tool and prompt robustness'), ('t4', 'T4 IFEval')], db_index=True, max_length=4)),
                ('description', models.TextField(blank=True, max_length=2000)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['kind', 'name'],
                'permissions': [('pin_evalset', 'Can pin an eval set version for the approval gate')],
            },
        ),
        migrations.CreateModel(
            name='EvalSetVersion',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('number', models.PositiveIntegerField()),
                ('change_note', models.TextField(blank=True, max_length=2000)),
                ('content_hash', models.CharField(max_length=64)),
                ('case_count', models.PositiveIntegerField()),
                ('size_bytes', models.PositiveIntegerField(default=0, help_text='bytes of the exported JSON lines')),
                ('facet_counts', models.JSONField(blank=True, default=dict, help_text="cases per tag and per kind-specific field value: {'tag': {'typo': 12}, 'tool': {'catalog.stock': 40}, ...}")),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('author', models.ForeignKey(blank=True, help_text='None: seeded from the committed data files', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('eval_set', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='versions', to='training_jobs.evalset')),
                ('parent', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='children', to='training_jobs.evalsetversion')),
            ],
            options={
                'ordering': ['eval_set', '-number'],
            },
        ),
        migrations.AddField(
            model_name='evalset',
            name='pinned',
            field=models.ForeignKey(blank=True, help_text='the version the approval gate evaluates on (None: not pinned)', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='training_jobs.evalsetversion'),
        ),
        migrations.CreateModel(
            name='EvalCase',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('position', models.PositiveIntegerField(help_text="0-based line of the case in the version's JSON lines")),
                ('case_id', models.CharField(max_length=200)),
                ('tags', models.JSONField(blank=True, default=list)),
                ('tags_text', models.TextField(blank=True)),
                ('facets_text', models.TextField(blank=True)),
                ('search_text', models.TextField(blank=True, help_text='lowercased text of the case, for the search box')),
                ('case_json', models.TextField(help_text='the case as one canonical JSON line (what export writes)')),
                ('version', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='cases', to='training_jobs.evalsetversion')),
            ],
            options={
                'ordering': ['version', 'position'],
            },
        ),
        migrations.AddConstraint(
            model_name='evalsetversion',
            constraint=models.UniqueConstraint(fields=('eval_set', 'number'), name='eval_set_version_number_unique'),
        ),
        migrations.AddConstraint(
            model_name='evalsetversion',
            constraint=models.UniqueConstraint(fields=('eval_set', 'content_hash'), name='eval_set_version_hash_unique'),
        ),
        migrations.AddConstraint(
            model_name='evalcase',
            constraint=models.UniqueConstraint(fields=('version', 'position'), name='eval_case_position_unique'),
        ),
        migrations.AddConstraint(
            model_name='evalcase',
            constraint=models.UniqueConstraint(fields=('version', 'case_id'), name='eval_case_id_unique'),
        ),
        migrations.RunPython(forward, backward),
    ]
