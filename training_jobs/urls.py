"""Dataset pages (mounted at "datasets/" by console.urls)."""

from django.urls import path

from training_jobs import views

app_name = "training_jobs"

D = "<uuid:dataset_id>/"

urlpatterns = [
    path("", views.dataset_list, name="list"),
    path("new/", views.dataset_new, name="new"),
    path(D, views.dataset_detail, name="detail"),
    path(D + "cancel/", views.dataset_cancel, name="cancel"),
    path(D + "samples/", views.dataset_samples, name="samples"),
    path(D + "samples/<int:index>/", views.dataset_sample, name="sample"),
]
