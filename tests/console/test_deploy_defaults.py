"""Deployment defaults: no committed secret key, transport security from the environment, a CSP on every
answer, and `check --deploy` clean in a production-like environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from console.config import ConsoleSettings, resolve_secret_key

ROOT = Path(__file__).resolve().parents[2]
PROD_KEY = "k" * 20 + "Zq9-x_7Lr2Vb8Np4Ws6Yt1Mc3Hd5Gf0Jk" + "e" * 10


def _clean_env(tmp_path, **extra) -> dict:
    # a production-like process: none of the console's settings, and none of what test modules set for themselves
    # (the browser tests set DJANGO_ALLOW_ASYNC_UNSAFE, which check --deploy rightly refuses)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HAT_", "DJANGO_"))}
    env.update(HAT_DATA_DIR=str(tmp_path / "var"), DJANGO_SETTINGS_MODULE="console.settings", **extra)
    return env


def _python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


SETTINGS_DUMP = ("import django, json; django.setup(); from django.conf import settings as s; print(json.dumps("
                 "{k: getattr(s, k, None) for k in ('SECRET_KEY', 'DEBUG', 'SECURE_SSL_REDIRECT', "
                 "'SECURE_HSTS_SECONDS', 'SECURE_HSTS_INCLUDE_SUBDOMAINS', 'SECURE_HSTS_PRELOAD', "
                 "'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', 'SECURE_PROXY_SSL_HEADER')}))")


def test_refuses_to_start_without_a_key_when_debug_is_off(tmp_path):
    run = _python(SETTINGS_DUMP, _clean_env(tmp_path))
    assert run.returncode != 0
    assert "HAT_SECRET_KEY" in run.stderr and "refusing to start" in run.stderr


def test_the_key_comes_from_the_environment_or_a_file(tmp_path):
    run = _python(SETTINGS_DUMP, _clean_env(tmp_path, HAT_SECRET_KEY=PROD_KEY))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["SECRET_KEY"] == PROD_KEY
    key_file = tmp_path / "key"
    key_file.write_text(PROD_KEY[::-1] + "\n")
    run = _python(SETTINGS_DUMP, _clean_env(tmp_path, HAT_SECRET_KEY_FILE=str(key_file)))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["SECRET_KEY"] == PROD_KEY[::-1]


def test_a_short_or_missing_key_file_is_refused(tmp_path):
    short = tmp_path / "short"
    short.write_text("tiny")
    with pytest.raises(SystemExit, match="shorter than 32"):
        resolve_secret_key(ConsoleSettings(secret_key_file=short))
    with pytest.raises(SystemExit, match="cannot be read"):
        resolve_secret_key(ConsoleSettings(secret_key_file=tmp_path / "absent"))


def test_debug_without_a_key_generates_one_per_data_folder_not_a_committed_one(tmp_path, monkeypatch):
    monkeypatch.delenv("HAT_SECRET_KEY", raising=False)
    monkeypatch.delenv("HAT_SECRET_KEY_FILE", raising=False)
    first = resolve_secret_key(ConsoleSettings(debug=True, data_dir=tmp_path / "a"))
    again = resolve_secret_key(ConsoleSettings(debug=True, data_dir=tmp_path / "a"))
    other = resolve_secret_key(ConsoleSettings(debug=True, data_dir=tmp_path / "b"))
    assert first == again != other and len(first) >= 50
    assert first not in (ROOT / "console" / "config.py").read_text()
    assert oct((tmp_path / "a" / "dev_secret_key").stat().st_mode & 0o777) == "0o600"


def test_transport_security_is_set_from_the_environment(tmp_path):
    run = _python(SETTINGS_DUMP, _clean_env(
        tmp_path, HAT_SECRET_KEY=PROD_KEY, HAT_SECURE_SSL_REDIRECT="true", HAT_SECURE_HSTS_SECONDS="31536000",
        HAT_SECURE_HSTS_INCLUDE_SUBDOMAINS="true", HAT_SECURE_HSTS_PRELOAD="true", HAT_SECURE_COOKIES="true",
        HAT_SECURE_PROXY_SSL_HEADER="true"))
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["SECURE_SSL_REDIRECT"] is True and got["SECURE_HSTS_SECONDS"] == 31536000
    assert got["SECURE_HSTS_INCLUDE_SUBDOMAINS"] and got["SECURE_HSTS_PRELOAD"]
    assert got["SESSION_COOKIE_SECURE"] and got["CSRF_COOKIE_SECURE"]
    assert got["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]


def test_check_deploy_passes_in_a_production_like_environment(tmp_path):
    env = _clean_env(tmp_path, HAT_SECRET_KEY=PROD_KEY, HAT_SECURE_SSL_REDIRECT="true",
                     HAT_SECURE_HSTS_SECONDS="31536000", HAT_SECURE_HSTS_INCLUDE_SUBDOMAINS="true",
                     HAT_SECURE_HSTS_PRELOAD="true", HAT_SECURE_COOKIES="true",
                     HAT_ALLOWED_HOSTS='["console.example.com"]')
    run = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no issues" in run.stdout


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/accounts/login/", "/api/harnesses/", "/health/live", "/api/docs/", "/"])
def test_every_answer_carries_a_content_security_policy(client, path):
    response = client.get(path)
    policy = response.headers.get("Content-Security-Policy", "")
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "object-src 'none'" in policy
    assert "'unsafe-eval'" not in policy and "script-src 'self' 'unsafe-inline'" not in policy


@pytest.mark.django_db
def test_the_api_docs_page_has_no_inline_script(client, manager):
    client.force_login(manager)
    page = client.get("/api/docs/").content.decode()
    assert page.count("<script") == page.count("<script src=")
    script = client.get("/api/docs/?script=")
    assert script.status_code == 200 and script.headers["Content-Type"].startswith("application/javascript")
