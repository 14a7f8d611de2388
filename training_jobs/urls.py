"""Dataset pages (mounted at "datasets/" by console.urls), training pages ("training/", namespace "training"),
the model registry ("models/", namespace "models"), the eval sets ("eval-sets/", namespace "evals") and the
evaluation runs ("evals/runs/", namespace "eval_runs")."""

from django.urls import path

from training_jobs import eval_run_views, eval_views, views

app_name = "training_jobs"

D = "<uuid:dataset_id>/"
J = "<uuid:job_id>/"

urlpatterns = [
    path("", views.dataset_list, name="list"),
    path("new/", views.dataset_new, name="new"),
    path(D, views.dataset_detail, name="detail"),
    path(D + "cancel/", views.dataset_cancel, name="cancel"),
    path(D + "samples/", views.dataset_samples, name="samples"),
    path(D + "samples/<int:index>/", views.dataset_sample, name="sample"),
]

# include(...) takes these (patterns, app_name) pairs as they are
training_urls = ([
    path("", views.training_list, name="list"),
    path("new/", views.training_new, name="new"),
    path("compare/", views.training_compare, name="compare"),
    path(J, views.training_detail, name="detail"),
    path(J + "cancel/", views.training_cancel, name="cancel"),
    path(J + "resume/", views.training_resume, name="resume"),
], "training")

model_urls = ([
    path("", views.model_list, name="list"),
    path("<uuid:model_id>/", views.model_detail, name="detail"),
    path("<uuid:model_id>/serve/", views.model_serve, name="serve"),
], "models")

# Eval sets ("eval-sets/", namespace "evals"): training_jobs.eval_views
E = "<slug:name>/"
EV = E + "v<int:number>/"
eval_urls = ([
    path("", eval_views.eval_set_list, name="list"),
    path("import/", eval_views.eval_set_import, name="import"),
    path("save-turn/<uuid:room_id>/<str:turn_id>/", eval_views.eval_case_from_turn, name="save_turn"),
    path(E, eval_views.eval_set_detail, name="set"),
    path(E + "pin/", eval_views.eval_set_pin, name="pin"),
    path(EV, eval_views.eval_version_detail, name="version"),
    path(EV + "export/", eval_views.eval_version_export, name="export"),
    path(EV + "cases/<str:case_id>/", eval_views.eval_case_detail, name="case"),
], "evals")

# Evaluation runs ("evals/runs/", namespace "eval_runs"): training_jobs.eval_run_views
R = "<uuid:run_id>/"
eval_run_urls = ([
    path("", eval_run_views.run_list, name="list"),
    path("new/", eval_run_views.run_new, name="new"),
    path("compare/", eval_run_views.run_compare, name="compare"),
    path(R, eval_run_views.run_detail, name="detail"),
    path(R + "cancel/", eval_run_views.run_cancel, name="cancel"),
    path(R + "resume/", eval_run_views.run_resume, name="resume"),
    path(R + "cases/<str:case_id>/", eval_run_views.run_case, name="case"),
], "eval_runs")

# Latency replays ("evals/latency/", namespace "latency"): training_jobs.latency_views
from training_jobs import latency_views  # noqa: E402

LR = "<uuid:replay_id>/"
latency_urls = ([
    path("", latency_views.replay_list, name="list"),
    path("new/", latency_views.replay_new, name="new"),
    path(LR, latency_views.replay_detail, name="detail"),
    path(LR + "cancel/", latency_views.replay_cancel, name="cancel"),
    path(LR + "resume/", latency_views.replay_resume, name="resume"),
], "latency")

# Human labels and agreement (issue 11 §2), under the runs: training_jobs.label_views
from training_jobs import label_views  # noqa: E402

eval_run_urls[0].extend([
    path("agreement/", label_views.agreement_index, name="agreement_index"),
    path("agreement/<slug:eval_set>/", label_views.set_agreement, name="set_agreement"),
    path(R + "labels/", label_views.label_start, name="labels"),
    path(R + "labels/<int:result_id>/", label_views.label_case, name="label_case"),
    path(R + "agreement/", label_views.run_agreement, name="agreement"),
])

# Tags and the note of a dataset, training job, model or evaluation run (training_jobs.tag_views): the same three
# POSTs under each kind's pages ("<namespace>:tags", ":untag", ":note")
from training_jobs import tag_views  # noqa: E402
from training_jobs.tag_models import Subject  # noqa: E402


def _tag_urls(subject: str) -> list:
    o = "<uuid:object_id>/"
    return [path(o + "tags/", tag_views.tags_add, {"subject": subject}, name="tags"),
            path(o + "tags/remove/", tag_views.tag_remove, {"subject": subject}, name="untag"),
            path(o + "note/", tag_views.note_save, {"subject": subject}, name="note")]


urlpatterns += _tag_urls(Subject.DATASET)
training_urls[0].extend(_tag_urls(Subject.TRAINING_JOB))
model_urls[0].extend(_tag_urls(Subject.MODEL))
eval_run_urls[0].extend(_tag_urls(Subject.EVAL_RUN))

# Reproduction runs (manage.py reproduce_hat as a job) and the committed result, under the training pages
# ("training/reproductions/"): training_jobs.reproduce_views
from training_jobs import reproduce_views  # noqa: E402

RR = "reproductions/<uuid:run_id>/"
training_urls[0].extend([
    path("reproductions/", reproduce_views.reproduction_list, name="reproductions"),
    path("reproductions/new/", reproduce_views.reproduction_new, name="reproduction_new"),
    path("reproductions/committed/", reproduce_views.committed_detail, name="reproduction_committed"),
    path("reproductions/committed/<str:name>", reproduce_views.committed_plot, name="reproduction_committed_plot"),
    path(RR, reproduce_views.reproduction_detail, name="reproduction"),
    path(RR + "cancel/", reproduce_views.reproduction_cancel, name="reproduction_cancel"),
    path(RR + "<str:name>", reproduce_views.reproduction_plot, name="reproduction_plot"),
])
