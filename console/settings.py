"""Django settings. Every environment-dependent value comes from console.config (typed, read once)."""

from __future__ import annotations

import os

import dj_database_url

from console.config import BASE_DIR, load_settings, resolve_secret_key
from console.db_busy import web_session_options
from streams.tool_bindings.allow_lists import parse_mcp_servers, parse_tool_endpoints

ENV = load_settings()
WEB_PROCESS = os.environ.pop("HAT_WEB_PROCESS", "") == "1"
ENV.data_dir.mkdir(parents=True, exist_ok=True)

DEBUG = ENV.debug
SECRET_KEY = resolve_secret_key(ENV)  # refuses to start with debug off and no key
ALLOWED_HOSTS = ENV.allowed_hosts
CSRF_TRUSTED_ORIGINS = ENV.csrf_trusted_origins

# Behind TLS these come from the environment (README, "Deployment"); `check --deploy` passes with them set.
SECURE_SSL_REDIRECT = ENV.secure_ssl_redirect
SECURE_HSTS_SECONDS = ENV.secure_hsts_seconds
SECURE_HSTS_INCLUDE_SUBDOMAINS = ENV.secure_hsts_include_subdomains
SECURE_HSTS_PRELOAD = ENV.secure_hsts_preload
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = ENV.secure_cookies
if ENV.secure_proxy_ssl_header:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
HAT_CONTENT_SECURITY_POLICY = ENV.csp  # '' = console.security.DEFAULT_POLICY
# /health/ is probed by load balancers over plain HTTP inside the network: never redirect it to HTTPS.
SECURE_REDIRECT_EXEMPT = [r"^health/"]

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
    "console.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "console.db_busy.DatabaseBusyMiddleware",  # a pool or lock timeout: 503 with Retry-After, not a 500
    "console.middleware.BadInputMiddleware",  # NUL in any input, unparsable form bodies: 4xx before any view
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
                "console.bell.bell",  # the header's notification bell (counts only when a page shows it)
            ],
        },
    }
]

if ENV.database_url:
    # Never conn_max_age > 0 under ASGI: each request thread would keep its own connection open (about 95 under
    # 20 requests/s + 50 viewers, past PostgreSQL's max_connections). Django's psycopg pool bounds a process to
    # HAT_DB_POOL_MAX connections; requests borrow one and give it back when they end.
    DATABASES = {"default": dj_database_url.parse(ENV.database_url, conn_max_age=0)}
    if ENV.db_pool_max and DATABASES["default"]["ENGINE"].endswith("postgresql"):
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": min(ENV.db_pool_min, ENV.db_pool_max), "max_size": ENV.db_pool_max,
            "timeout": ENV.db_pool_timeout_s,
        }
    # The web process (console.asgi / console.wsgi say so before the settings load; popped so that nothing it
    # starts inherits it) sets lock and statement timeouts on its sessions: console.db_busy.
    if WEB_PROCESS and DATABASES["default"]["ENGINE"].endswith("postgresql"):
        timeouts = web_session_options(ENV.db_lock_timeout_s, ENV.db_statement_timeout_s)
        options = DATABASES["default"].setdefault("OPTIONS", {})
        options["options"] = " ".join(filter(None, (options.get("options", ""), timeouts)))
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
    # Redis pub/sub: a group message is one PUBLISH that Redis pushes to each subscribed process at once (the core
    # layer's sorted-set bookkeeping and per-channel lists cost two more round trips and a pop per process: about
    # 2-8 ms against 1 at the median, bench/live_bench.py). Nothing is kept for a process that is not listening,
    # which the event feeds never relied on: they fill gaps from the database (streams/event_feed.py).
    # The socket timeout stays well above the receiver's 0.1 s polls on a busy machine.
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                    "CONFIG": {"hosts": [{"address": ENV.redis_url, "socket_timeout": 30,
                                          "socket_connect_timeout": 5, "socket_keepalive": True}]}}
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# The cache holds what every web process must agree on (failed sign-ins, console.signin): Redis when there is
# one (short timeouts: a Redis blip must not hang a sign-in), else this process's memory (one embedded process).
if ENV.redis_url:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": ENV.redis_url,
                          "KEY_PREFIX": "hat", "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
HAT_SIGNIN_MAX_FAILURES = ENV.signin_max_failures
HAT_SIGNIN_WINDOW_S = ENV.signin_window_s

