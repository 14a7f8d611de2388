"""live pages (mounted by console.urls)."""

from django.urls import path  # noqa: F401

app_name = "live"

urlpatterns: list = []
