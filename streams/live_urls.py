"""live pages (mounted by console.urls at "live/")."""

from django.urls import path

from streams import live_views as views

app_name = "live"

urlpatterns = [
    path("", views.live_list, name="list"),
    path("<uuid:session_id>/", views.live_session, name="session"),
    path("<uuid:session_id>/transcript/", views.live_transcript, name="transcript"),
    path("<uuid:session_id>/overlay/", views.live_overlay, name="overlay"),
    path("<uuid:session_id>/mute/", views.live_mute, name="mute"),
    path("<uuid:session_id>/approval/", views.live_approval, name="approval"),
    path("<uuid:session_id>/approve/", views.live_reply_approve, name="approve"),
    path("<uuid:session_id>/reject/", views.live_reply_reject, name="reject"),
    path("<uuid:session_id>/tool-decide/", views.live_tool_decide, name="tool_decide"),
    path("<uuid:session_id>/takeover/", views.live_takeover, name="takeover"),
    path("<uuid:session_id>/skip/", views.live_comment_skip, name="skip"),
    path("<uuid:session_id>/pin/", views.live_pin, name="pin"),
    path("<uuid:session_id>/end/", views.live_end, name="end"),
    path("<uuid:session_id>/overlay-tokens/", views.live_overlay_token_create, name="overlay_token_create"),
    path("<uuid:session_id>/overlay-tokens/revoke/", views.live_overlay_token_revoke, name="overlay_token_revoke"),
]

# session replays and "save as evaluation set": their own route module (streams.replay_urls)
from streams.replay_urls import urlpatterns as _replay_urls  # noqa: E402

urlpatterns += _replay_urls
