"""Session replay pages and "save as evaluation set", under a live session (added to streams.live_urls, namespace
"live"): views in streams.replay_views."""

from django.urls import path

from streams import replay_views as views

S = "<uuid:session_id>/"
R = S + "replays/<uuid:replay_id>/"

urlpatterns = [
    path(S + "replays/", views.replay_list, name="replay_list"),
    path(S + "replays/new/", views.replay_new, name="replay_new"),
    path(R, views.replay_detail, name="replay_detail"),
    path(R + "cancel/", views.replay_cancel, name="replay_cancel"),
    path(R + "resume/", views.replay_resume, name="replay_resume"),
    path(S + "save-eval-set/", views.save_eval_set, name="save_eval_set"),
]
