"""Console pages (mounted at "" by console.urls)."""

from django.urls import path

from console import views

urlpatterns = [
    path("", views.home, name="home"),
    path("timeline/", views.timeline, name="timeline"),
]
