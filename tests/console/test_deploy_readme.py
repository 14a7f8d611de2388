"""`manage.py check --deploy` with exactly the variables the README's "Deployment" paragraph names (issue 26 §6):
the README says the check is then clean, so the test reads the variables from the README itself (a name given with
a value is set to it; a name without one gets a production-like value) and runs the real check."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.console.test_deploy_defaults import PROD_KEY, ROOT, _clean_env

# what the README leaves to the reader (names given without a value)
SUPPLIED = {"HAT_SECRET_KEY": PROD_KEY, "HAT_ALLOWED_HOSTS": '["console.example.com"]',
            "HAT_CSRF_TRUSTED_ORIGINS": '["https://console.example.com"]'}


def readme_deployment_env() -> dict[str, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    paragraph = text[text.index("**Deployment.**"):].split("\n\n", 1)[0]
    env = dict(re.findall(r"`(HAT_[A-Z_]+)=([^`\s]+)`", paragraph))
    for name in re.findall(r"`(HAT_[A-Z_]+)`", paragraph):
        if name in SUPPLIED:
            env.setdefault(name, SUPPLIED[name])
    return env


def _check_deploy(tmp_path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                          env=_clean_env(tmp_path, **env), capture_output=True, text=True, timeout=180)


def test_check_deploy_is_clean_with_the_readmes_variables(tmp_path):
    env = readme_deployment_env()
    assert {"HAT_SECRET_KEY", "HAT_ALLOWED_HOSTS", "HAT_SECURE_SSL_REDIRECT", "HAT_SECURE_HSTS_SECONDS"} <= set(env)
    run = _check_deploy(tmp_path, env)
    assert run.returncode == 0 and "no issues" in run.stdout, run.stdout + run.stderr


def test_without_subdomains_and_preload_only_the_two_warnings_the_readme_names_remain(tmp_path):
    env = {k: v for k, v in readme_deployment_env().items()
           if k not in ("HAT_SECURE_HSTS_INCLUDE_SUBDOMAINS", "HAT_SECURE_HSTS_PRELOAD")}
    run = _check_deploy(tmp_path, env)
    found = set(re.findall(r"\((security\.W\d+)\)", run.stdout + run.stderr))
    assert found == {"security.W005", "security.W021"}, run.stdout + run.stderr
    paragraph = (ROOT / "README.md").read_text(encoding="utf-8").split("**Deployment.**", 1)[1].split("\n\n", 1)[0]
    assert "W005" in paragraph and "W021" in paragraph
