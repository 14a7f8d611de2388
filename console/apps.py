from django.apps import AppConfig
from django.db.models.signals import post_migrate


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console"

    def ready(self) -> None:
        from console import dbpool
        from console.roles import sync_role_groups

        dbpool.install()  # a forked worker process opens its own connection pool, never the parent's

        # Groups and their permissions follow console.roles on every migrate: the code is the source of truth.
        post_migrate.connect(sync_role_groups, sender=self)
