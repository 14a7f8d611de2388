# A compliance lead may override a failing evaluation gate (harness_editor.gate): the override_gate permission

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('harness_editor', '0002_version_immutability'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='harnessversion',
            options={'ordering': ['harness', '-number'], 'permissions': [('submit_harnessversion', 'Can submit a draft harness version for review'), ('review_harnessversion', 'Can approve or reject a submitted harness version'), ('override_gate', 'Can approve a version whose evaluation gate fails, giving a written reason')]},
        ),
    ]
