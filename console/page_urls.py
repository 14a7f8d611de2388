"""Console pages (mounted at "" by console.urls)."""

from django.templatetags.static import static
from django.urls import path
from django.views.generic import RedirectView

from console import notification_views, views

urlpatterns = [
    # browsers ask for /favicon.ico whatever the page links: send them to the icon (no 404 in the log)
    path("favicon.ico", RedirectView.as_view(url=static("console/favicon.svg"), permanent=False), name="favicon"),
    path("", views.home, name="home"),
    path("timeline/", views.timeline, name="timeline"),
    path("timeline/export.csv", views.timeline_export, name="timeline_export"),
    path("notifications/", notification_views.notification_list, name="notifications"),
    path("notifications/bell/", notification_views.notification_bell, name="notification_bell"),
    path("notifications/read-all/", notification_views.notification_read_all, name="notifications_read_all"),
    path("notifications/email/", notification_views.notification_email, name="notification_email"),
    path("notifications/<int:notification_id>/read/", notification_views.notification_read,
         name="notification_read"),
    path("notifications/<int:notification_id>/open/", notification_views.notification_open,
         name="notification_open"),
]
