"""Settings come from the environment once, typed, and a bad value stops start-up naming the variable."""

import pytest

from console.config import ConsoleSettings, load_settings


def test_defaults_are_the_embedded_setup(monkeypatch):
    for name in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "HAT_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    s = ConsoleSettings()
    assert s.database_url is None and s.redis_url is None and s.debug is False


@pytest.mark.parametrize("name,value,fragment", [
    ("DATABASE_URL", "mysql://x", "DATABASE_URL must start with"),
    ("REDIS_URL", "http://localhost", "REDIS_URL must start with"),
    ("HAT_DEBUG", "maybe", "debug"),
    ("HAT_SECRET_KEY", "short", "secret_key"),
    ("HAT_LOG_LEVEL", "LOUD", "log_level"),
    ("HAT_ALLOWED_HOSTS", "not-json", "allowed_hosts"),
])
def test_bad_values_fail_fast_with_the_variable_name(monkeypatch, name, value, fragment):
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as info:
        load_settings()
    assert "invalid environment settings" in str(info.value)
    assert fragment.lower() in str(info.value).lower()


def test_urls_switch_to_real_services(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://u@h:5432/d")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    s = load_settings()
    assert s.database_url.startswith("postgres://") and s.redis_url.endswith("/0")


def test_default_local_model_name_is_what_the_local_server_accepts(monkeypatch):
    """transformers serve pins the model it started with and refuses any other name."""
    from training_jobs.tiny_model.serve import DEMO_MODEL_DIR, server_command

    monkeypatch.delenv("HAT_LOCAL_MODEL_NAME", raising=False)
    name = ConsoleSettings().local_model_name
    assert name == str(DEMO_MODEL_DIR.resolve())
    assert name in server_command(DEMO_MODEL_DIR)
