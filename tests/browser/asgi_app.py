"""The console's ASGI application with static files served (as ``runserver`` does), for browser tests that
need WebSockets: ``python -m console.web_server --app tests.browser.asgi_app:application``. pytest-django's live_server is WSGI only."""

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

from console.asgi import application as console_application

application = ASGIStaticFilesHandler(console_application)
