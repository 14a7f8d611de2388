# Dataset builds and training jobs on console.jobs.Job: one set of job columns. TrainingJob.progress_step is renamed
# progress_done (its values kept); datasets gain the job columns they lacked (task, revoke, host, resumes) and the
# "cancelling" state, which a running build already asked to stop moves to.

from django.db import migrations, models


def running_cancel_requested_to_cancelling(apps, schema_editor):
    Dataset = apps.get_model("training_jobs", "Dataset")
    Dataset.objects.filter(status="running", cancel_requested=True).update(status="cancelling")


def cancelling_back_to_running(apps, schema_editor):
    Dataset = apps.get_model("training_jobs", "Dataset")
    Dataset.objects.filter(status="cancelling").update(status="running")


STATUS = models.CharField(choices=[("queued", "Queued"), ("running", "Running"), ("cancelling", "Cancelling"),
                                   ("succeeded", "Succeeded"), ("failed", "Failed"), ("cancelled", "Cancelled")],
                          db_index=True, default="queued", max_length=16)


class Migration(migrations.Migration):

    dependencies = [
        ("training_jobs", "0008_recipe_endpoint_names"),
    ]

    operations = [
        migrations.RenameField(model_name="trainingjob", old_name="progress_step", new_name="progress_done"),
        migrations.AlterField(model_name="trainingjob", name="progress_done",
                              field=models.PositiveBigIntegerField(default=0)),
        migrations.AlterField(model_name="trainingjob", name="progress_total",
                              field=models.PositiveBigIntegerField(default=0)),
        migrations.AddField(model_name="dataset", name="cancel_requested_at",
                            field=models.DateTimeField(blank=True, null=True)),
        migrations.AddField(model_name="dataset", name="resumes",
                            field=models.PositiveIntegerField(default=0, help_text="times the job was resumed")),
        migrations.AddField(model_name="dataset", name="revoked_at", field=models.DateTimeField(blank=True, null=True)),
        migrations.AddField(model_name="dataset", name="task_id", field=models.CharField(
            blank=True, max_length=64,
            help_text="the Celery task of the latest run (revoked when a cancel is not honoured in time)")),
        migrations.AddField(model_name="dataset", name="worker_host", field=models.CharField(blank=True, max_length=200)),
        migrations.AlterField(model_name="dataset", name="stage", field=models.CharField(
            blank=True, help_text="what a running job is doing now", max_length=40)),
        migrations.AlterField(model_name="dataset", name="status", field=STATUS),
        migrations.AlterField(model_name="trainingjob", name="status", field=STATUS),
        migrations.AlterField(model_name="trainingjob", name="error", field=models.TextField(
            blank=True, help_text="why it failed: exception type and message", max_length=4000)),
        migrations.AlterField(model_name="trainingjob", name="heartbeat_at", field=models.DateTimeField(
            blank=True, null=True, help_text="last sign of life of the worker running it (console.heartbeat)")),
        migrations.RunPython(running_cancel_requested_to_cancelling, cancelling_back_to_running),
    ]
