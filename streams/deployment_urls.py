"""Deployment pages (mounted at /deployments/ by console.urls)."""

from django.urls import path

from streams import deployment_views as views

app_name = "deployment"

D = "<slug:name>/"
R = D + "revisions/<int:number>/"

urlpatterns: list = [
    path("", views.deployment_list, name="list"),
    path("new/", views.deployment_new, name="new"),
    path(D, views.deployment_detail, name="detail"),
    path(D + "propose/", views.deployment_propose, name="propose"),
    path(D + "rollback/", views.deployment_rollback, name="rollback"),
    path(R, views.revision_detail, name="revision"),
    path(R + "approve/", views.revision_approve, name="approve"),
    path(R + "reject/", views.revision_reject, name="reject"),
    path(R + "withdraw/", views.revision_withdraw, name="withdraw"),
]
