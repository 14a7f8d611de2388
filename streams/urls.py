"""Preview room pages and scenario runs (mounted at "preview/")."""

from django.urls import path

from streams import views

app_name = "streams"

urlpatterns = [
    path("", views.preview_list, name="preview_list"),
    path("runs/", views.run_list, name="run_list"),
    path("<uuid:room_id>/", views.preview_room, name="preview_room"),
    path("<uuid:room_id>/play/", views.preview_play, name="preview_play"),
    path("<uuid:room_id>/pause/", views.preview_pause, name="preview_pause"),
    path("<uuid:room_id>/resume/", views.preview_resume, name="preview_resume"),
    path("<uuid:room_id>/close/", views.preview_close, name="preview_close"),
    path("<uuid:room_id>/cancel/", views.run_cancel, name="run_cancel"),
    path("<uuid:room_id>/members/", views.preview_member_add, name="preview_member_add"),
    path("<uuid:room_id>/members/remove/", views.preview_member_remove, name="preview_member_remove"),
    path("<uuid:room_id>/transcript/", views.preview_transcript, name="preview_transcript"),
]
