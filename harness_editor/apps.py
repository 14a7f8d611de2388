from django.apps import AppConfig


class HarnessEditorConfig(AppConfig):
    name = "harness_editor"
    verbose_name = "Harness registry"
