"""Recipes name their teacher and judge (model endpoint records) instead of writing them out.

Stored recipes of existing datasets and models keep what they were built with (``base_url``, ``model``, ...)
so they still display, but lose ``api_key_env`` (the name of an environment variable of the worker, which only
administrators may know now) and are marked ``legacy_endpoint``. Such a recipe is not accepted again as it is:
building it again asks for an endpoint name (``recipe.teacher``)."""

from django.db import migrations

FIELDS = ("teacher", "judge")


def _scrub(recipe):
    changed = False
    if not isinstance(recipe, dict):
        return recipe, changed
    out = dict(recipe)
    for key in FIELDS:
        value = out.get(key)
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "api_key_env"}
            value["legacy_endpoint"] = True
            out[key] = value
            changed = True
    return out, changed


def forwards(apps, schema_editor):
    for model_name in ("Dataset", "TrainedModel"):
        model = apps.get_model("training_jobs", model_name)
        for row in model.objects.exclude(recipe={}).only("pk", "recipe").iterator():
            recipe, changed = _scrub(row.recipe)
            if changed:
                model.objects.filter(pk=row.pk).update(recipe=recipe)


class Migration(migrations.Migration):

    dependencies = [
        ("training_jobs", "0007_manage_any_trainingjob"),
    ]

    operations = [
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
