"""REST API routes of live (added to console.api_urls)."""

from django.urls import path

from streams import live_apis

S = "live/sessions/<uuid:session_id>/"

urlpatterns: list = [
    path("live/sessions/", live_apis.SessionListApi.as_view(), name="api-live-session-list"),
    path(S, live_apis.SessionDetailApi.as_view(), name="api-live-session-detail"),
    path(S + "end", live_apis.SessionEndApi.as_view(), name="api-live-session-end"),
    path(S + "tokens/", live_apis.TokenListApi.as_view(), name="api-live-token-list"),
    path(S + "tokens/<uuid:token_id>/revoke", live_apis.TokenRevokeApi.as_view(), name="api-live-token-revoke"),
    path(S + "comments", live_apis.CommentIngestApi.as_view(), name="api-live-comments"),
    path(S + "webhook", live_apis.WebhookApi.as_view(), name="api-live-webhook"),
]

# session replays and "save as evaluation set" (streams.replay_apis)
from streams import replay_apis  # noqa: E402

SR = S + "replays/<uuid:replay_id>/"
urlpatterns += [
    path(S + "replays/", replay_apis.ReplayListApi.as_view(), name="api-live-replay-list"),
    path(SR, replay_apis.ReplayDetailApi.as_view(), name="api-live-replay-detail"),
    path(SR + "turns/", replay_apis.ReplayTurnListApi.as_view(), name="api-live-replay-turns"),
    path(SR + "cancel/", replay_apis.ReplayCancelApi.as_view(), name="api-live-replay-cancel"),
    path(SR + "resume/", replay_apis.ReplayResumeApi.as_view(), name="api-live-replay-resume"),
    path(S + "eval-set/", replay_apis.SaveEvalSetApi.as_view(), name="api-live-save-eval-set"),
]
