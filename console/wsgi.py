import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
if not settings.configured:  # this process serves web requests (not a test importing the routing)
    os.environ["HAT_WEB_PROCESS"] = "1"  # console.settings: PostgreSQL lock and statement timeouts
application = get_wsgi_application()
