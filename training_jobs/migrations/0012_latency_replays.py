# Latency replays (training_jobs.latency_models.LatencyReplay): a job kind of console.jobs

import django.db.models.deletion
import uuid
from django.conf import settings
from django.db import migrations, models

import training_jobs.latency_models


class Migration(migrations.Migration):

    dependencies = [
        ('harness_editor', '0002_version_immutability'),
        ('streams', '0005_scenario_run_jobs'),
        ('training_jobs', '0011_eval_runs'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='LatencyReplay',
            fields=[
                ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('cancelling', 'Cancelling'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], db_index=True, default='queued', max_length=16)),
                ('stage', models.CharField(blank=True, help_text='what a running job is doing now', max_length=40)),
                ('progress_done', models.PositiveBigIntegerField(default=0)),
                ('progress_total', models.PositiveBigIntegerField(default=0)),
                ('cancel_requested', models.BooleanField(default=False)),
                ('cancel_requested_at', models.DateTimeField(blank=True, null=True)),
                ('task_id', models.CharField(blank=True, help_text='the Celery task of the latest run (revoked when a cancel is not honoured in time)', max_length=64)),
                ('revoked_at', models.DateTimeField(blank=True, null=True)),
                ('worker_host', models.CharField(blank=True, max_length=200)),
                ('error', models.TextField(blank=True, help_text='why it failed: exception type and message', max_length=4000)),
                ('resumes', models.PositiveIntegerField(default=0, help_text='times the job was resumed')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('heartbeat_at', models.DateTimeField(blank=True, help_text='last sign of life of the worker running it (console.heartbeat)', null=True)),
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=120)),
                ('concurrency', models.JSONField(default=training_jobs.latency_models.default_concurrency, help_text='the levels, in the order they are played: turns in flight at once')),
                ('turns_per_level', models.PositiveIntegerField(default=32)),
                ('seed', models.IntegerField(default=0, help_text='shuffles the cases; turn i is sent with seed + i')),
                ('sampling', models.JSONField(blank=True, default=dict, help_text='temperature, top_p, max_tokens')),
                ('deadline_s', models.FloatField(blank=True, help_text="wall-clock budget per turn (None: the harness's own)", null=True)),
                ('summary', models.JSONField(blank=True, default=dict, help_text='levels (training_jobs.evals.replay.replay_summary), histogram bins, reference')),
                ('created_by', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('endpoint', models.ForeignKey(help_text='the model server measured', on_delete=django.db.models.deletion.PROTECT, related_name='+', to='streams.modelendpoint')),
                ('eval_set_version', models.ForeignKey(help_text='whose harness cases (T1–T3) are the turns replayed', on_delete=django.db.models.deletion.PROTECT, related_name='latency_replays', to='training_jobs.evalsetversion')),
                ('harness_version', models.ForeignKey(help_text='the harness the turns run under (T2/T3: its variants)', on_delete=django.db.models.deletion.PROTECT, related_name='+', to='harness_editor.harnessversion')),
            ],
            options={
                'ordering': ['-created_at'],
                'indexes': [models.Index(fields=['status', '-created_at'], name='latency_status_recent')],
            },
        ),
    ]
