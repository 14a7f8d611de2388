import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("console", "0002_audit_append_only"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="NotificationPreference",
            fields=[
                ("user", models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True,
                                              related_name="notification_preference", serialize=False,
                                              to=settings.AUTH_USER_MODEL)),
                ("email", models.BooleanField(default=True, help_text="also send notifications by e-mail")),
            ],
        ),
        migrations.CreateModel(
            name="Notification",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("kind", models.CharField(max_length=64)),
                ("text", models.CharField(max_length=300)),
                ("url", models.CharField(blank=True, max_length=300)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("read_at", models.DateTimeField(blank=True, null=True)),
                ("emailed_at", models.DateTimeField(blank=True, null=True)),
                ("event", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="notifications",
                                            to="console.auditevent")),
                ("recipient", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                                related_name="notifications", to=settings.AUTH_USER_MODEL)),
            ],
            options={
                "ordering": ["-id"],
                "indexes": [
                    models.Index(fields=["recipient", "-id"], name="notification_inbox"),
                    models.Index(condition=models.Q(("read_at__isnull", True)), fields=["recipient"],
                                 name="notification_unread"),
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("recipient", "event"), name="notification_once_per_event"),
                ],
            },
        ),
    ]
