"""Typed settings read from the environment once, at start-up.

Bad values fail fast with pydantic's message naming the variable. When nothing is set the console runs
embedded: SQLite, in-memory channel layer, Celery on kombu's filesystem transport.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

BASE_DIR = Path(__file__).resolve().parent.parent


class ConsoleSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HAT_", extra="ignore", case_sensitive=False)

    debug: bool = Field(default=False, description="Django DEBUG")
    secret_key: str = Field(
        default="dev-only-insecure-key-change-me-in-production-0123456789",
        min_length=32,
        description="Django SECRET_KEY; must be set in production",
    )
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
    log_level: str = Field(default="INFO", pattern=r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)$")
    heartbeat_every_s: float = Field(default=10.0, gt=0, le=60,
                                     description="how often a running job on a worker says it is alive")
    heartbeat_stale_s: float = Field(default=60.0, gt=0, description="a running job silent for this long is "
                                     "marked failed (its worker died)")
    sweep_every_s: float = Field(default=20.0, gt=0, description="how often the sweep for dead jobs runs")
    cancel_grace_s: float = Field(default=300.0, gt=0, description="a training job asked to stop that is still "
                                  "running after this long has its Celery task revoked (terminated)")

    @field_validator("database_url")
    @classmethod
    def _database_scheme(cls, v: str | None) -> str | None:
        if v and not v.startswith(("postgres://", "postgresql://", "sqlite://")):
            raise ValueError("DATABASE_URL must start with postgres://, postgresql:// or sqlite://")
        return v

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, v: str | None) -> str | None:
        if v and not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("REDIS_URL must start with redis://, rediss:// or unix://")
        return v


def load_settings() -> ConsoleSettings:
    try:
        return ConsoleSettings()
    except Exception as exc:  # fail fast at import time with the variable names, not a traceback maze
        raise SystemExit(f"hat-console: invalid environment settings:\n{exc}") from None
