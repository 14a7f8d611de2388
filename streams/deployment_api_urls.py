"""REST API routes of deployments (added to console.api_urls)."""

from django.urls import path

from streams import deployment_apis as apis

D = "deployments/<slug:deployment>/"
R = D + "revisions/<int:number>/"

urlpatterns: list = [
    path("deployments/", apis.DeploymentListCreateApi.as_view(), name="api-deployment-list"),
    path(D, apis.DeploymentDetailApi.as_view(), name="api-deployment-detail"),
    path(D + "propose/", apis.DeploymentProposeApi.as_view(), name="api-deployment-propose"),
    path(D + "rollback/", apis.DeploymentRollbackApi.as_view(), name="api-deployment-rollback"),
    path(R, apis.RevisionDetailApi.as_view(), name="api-deployment-revision"),
    path(R + "approve/", apis.RevisionApproveApi.as_view(), name="api-deployment-approve"),
    path(R + "reject/", apis.RevisionRejectApi.as_view(), name="api-deployment-reject"),
    path(R + "withdraw/", apis.RevisionWithdrawApi.as_view(), name="api-deployment-withdraw"),
]
