# Scenario runs become jobs (console.jobs): a ScenarioRun row per room of kind "run" (sharing its id) takes over the
# run's lifecycle from the room (run_status, started_at, finished_at, summary, error), its data copied over: finished
# → succeeded; a run whose clock last ticked is given that time as its heartbeat.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

TO_JOB = {"queued": "queued", "running": "running", "finished": "succeeded", "failed": "failed"}
TO_ROOM = {"queued": "queued", "running": "running", "cancelling": "running", "succeeded": "finished",
           "failed": "failed", "cancelled": "failed"}


def rooms_to_runs(apps, schema_editor):
    PreviewRoom = apps.get_model("streams", "PreviewRoom")
    ScenarioRun = apps.get_model("streams", "ScenarioRun")
    runs = []
    for room in PreviewRoom.objects.filter(kind="run").iterator():
        status = TO_JOB.get(room.run_status, "failed")
        total = room.scenario.duration_minutes * 60 if room.scenario_id else 0  # scenario seconds
        runs.append(ScenarioRun(
            room_id=room.pk, status=status, created_by_id=room.created_by_id, started_at=room.started_at,
            finished_at=room.finished_at, summary=room.summary or {}, error=room.error or "",
            heartbeat_at=room.clock_ticked_at, progress_total=total,
            progress_done=total if status == "succeeded" else int(room.scenario_minute * 60)))
    ScenarioRun.objects.bulk_create(runs, batch_size=500)
    for run in ScenarioRun.objects.all().only("room_id", "created_at"):  # auto_now_add stamped them now
        ScenarioRun.objects.filter(pk=run.pk).update(
            created_at=PreviewRoom.objects.filter(pk=run.pk).values_list("created_at", flat=True).get())


def runs_to_rooms(apps, schema_editor):
    PreviewRoom = apps.get_model("streams", "PreviewRoom")
    ScenarioRun = apps.get_model("streams", "ScenarioRun")
    for run in ScenarioRun.objects.all().iterator():
        PreviewRoom.objects.filter(pk=run.room_id).update(
            run_status=TO_ROOM[run.status], started_at=run.started_at, finished_at=run.finished_at,
            summary=run.summary, error=run.error[:2000])


class Migration(migrations.Migration):

    dependencies = [
        ("streams", "0004_room_members_endpoint_secret"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ScenarioRun",
            fields=[
                ("status", models.CharField(choices=[("queued", "Queued"), ("running", "Running"),
                                                     ("cancelling", "Cancelling"), ("succeeded", "Succeeded"),
                                                     ("failed", "Failed"), ("cancelled", "Cancelled")],
                                            db_index=True, default="queued", max_length=16)),
                ("stage", models.CharField(blank=True, help_text="what a running job is doing now", max_length=40)),
                ("progress_done", models.PositiveBigIntegerField(default=0)),
                ("progress_total", models.PositiveBigIntegerField(default=0)),
                ("cancel_requested", models.BooleanField(default=False)),
                ("cancel_requested_at", models.DateTimeField(blank=True, null=True)),
                ("task_id", models.CharField(blank=True, help_text="the Celery task of the latest run (revoked when a "
                                                                    "cancel is not honoured in time)", max_length=64)),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                ("worker_host", models.CharField(blank=True, max_length=200)),
                ("error", models.TextField(blank=True, help_text="why it failed: exception type and message",
                                           max_length=4000)),
                ("resumes", models.PositiveIntegerField(default=0, help_text="times the job was resumed")),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("heartbeat_at", models.DateTimeField(blank=True, help_text="last sign of life of the worker running it "
                                                                            "(console.heartbeat)", null=True)),
                ("room", models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True,
                                              related_name="job", serialize=False, to="streams.previewroom")),
                ("summary", models.JSONField(blank=True, default=dict, help_text="turns, replies, fallbacks, hook "
                                             "failures, tool faults, latency (on its end)")),
                ("created_by", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="+",
                                                 to=settings.AUTH_USER_MODEL)),
            ],
            options={
                "ordering": ["-created_at"],
                "indexes": [models.Index(fields=["status", "-created_at"], name="scenariorun_status_recent")],
            },
        ),
        migrations.RunPython(rooms_to_runs, runs_to_rooms),
        migrations.RemoveField(model_name="previewroom", name="error"),
        migrations.RemoveField(model_name="previewroom", name="finished_at"),
        migrations.RemoveField(model_name="previewroom", name="run_status"),
        migrations.RemoveField(model_name="previewroom", name="started_at"),
        migrations.RemoveField(model_name="previewroom", name="summary"),
    ]
