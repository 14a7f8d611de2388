"""live pages (mounted by console.urls)."""

from django.urls import path  # noqa: F401

app_name = "live"

urlpatterns: list = []

# session replays and "save as evaluation set": their own route module (streams.replay_urls)
from streams.replay_urls import urlpatterns as _replay_urls  # noqa: E402

urlpatterns += _replay_urls
