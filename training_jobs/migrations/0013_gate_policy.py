# The approval gate policy (training_jobs.gate_models): GatePolicy with its GateRequirement rows, set in the admin

import django.core.validators
import django.db.models.deletion
import django.db.models.functions.comparison
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('harness_editor', '0003_override_gate_permission'),
        ('streams', '0005_scenario_run_jobs'),
        ('training_jobs', '0012_latency_replays'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='GatePolicy',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('enabled', models.BooleanField(default=True, help_text='off: versions of the harness are approved without evidence (the review page says so)')),
                ('k', models.PositiveSmallIntegerField(blank=True, help_text='samples per case the runs must use (empty: any)', null=True, validators=[django.core.validators.MinValueValidator(1)])),
                ('seed', models.IntegerField(blank=True, help_text='seed the runs must use (empty: any)', null=True, validators=[django.core.validators.MinValueValidator(0)])),
                ('regression_needs_ci', models.BooleanField(default=False, help_text='a regression rule passes only when the 95 % interval of the per-case change excludes a drop larger than the maximum (stricter than comparing the means; needs enough cases)', verbose_name='regressions judged on the interval')),
                ('note', models.TextField(blank=True, help_text='why the thresholds are what they are', max_length=2000)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('endpoint', models.ForeignKey(help_text='the production model: only runs against this endpoint count as evidence', on_delete=django.db.models.deletion.PROTECT, related_name='+', to='streams.modelendpoint')),
                ('harness', models.ForeignKey(blank=True, help_text='the harness this policy gates; empty: every harness that has no policy of its own', null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='harness_editor.harness')),
                ('updated_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'approval gate policy',
                'verbose_name_plural': 'approval gate policies',
            },
        ),
        migrations.CreateModel(
            name='GateRequirement',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('metric', models.CharField(choices=[('accuracy', 'Accuracy'), ('effectiveness', 'Effectiveness'), ('pass_k', 'pass^k'), ('pass_1', 'pass@1 (solve rate)'), ('prompt_strict', 'IFEval prompt-level strict'), ('instruction_strict', 'IFEval instruction-level strict'), ('prompt_loose', 'IFEval prompt-level loose'), ('instruction_loose', 'IFEval instruction-level loose')], default='accuracy', help_text='accuracy, effectiveness, pass^k, pass@1 for T1–T3; IFEval figures for T4', max_length=24)),
                ('minimum', models.FloatField(blank=True, help_text='lowest acceptable score, in percent (empty: no minimum)', null=True, validators=[django.core.validators.MinValueValidator(0.0), django.core.validators.MaxValueValidator(100.0)])),
                ('max_drop', models.FloatField(blank=True, help_text='largest acceptable drop against the production version, in points (empty: no regression rule; T4 runs use no harness, so none)', null=True, validators=[django.core.validators.MinValueValidator(0.0), django.core.validators.MaxValueValidator(100.0)])),
                ('eval_set', models.ForeignKey(help_text='required; its pinned version is the one evaluated', on_delete=django.db.models.deletion.PROTECT, related_name='+', to='training_jobs.evalset')),
                ('policy', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='requirements', to='training_jobs.gatepolicy')),
            ],
            options={
                'ordering': ['policy', 'eval_set__name', 'metric'],
            },
        ),
        migrations.AddConstraint(
            model_name='gatepolicy',
            constraint=models.UniqueConstraint(django.db.models.functions.comparison.Coalesce('harness', models.Value(0), output_field=models.BigIntegerField()), name='gate_policy_one_per_harness', violation_error_message='there is already a policy for this harness (or a default policy)'),
        ),
        migrations.AddConstraint(
            model_name='gaterequirement',
            constraint=models.UniqueConstraint(fields=('policy', 'eval_set', 'metric'), name='gate_requirement_unique'),
        ),
    ]