# Celery: Redis when REDIS_URL is set, else kombu's filesystem transport (a real worker, no server).
CELERY_QUEUE_DIR = ENV.data_dir / "celery"
if ENV.celery_broker_url or ENV.redis_url:
    CELERY_BROKER_URL = ENV.celery_broker_url or ENV.redis_url
    # A dead Redis connection fails within HAT_BROKER_TIMEOUT_S instead of hanging; keepalive and a health check
    # before reusing an idle pooled connection notice a silently dropped one.
    CELERY_BROKER_TRANSPORT_OPTIONS: dict = {
        "socket_timeout": ENV.broker_timeout_s,
        "socket_connect_timeout": ENV.broker_timeout_s,
        "socket_keepalive": True,
        "health_check_interval": 25,
        "retry_on_timeout": True,
    }
    CELERY_RESULT_BACKEND = ENV.redis_url
    CELERY_REDIS_SOCKET_TIMEOUT = CELERY_REDIS_SOCKET_CONNECT_TIMEOUT = ENV.broker_timeout_s
    CELERY_REDIS_SOCKET_KEEPALIVE = CELERY_REDIS_RETRY_ON_TIMEOUT = True
    CELERY_REDIS_BACKEND_HEALTH_CHECK_INTERVAL = 25
    CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"retry_policy": {"max_retries": 3, "interval_start": 0,
                                                                 "interval_step": 0.5, "interval_max": 1}}
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
CELERY_TASK_DEFAULT_QUEUE = ENV.celery_default_queue
# Interactive work has a worker of its own (threads, several at once): a preview turn or a live session's runner
# never waits behind a dataset build, training or evaluation (those go to "gpu"). HAT_INTERACTIVE_QUEUE.
INTERACTIVE_QUEUE = ENV.interactive_queue
CELERY_TASK_ROUTES = {name: {"queue": INTERACTIVE_QUEUE} for name in (
    "streams.preview_turn", "streams.preview_clock_tick", "streams.live_session_run")}
# Surviving a broker outage. The worker retries its broker connection forever (at start-up too) rather than exit
# after 100 tries; a supervisor (scripts/supervise.py, deploy/systemd) restarts it if it dies anyway. Workers run
# without gossip (WORKER_OPTIONS): kombu 5.7.0 crashes the worker on a lost Redis connection when gossip's
# auto-delete queue is on the consumer's channel (README, "Redis outages").
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_BROKER_CONNECTION_TIMEOUT = ENV.broker_timeout_s
# Running tasks go on through a broker blip (a training stage must not be killed by a Redis restart); their
# acknowledgement may be lost, and redelivered tasks are made idempotent by the services.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# Sending a task retries for about 2 s, then fails (a web request must not hang on a dead broker; the
# scheduler re-sends what a playing room's clock is missing).
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
HEARTBEAT_EVERY_S = ENV.heartbeat_every_s
HEARTBEAT_STALE_S = ENV.heartbeat_stale_s
# A job asked to stop that is still running this long after (a step that hangs) has its task revoked with SIGTERM
# by the sweep (console.jobs); HAT_CANCEL_GRACE_S. TRAINING_CANCEL_GRACE_S: its former name.
JOB_CANCEL_GRACE_S = ENV.cancel_grace_s
TRAINING_CANCEL_GRACE_S = JOB_CANCEL_GRACE_S
# The periodic sweeps, run by the scheduler process (`manage.py run_scheduler`, apart from the workers): it calls
# each task's function in its own process, so a job whose worker died is ended even when no worker is alive. One
# sweep covers every job kind (console.jobs.jobs_sweep_stalled); the play sweep re-sends lost clock ticks.
CELERY_BEAT_SCHEDULE = {
    "jobs-sweep-stalled": {"task": "console.jobs_sweep_stalled", "schedule": ENV.sweep_every_s},
    "preview-play-sweep-stalled": {"task": "streams.preview_play_sweep_stalled", "schedule": ENV.sweep_every_s},
    "live-runners-sweep": {"task": "streams.live_runners_sweep", "schedule": ENV.sweep_every_s},
    "servers-check": {"task": "streams.servers_check", "schedule": ENV.sweep_every_s},
}
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1

