"""Dataset pages (mounted at "datasets/" by console.urls), training pages ("training/", namespace "training")
and the model registry ("models/", namespace "models")."""

from django.urls import path

from training_jobs import views

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
