"""REST API routes of serving (added to console.api_urls)."""

from django.urls import path  # noqa: F401

urlpatterns: list = []
