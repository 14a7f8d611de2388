"""Preview room pages (mounted at "preview/")."""

from django.urls import path

from streams import views

app_name = "streams"

urlpatterns = [
    path("", views.preview_list, name="preview_list"),
    path("<uuid:room_id>/", views.preview_room, name="preview_room"),
    path("<uuid:room_id>/transcript/", views.preview_transcript, name="preview_transcript"),
]
