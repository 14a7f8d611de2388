"""Console pages (mounted at "" by console.urls)."""

from django.templatetags.static import static
from django.urls import path
from django.views.generic import RedirectView

from console import views

urlpatterns = [
    # browsers ask for /favicon.ico whatever the page links: send them to the icon (no 404 in the log)
    path("favicon.ico", RedirectView.as_view(url=static("console/favicon.svg"), permanent=False), name="favicon"),
    path("", views.home, name="home"),
    path("timeline/", views.timeline, name="timeline"),
]
