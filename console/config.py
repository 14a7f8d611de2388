"""Typed settings read from the environment once, at start-up.

Bad values fail fast with pydantic's message naming the variable. When nothing is set the console runs
embedded: SQLite, in-memory channel layer, Celery on kombu's filesystem transport.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

BASE_DIR = Path(__file__).resolve().parent.parent


class ConsoleSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HAT_", extra="ignore", case_sensitive=False)

    debug: bool = Field(default=False, description="Django DEBUG")
    # No key is committed: with debug off the console refuses to start without one (resolve_secret_key).
    secret_key: str | None = Field(default=None, min_length=32, description="Django SECRET_KEY")
    secret_key_file: Path | None = Field(default=None, description="a file holding the Django SECRET_KEY "
                                         "(e.g. a mounted secret); used when HAT_SECRET_KEY is unset")
    # Transport security, all off by default (the embedded setup is plain HTTP on loopback); behind TLS set them.
    secure_ssl_redirect: bool = Field(default=False, description="redirect every HTTP request to HTTPS")
    secure_hsts_seconds: int = Field(default=0, ge=0, le=63072000, description="HSTS max-age (0: no header)")
    secure_hsts_include_subdomains: bool = Field(default=False)
    secure_hsts_preload: bool = Field(default=False)
    secure_cookies: bool = Field(default=False, description="session and CSRF cookies only over HTTPS")
    secure_proxy_ssl_header: bool = Field(default=False, description="trust X-Forwarded-Proto: https from the "
                                          "proxy in front (only behind a proxy that sets it)")
    csp: str = Field(default="", description="Content-Security-Policy header ('' = the console's default policy)")
    signin_max_failures: int = Field(default=5, ge=1, le=1000, description="failed sign-ins per username and "
                                     "address (ten times that per address) before further attempts wait")
    signin_window_s: float = Field(default=900.0, ge=10, le=86400, description="how long failed sign-ins count")
    # PostgreSQL: Django's psycopg pool, one per process (web, each worker process, each command).
    db_pool_min: int = Field(default=1, ge=0, le=100, description="connections a process keeps open")
    db_pool_max: int = Field(default=8, ge=0, le=200, description="most connections a process opens "
                             "(0: no pool, one connection per thread closed after each request)")
    db_pool_timeout_s: float = Field(default=10.0, gt=0, le=300, description="a request waits this long for "
                                     "a free connection, then fails")
    # Web requests only (console.settings): a request queued on a row lock gives its pooled connection back after
    # db_lock_timeout_s, before the others waiting for a connection reach db_pool_timeout_s; both are a 503 with
    # Retry-After (console.db_busy). Workers, the scheduler and commands run long work and get neither.
    db_lock_timeout_s: float = Field(default=5.0, ge=0, le=3600, description="a web request's statement waits "
                                     "at most this long for a lock (PostgreSQL lock_timeout; 0: no limit)")
    db_statement_timeout_s: float = Field(default=30.0, ge=0, le=86400, description="a web request's statement "
                                          "runs at most this long (PostgreSQL statement_timeout; 0: no limit)")
    allowed_hosts: list[str] = Field(default=["localhost", "127.0.0.1", "[::1]", "testserver"])
    csrf_trusted_origins: list[str] = Field(default=[])
    data_dir: Path = Field(default=BASE_DIR / "var", description="SQLite file, Celery queue folders, artifacts")
    # Unprefixed by convention (12-factor): DATABASE_URL, REDIS_URL, CELERY_BROKER_URL.
    database_url: str | None = Field(default=None, validation_alias="DATABASE_URL")
    redis_url: str | None = Field(default=None, validation_alias="REDIS_URL")
    celery_broker_url: str | None = Field(default=None, validation_alias="CELERY_BROKER_URL")
    celery_always_eager: bool = Field(default=False, description="run tasks inline (never in production)")
    local_model_url: str = Field(default="http://127.0.0.1:8011/v1",
                                 description="the local OpenAI-compatible model server (the default endpoint)")
    # transformers serve pins the model it was started with and only accepts that name: its absolute path.
    local_model_name: str = Field(default=str(BASE_DIR / "models" / "demo-tiny"), min_length=1,
                                  description="the model name the local server accepts")
    # make run's second model server (SmolLM2-135M + the glow-gadget demo adapter; seed_demo's endpoint "flagship"):
    # vLLM serves the adapter under its --lora-modules name
    flagship_model_url: str = Field(default="http://127.0.0.1:8012/v1",
                                    description="the model server that answers on the flagship harness glow-gadget")
    flagship_model_name: str = Field(default="glow-gadget-smollm2", min_length=1,
                                     description="the model name that server accepts (the adapter's name)")
    # Outbound requests (model endpoints) go only to these hosts (streams.engine.outbound); API keys are the
    # variables HAT_ENDPOINT_SECRET_<NAME> (console.secrets), referenced by name from endpoint records.
    outbound_hosts: list[str] = Field(default=["127.0.0.1", "localhost", "::1"],
                                      description="hosts (or host:port) model endpoints and HTTP tool "
                                      "endpoints may be on, a JSON list; a bare host allows any port for model "
                                      "endpoints, 80/443 only for tool endpoints")
    # The addresses console-launched model servers may listen on (a serve profile's host; streams.services.serving):
    # loopback unless the administrator of the hosts adds another. vLLM's API has no authentication.
    serve_listen_hosts: list[str] = Field(default=["127.0.0.1", "localhost", "::1"],
                                          description="addresses model servers launched from serve profiles may "
                                          "listen on, a JSON list (add 0.0.0.0 only where a firewall or proxy "
                                          "guards the ports)")
    # Tool bindings (streams.tool_bindings): what http and mcp bindings may call, each a mapping name -> entry (or a
    # list of entries with a name) as inline JSON or the path of a YAML/JSON file. Secrets their headers name as
    # {secret:NAME} are the variables HAT_TOOL_SECRETS_<NAME> (streams.tool_bindings.allow_lists.tool_secrets).
    tool_endpoints: str = Field(default="", description="the HTTP endpoints http tool bindings may call: inline "
                                "JSON or a YAML/JSON file path; each entry base_url, methods, headers, timeout_s, "
                                "max_response_bytes, max_retries")
    mcp_servers: str = Field(default="", description="the MCP servers mcp tool bindings may call: inline JSON or a "
                             "YAML/JSON file path; each entry transport (stdio|http), command or url, headers, env, "
                             "timeout_s")
    log_level: str = Field(default="INFO", pattern=r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)$")
    heartbeat_every_s: float = Field(default=10.0, gt=0, le=60,
                                     description="how often a running job on a worker says it is alive")
    # A job whose worker died is failed at most stale + sweep (50 s) after its last beat: 3 beats may be missed.
    heartbeat_stale_s: float = Field(default=40.0, gt=0, description="a running job silent for this long is "
                                     "marked failed (its worker died)")
    sweep_every_s: float = Field(default=10.0, gt=0, description="how often the scheduler runs the sweeps")
    cancel_grace_s: float = Field(default=300.0, gt=0, description="a job asked to stop that is still "
                                  "running after this long has its Celery task revoked (terminated)")
    # Celery against a broker that can go away (Redis restarts, failovers): see the Celery section of settings.
    celery_default_queue: str = Field(default="celery", pattern=r"^[A-Za-z0-9_.-]{1,64}$",
                                      description="the queue of every task not sent to 'gpu' (workers consume it "
                                      "with -Q); consoles sharing one Redis database need different names")
    interactive_queue: str = Field(default="interactive", pattern=r"^[A-Za-z0-9_.-]{1,64}$",
                                   description="the queue of interactive work (preview turns, clock ticks, live "
                                   "session runners): its own worker, never behind batch jobs on 'gpu'")
    # A thread that wants the GIL waits up to the switch interval for a busy one (CPython: 5 ms). In the web process
    # (event loop + database threads) and the interactive worker (session runners + the event publisher thread)
    # that wait lands on every token a viewer sees; 0.5 ms keeps it under a millisecond (bench/live_bench.py).
    gil_switch_s: float = Field(default=0.0005, ge=0, le=0.1, description="CPython's GIL switch interval in the "
                                "web process and the interactive worker (0: Python's default, 5 ms)")
    # A full (generation-2) collection walks every object the process holds: after start-up that is Django, the
    # apps and their libraries, and a walk took 125-158 ms in the web process and the interactive worker, a pause
    # every viewer of every session sees. Frozen at start-up, that heap is left out of collections
    # (bench/live_bench.py).
    gc_freeze: bool = Field(default=True, description="freeze the start-up heap out of Python's cyclic garbage "
                            "collector in the web process and the interactive worker")
    # What start-up imports lazily (views, templates, the turn engine) and every open socket still make full
    # collections of 70-110 ms, every 20 s or so under load with Python's threshold (10 younger collections): spaced
    # out, they fall on few turns. The price: cyclic garbage (about 20,000 objects between two full collections at
    # Python's threshold under bench/live_bench.py) waits 10 times longer; plain garbage is still freed at once.
    gc_full_every: int = Field(default=100, ge=10, le=1_000_000, description="Python's third GC threshold in the "
                               "web process and the interactive worker: generation-1 collections per full one "
                               "(Python's default 10)")
    # E-mail (notifications): Django's mail backend; the default prints each message on the output of the worker that
    # sends it, so nothing leaves the machine until a real backend is set. Mail is sent by a Celery task on the default
    # (batch) queue once the change commits (console.tasks.notifications_email): a slow or down mail server never
    # holds or fails a request; the task retries with growing waits, then gives up (the notification stays in-app).
    email_backend: str = Field(default="django.core.mail.backends.console.EmailBackend",
                               pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$", description="Django EMAIL_BACKEND, e.g. "
                               "django.core.mail.backends.smtp.EmailBackend")
    default_from_email: str = Field(default="hat-console <hat-console@localhost>", min_length=3,
                                    description="the sender of notification mail")
    email_host: str = Field(default="localhost", description="SMTP host (smtp backend)")
    email_port: int = Field(default=25, ge=1, le=65535, description="SMTP port")
    email_host_user: str = Field(default="", description="SMTP user")
    email_host_password: str = Field(default="", description="SMTP password")
    email_use_tls: bool = Field(default=False, description="STARTTLS to the SMTP server")
    email_timeout: int = Field(default=10, ge=1, le=120, description="seconds a slow mail server may hold the "
                               "sending task (a socket operation), before it counts as down")
    email_retry_s: float = Field(default=30.0, ge=0.1, le=3600, description="wait before the first retry of mail "
                                 "the server refused for now or could not take; doubled at each retry (up to 30 min)")
    email_retries: int = Field(default=8, ge=0, le=50, description="retries of notification mail before it is given "
                               "up (the notifications stay in-app)")
    console_url: str = Field(default="http://localhost:8000", pattern=r"^https?://[^\s/]+",
                             description="the console's address, for the links in notification mail")
    broker_timeout_s: float = Field(default=3.0, gt=1, le=60, description="Redis socket and connect timeout of "
                                    "Celery (broker, results): an operation on a dead connection fails after this")

    @field_validator("database_url")
    @classmethod
    def _database_scheme(cls, v: str | None) -> str | None:
        if v and not v.startswith(("postgres://", "postgresql://", "sqlite://")):
            raise ValueError("DATABASE_URL must start with postgres://, postgresql:// or sqlite://")
        return v

    @field_validator("tool_endpoints")
    @classmethod
    def _tool_endpoints(cls, v: str, info: ValidationInfo) -> str:
        from streams.tool_bindings.allow_lists import parse_tool_endpoints

        # a bad allow-list, or an endpoint on a host or port HAT_OUTBOUND_HOSTS does not allow, stops the start
        parse_tool_endpoints(v, info.data.get("outbound_hosts"))
        return v

    @field_validator("mcp_servers")
    @classmethod
    def _mcp_servers(cls, v: str, info: ValidationInfo) -> str:
        from streams.tool_bindings.allow_lists import parse_mcp_servers

        # as for tool endpoints: an http server on a host or port HAT_OUTBOUND_HOSTS does not allow stops the start
        parse_mcp_servers(v, info.data.get("outbound_hosts"))
        return v

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, v: str | None) -> str | None:
        if v and not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("REDIS_URL must start with redis://, rediss:// or unix://")
        return v


def resolve_secret_key(env: ConsoleSettings) -> str:
    """HAT_SECRET_KEY, else the file HAT_SECRET_KEY_FILE names, else — with debug on only — a key generated once
    for this data folder. With debug off and no key the console refuses to start: a key known to anyone who read
    the repository signs sessions, password resets and CSRF tokens."""
    if env.secret_key:
        return env.secret_key
    if env.secret_key_file is not None:
        try:
            key = env.secret_key_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SystemExit(f"hat-console: HAT_SECRET_KEY_FILE cannot be read: {exc}") from None
        if len(key) < 32:
            raise SystemExit(f"hat-console: the key in HAT_SECRET_KEY_FILE ({env.secret_key_file}) is shorter "
                             "than 32 characters") from None
        return key
    if not env.debug:
        raise SystemExit("hat-console: HAT_SECRET_KEY (or HAT_SECRET_KEY_FILE) is not set and debug is off: "
                         "refusing to start without a secret key. Set one, e.g. "
                         "HAT_SECRET_KEY=$(python -c 'import secrets; print(secrets.token_urlsafe(50))')")
    return _development_key(env.data_dir)


def _development_key(data_dir: Path) -> str:
    import secrets

    path = data_dir / "dev_secret_key"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50), encoding="utf-8")
        path.chmod(0o600)
    return path.read_text(encoding="utf-8").strip()


def load_settings() -> ConsoleSettings:
    try:
        return ConsoleSettings()
    except Exception as exc:  # fail fast at import time with the variable names, not a traceback maze
        raise SystemExit(f"hat-console: invalid environment settings:\n{exc}") from None
