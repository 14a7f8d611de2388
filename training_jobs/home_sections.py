"""Training's section of the home page (console.home; ``settings.HAT_HOME_SECTIONS`` names it): ML staff land on the
work that is queued or running — dataset builds, training jobs, evaluation runs and latency replays."""

from __future__ import annotations

from django.urls import reverse

from console import roles
from console.home import ROWS_PER_SECTION, HomeRow, HomeSection, when
from console.jobs import Job
from training_jobs.eval_run_models import EvalRun
from training_jobs.latency_models import LatencyReplay
from training_jobs.models import Dataset, TrainingJob

# (model, what a person calls it, the URL name of its page)
KINDS = (
    (TrainingJob, "training job", "training:detail"),
    (Dataset, "dataset build", "training_jobs:detail"),
    (EvalRun, "evaluation run", "eval_runs:detail"),
    (LatencyReplay, "latency replay", "latency:detail"),
)


def _progress(job: Job) -> str:
    stage = f" ({job.stage})" if job.stage else ""
    if job.progress_total:
        return f"{job.percent}%{stage}"
    return job.stage


def running_work(user) -> HomeSection | None:
    if not user.has_perm(roles.RUN_TRAINING):
        return None
    jobs = []
    for model, noun, url_name in KINDS:
        active = model.objects.filter(status__in=Job.ACTIVE).select_related("created_by").order_by("-created_at")
        jobs += [(job, noun, url_name) for job in active[:ROWS_PER_SECTION]]
    jobs.sort(key=lambda item: item[0].created_at, reverse=True)
    rows = [HomeRow(label=job.name or str(job.pk), url=reverse(url_name, args=[job.pk]),
                    note="(yours)" if job.created_by_id == user.pk else "",
                    cells=(noun, job.get_status_display(), _progress(job), job.created_by.get_username(),
                           when(job.created_at)))
            for job, noun, url_name in jobs[:ROWS_PER_SECTION]]
    return HomeSection(role=roles.ML_STAFF, title="Running jobs, builds and evaluations", testid="running-work",
                       columns=("Name", "Kind", "Status", "Progress", "Started by", "Queued"), rows=rows,
                       empty="Nothing is queued or running.", more=(reverse("training:list"), "All training jobs →"))
