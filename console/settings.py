"""Django settings. Every environment-dependent value comes from console.config (typed, read once)."""

from __future__ import annotations

import dj_database_url

from console.config import BASE_DIR, load_settings

ENV = load_settings()
ENV.data_dir.mkdir(parents=True, exist_ok=True)

DEBUG = ENV.debug
SECRET_KEY = ENV.secret_key
ALLOWED_HOSTS = ENV.allowed_hosts
CSRF_TRUSTED_ORIGINS = ENV.csrf_trusted_origins

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "channels",
    "console",
    "harness_editor",
    "streams",
    "training_jobs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"
ASGI_APPLICATION = "console.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context_processors.roles",
            ],
        },
    }
]

if ENV.database_url:
    DATABASES = {"default": dj_database_url.parse(ENV.database_url, conn_max_age=60)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": ENV.data_dir / "console.sqlite3",
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if ENV.redis_url:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [ENV.redis_url]}}
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Celery: Redis when REDIS_URL is set, else kombu's filesystem transport (a real worker, no server).
CELERY_QUEUE_DIR = ENV.data_dir / "celery"
if ENV.celery_broker_url or ENV.redis_url:
    CELERY_BROKER_URL = ENV.celery_broker_url or ENV.redis_url
    CELERY_BROKER_TRANSPORT_OPTIONS: dict = {}
    CELERY_RESULT_BACKEND = ENV.redis_url
else:
    for sub in ("in", "processed", "control"):
        (CELERY_QUEUE_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_QUEUE_DIR / "in"),
        "data_folder_out": str(CELERY_QUEUE_DIR / "in"),
        "processed_folder": str(CELERY_QUEUE_DIR / "processed"),
        "control_folder": str(CELERY_QUEUE_DIR / "control"),
        "store_processed": False,
    }
    CELERY_RESULT_BACKEND = f"file://{CELERY_QUEUE_DIR / 'results'}"
    (CELERY_QUEUE_DIR / "results").mkdir(parents=True, exist_ok=True)
CELERY_TASK_ALWAYS_EAGER = ENV.celery_always_eager
HEARTBEAT_EVERY_S = ENV.heartbeat_every_s
HEARTBEAT_STALE_S = ENV.heartbeat_stale_s
TRAINING_CANCEL_GRACE_S = ENV.cancel_grace_s
# Run by `celery beat` (`make run` embeds it in its worker with -B): finds jobs whose worker died.
CELERY_BEAT_SCHEDULE = {
    "datasets-sweep-stalled": {"task": "training_jobs.datasets_sweep_stalled", "schedule": ENV.sweep_every_s},
    "scenario-runs-sweep-stalled": {"task": "streams.scenario_runs_sweep_stalled", "schedule": ENV.sweep_every_s},
    "training-jobs-sweep-stalled": {"task": "training_jobs.training_jobs_sweep_stalled",
                                    "schedule": ENV.sweep_every_s},
}
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1

# The default model endpoint of the preview room (seeded as a ModelEndpoint row by
# streams.services.model_endpoint_ensure_default): HAT_LOCAL_MODEL_URL, HAT_LOCAL_MODEL_NAME.
HAT_LOCAL_MODEL_URL = ENV.local_model_url
HAT_LOCAL_MODEL_NAME = ENV.local_model_name

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = ENV.data_dir / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise serves from finders (below); the folder just has to exist
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True  # serve straight from the app folders: no collectstatic step to forget

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "console.apis.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "hat-console API",
    "DESCRIPTION": "Harness registry, approvals, labels, diff and audit for HAT avatar agents.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # two models have a "status" field: name both enums (the harness version's keeps its old name)
    "ENUM_NAME_OVERRIDES": {"StatusEnum": "harness_editor.models.HarnessVersion.Status",
                            "DatasetKindEnum": "training_jobs.models.Dataset.Kind",
                            "DatasetStatusEnum": "training_jobs.models.Dataset.Status"},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": ENV.log_level},
    # httpx logs every request at INFO: one line per model call drowns a scenario run
    "loggers": {"django.db.backends": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}
