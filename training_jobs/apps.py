from django.apps import AppConfig


class TrainingJobsConfig(AppConfig):
    name = "training_jobs"
    verbose_name = "Training jobs (HSA, HAT stages, evaluations)"