# The default model endpoint of the preview room (seeded as a ModelEndpoint row by
# streams.services.model_endpoint_ensure_default): HAT_LOCAL_MODEL_URL, HAT_LOCAL_MODEL_NAME.
HAT_LOCAL_MODEL_URL = ENV.local_model_url
HAT_LOCAL_MODEL_NAME = ENV.local_model_name
HAT_FLAGSHIP_MODEL_URL = ENV.flagship_model_url
HAT_FLAGSHIP_MODEL_NAME = ENV.flagship_model_name
# Where outbound requests may go (model and HTTP tool endpoints; streams.engine.outbound.check_url).
HAT_OUTBOUND_HOSTS = list(ENV.outbound_hosts)
# Where console-launched model servers may listen (streams.services.serving.serve_spec_check): HAT_SERVE_LISTEN_HOSTS.
HAT_SERVE_LISTEN_HOSTS = list(ENV.serve_listen_hosts)
# What tool bindings may call (streams.tool_bindings; streams.services.tool_runtime builds the runtime from these):
# HAT_TOOL_ENDPOINTS, HAT_MCP_SERVERS, parsed and checked at start-up. Secret values are read at call time from
# the variables HAT_TOOL_SECRETS_<NAME>; HAT_TOOL_SECRETS (name -> value) may add some in a settings module.
HAT_TOOL_ENDPOINTS = parse_tool_endpoints(ENV.tool_endpoints)
HAT_MCP_SERVERS = parse_mcp_servers(ENV.mcp_servers)
HAT_TOOL_SECRETS: dict[str, str] = {}
# Where the registry's approval gate gets its evidence (harness_editor.gate): a function (HarnessVersion) ->
# GateEvidence, named here so the registry imports nothing from training. '' = no gate.
HAT_APPROVAL_EVIDENCE = "training_jobs.gate.approval_evidence"
# The same for the runtime, which imports nothing from training (.importlinter): where serving and deployments read
# the registered models (streams.model_artefacts; '' = none), and what saves a live session's turns as an eval set
# (streams.services.session_eval_sets; '' = not offered).
HAT_MODEL_ARTEFACTS = "training_jobs.model_artefacts.PROVIDER"
HAT_SAVE_SESSION_AS_EVAL_SET = "training_jobs.session_eval_set_services.live_session_save_as_eval_set"
# The home page's sections of the runtime and of training (console.home: each role lands on its work), named here so
# console imports neither app.
HAT_HOME_SECTIONS = ["streams.home_sections.live_sessions", "training_jobs.home_sections.running_work"]
# What a label move reaches (harness_editor.label_impact: deployments, live sessions, rooms), for the registry's
# confirmation pages; named here so the registry imports nothing from the runtime. '' = not reported.
HAT_LABEL_IMPACT = "streams.label_impact.label_impact"
# Which tools of a version answer with a fault on this host (harness_editor.tool_availability: the version page
# shows what Try shows), named here for the same reason. '' = not shown.
HAT_TOOL_AVAILABILITY = "streams.services.tool_runtime.tool_bindings_available"

# E-mail (notifications): console.config email_* and console_url (HAT_EMAIL_BACKEND, HAT_EMAIL_HOST, ...).
EMAIL_BACKEND = ENV.email_backend
DEFAULT_FROM_EMAIL = SERVER_EMAIL = ENV.default_from_email
EMAIL_HOST, EMAIL_PORT = ENV.email_host, ENV.email_port
EMAIL_HOST_USER, EMAIL_HOST_PASSWORD = ENV.email_host_user, ENV.email_host_password
EMAIL_USE_TLS, EMAIL_TIMEOUT = ENV.email_use_tls, ENV.email_timeout
HAT_EMAIL_RETRY_S, HAT_EMAIL_RETRIES = ENV.email_retry_s, ENV.email_retries  # console.tasks.notifications_email
HAT_CONSOLE_URL = ENV.console_url.rstrip("/")

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
    # JSON through console.jsonsafe: too deep (RecursionError), NUL or NaN is a 400, never a 500
    "DEFAULT_PARSER_CLASSES": [
        "console.parsing.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}
# Request bodies (forms, JSON) above this are refused: 413 with the API's error body, a 400 page elsewhere.
# Django's default, stated: manifests are at most 1 MB of text (harness_editor.schemas.MAX_MANIFEST_BYTES).
DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440
SPECTACULAR_SETTINGS = {
    "TITLE": "hat-console API",
    "DESCRIPTION": "Harness registry, approvals, labels, diff and audit for HAT avatar agents.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # every operation documents the 400/413 that malformed input gets (console.apis.document_bad_input)
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "console.apis.document_bad_input"],
    # two models have a "status" field: name both enums (the harness version's keeps its old name)
    "ENUM_NAME_OVERRIDES": {"StatusEnum": "harness_editor.models.HarnessVersion.Status",
                            "DatasetKindEnum": "training_jobs.models.Dataset.Kind",
                            "DatasetStatusEnum": "training_jobs.models.Dataset.Status"},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "filters": {"refusal_without_traceback": {"()": "console.log_filters.RefusalWithoutTraceback"}},
    "root": {"handlers": ["console"], "level": ENV.log_level},
    # httpx logs every request at INFO: one line per model call drowns a scenario run; a 403 is a warning line,
    # not a traceback (console.log_filters)
    "loggers": {"django.db.backends": {"level": "WARNING"}, "httpx": {"level": "WARNING"},
                "django.request": {"filters": ["refusal_without_traceback"]}},
}
