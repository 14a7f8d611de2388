"""Serve profiles run only what an administrator allows (issue 26 §5): model servers listen on loopback unless
HAT_SERVE_LISTEN_HOSTS adds an address, adapters load at run time only on loopback, and extra_args hold only
allow-listed vLLM flags with typed values (a path-precise 400 otherwise, nothing saved). A stored profile that no
longer passes still shows on the serving page with the reason, is refused at launch, and is refused again on the
worker before any process starts."""

from __future__ import annotations

import pytest

from console.models import AuditEvent
from console.management.commands import seed_demo
from streams import serving_tasks, vllm_cpu
from streams.models import ServeProfile, ServerInstance
from streams.serve_profiles import DEMO_MODEL_DIR, ServeSpec, vllm_demo_spec
from streams.services import serving
from training_jobs.models import TrainedModel

LOOPBACK_LORA = {"kind": "vllm", "enable_lora": True, "max_lora_rank": 16, "runtime_lora_updating": True}
EVERY_INTERFACE_LORA = {**LOOPBACK_LORA, "host": "0.0.0.0"}


@pytest.fixture
def demo_model(db, ml_staff):
    return TrainedModel.objects.create(name="demo-tiny", kind="base", path=str(DEMO_MODEL_DIR), created_by=ml_staff)


@pytest.fixture
def sent(monkeypatch):
    out: list[tuple] = []
    monkeypatch.setattr(serving_tasks.server_run, "apply_async",
                        lambda args, queue, **kw: out.append(("server_run", args[0], queue)))
    return out


def _create(client, spec, name="p"):
    return client.post("/api/serving/profiles/", {"name": name, "spec": spec}, content_type="application/json")


def _errors(response) -> dict[str, str]:
    return {e["path"]: e["message"] for e in response.json()["errors"]}


# --- extra_args -------------------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_extra_args_hold_only_allowed_flags_with_typed_values(client, ml_staff):
    client.force_login(ml_staff)
    refused = [
        (["--max-num-seqs", "8", "--middleware", "evil.module"], 2, "flag '--middleware' is not allowed (allowed: "),
        (["--tool-parser-plugin", "/tmp/plugin.py"], 0, "flag '--tool-parser-plugin' is not allowed"),
        (["--trust-remote-code"], 0, "flag '--trust-remote-code' is not allowed"),
        (["--host", "0.0.0.0"], 0, "flag '--host' is not allowed"),  # a field's flag again would override it
        (["--chat-template=/etc/passwd"], 0, "flag '--chat-template' is not allowed"),
        (["--enforce-eager", "/tmp/x.py"], 1, "'/tmp/x.py' is not a flag"),
        (["--max-num-seqs", "lots"], 1, "--max-num-seqs: 'lots' is not an integer from 1 to 4096"),
        (["--max-num-seqs", "0"], 1, "is not an integer from 1 to 4096"),
        (["--cpu-offload-gb=nan"], 0, "is not a number from 0 to 1024"),
        (["--kv-cache-dtype", "--middleware"], 1, "is not one of auto, fp8"),
        (["--seed"], 0, "flag '--seed' needs a value: an integer from 0 to 4294967295"),
        (["--enforce-eager=yes"], 0, "flag '--enforce-eager' takes no value"),
    ]
    for args, index, words in refused:
        response = _create(client, {"kind": "vllm", "extra_args": args})
        assert response.status_code == 400, (args, response.content)
        errors = _errors(response)
        assert words in errors.get(f"spec.extra_args[{index}]", ""), (args, errors)
    assert ServeProfile.objects.count() == 0 and not AuditEvent.objects.filter(action="serve_profile.create").exists()
    allowed = ["--max-num-seqs", "8", "--enforce-eager", "--seed=7", "--kv-cache-dtype", "auto"]
    response = _create(client, {"kind": "vllm", "extra_args": allowed})
    assert response.status_code == 201, response.content
    argv = ServeSpec.model_validate(ServeProfile.objects.get().spec).for_model("/m").argv(python="python")
    assert argv[-len(allowed):] == allowed
    # the page's form shows the path too
    page = client.post("/serving/profiles/", {"name": "q", "spec": '{"kind": "vllm", "extra_args": ["--middleware", "m"]}'})
    assert page.status_code == 400 and b"<code>spec.extra_args[0]</code>" in page.content
    assert b"is not allowed" in page.content


def test_the_allow_list_takes_each_form_of_a_flag():
    assert vllm_cpu.extra_args_errors(["--max-num-seqs=8", "--block-size", "16", "--no-enable-prefix-caching"]) == []
    assert [i for i, _ in vllm_cpu.extra_args_errors(["--block-size", "7", "--block-size=abc", "x"])] == [1, 2, 3]
    assert set(vllm_cpu.EXTRA_FLAGS).isdisjoint({  # what fields set, and what imports code or reads a path
        "--host", "--port", "--model", "--dtype", "--lora-modules", "--chat-template", "--middleware",
        "--tool-parser-plugin", "--reasoning-parser-plugin", "--trust-remote-code", "--api-key"})


# The parser vLLM's OpenAI server builds (vllm.entrypoints.openai.api_server uses it), as option -> choices.
_VLLM_OPTIONS = """
import json
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
print(json.dumps({o: [str(c) for c in a.choices] if a.choices else None
                  for a in parser._actions for o in a.option_strings}))
"""


@pytest.mark.skipif(not vllm_cpu.vllm_available(), reason="no .venv-vllm (make install makes it)")
def test_every_allowed_flag_is_one_the_installed_vllm_takes():
    import json
    import subprocess

    out = subprocess.run([vllm_cpu.vllm_python(), "-c", _VLLM_OPTIONS], capture_output=True, text=True, timeout=300,
                         env=vllm_cpu.vllm_env(), check=True).stdout
    options = json.loads(out.strip().splitlines()[-1])
    for flag, rule in vllm_cpu.EXTRA_FLAGS.items():
        assert flag in options, flag  # an upgrade that drops or renames a flag fails here, not at a launch
        if rule.kind == "choice" and options[flag] is not None:
            assert set(rule.choices) <= set(options[flag]), (flag, options[flag])


# --- host and runtime adapters ----------------------------------------------------------------------------------

@pytest.mark.django_db
def test_servers_listen_on_loopback_unless_an_administrator_allows_more(client, ml_staff, settings):
    client.force_login(ml_staff)
    response = _create(client, EVERY_INTERFACE_LORA)
    assert response.status_code == 400
    assert "HAT_SERVE_LISTEN_HOSTS" in _errors(response)["spec.host"] and "'0.0.0.0'" in _errors(response)["spec.host"]
    response = _create(client, {"kind": "local", "host": "10.1.2.3"})
    assert response.status_code == 400 and "spec.host" in _errors(response)
    for i, host in enumerate(("127.0.0.1", "localhost", "::1")):
        assert _create(client, {**LOOPBACK_LORA, "host": host}, name=f"lo-{i}").status_code == 201, host
    # the administrator allows every interface on this host: a plain server may, runtime adapter loading still not
    settings.HAT_SERVE_LISTEN_HOSTS = ["127.0.0.1", "localhost", "::1", "0.0.0.0"]
    response = _create(client, EVERY_INTERFACE_LORA, name="wide-lora")
    assert response.status_code == 400
    assert "no authentication" in _errors(response)["spec.runtime_lora_updating"]
    assert _create(client, {"kind": "vllm", "host": "0.0.0.0", "enable_lora": True}, name="wide").status_code == 201
    assert sorted(ServeProfile.objects.values_list("name", flat=True)) == ["lo-0", "lo-1", "lo-2", "wide"]
    client.logout()
    assert _create(client, EVERY_INTERFACE_LORA, name="anon").status_code == 401


@pytest.mark.django_db
def test_only_managers_of_serving_reach_the_checks(client, operator, outsider, manager, demo_model, sent):
    ServeProfile.objects.create(name="wide", spec=EVERY_INTERFACE_LORA)
    launch = {"profile": "wide", "model": str(demo_model.pk)}
    assert client.get("/serving/").status_code == 302 and _create(client, EVERY_INTERFACE_LORA).status_code == 401
    for user in (operator, outsider, manager):
        client.force_login(user)
        assert _create(client, EVERY_INTERFACE_LORA).status_code == 403, user
        assert client.post("/serving/profiles/", {"name": "p", "spec": '{"kind": "vllm", "host": "0.0.0.0"}'}) \
            .status_code == 403, user
        assert client.post("/api/serving/servers/", launch, content_type="application/json").status_code == 403
        assert client.post("/serving/servers/", launch).status_code == 403, user
    client.force_login(outsider)
    assert client.get("/serving/").status_code == 403
    assert ServeProfile.objects.count() == 1 and ServerInstance.objects.count() == 0 and sent == []


# --- stored profiles that no longer pass --------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_stored_profile_that_no_longer_passes_is_shown_with_why_and_refused_at_launch(client, ml_staff, operator,
                                                                                        demo_model, sent):
    # rows stored before the checks (or edited in the database): one on every interface with runtime adapters,
    # one with a flag that imports a module
    ServeProfile.objects.create(name="wide", spec=EVERY_INTERFACE_LORA)
    ServeProfile.objects.create(name="plugin", spec={"kind": "vllm", "extra_args": ["--middleware", "evil.module"]})
    ServeProfile.objects.create(name="fine", spec=LOOPBACK_LORA)
    for user in (operator, ml_staff):
        client.force_login(user)
        page = client.get("/serving/")
        assert page.status_code == 200
        text = page.content.decode()
        assert text.count('data-testid="profile-problems"') == 2, text
        assert "<code>spec.host</code>" in text and "<code>spec.extra_args[0]</code>" in text
        assert "flag &#x27;--middleware&#x27; is not allowed" in text
        assert client.get("/api/serving/profiles/").status_code == 200
    for name, path in (("wide", "spec.host"), ("plugin", "spec.extra_args[0]")):
        response = client.post("/api/serving/servers/", {"profile": name, "model": str(demo_model.pk)},
                               content_type="application/json")
        assert response.status_code == 400 and path in _errors(response), response.content
        page = client.post("/serving/servers/", {"profile": name, "model": str(demo_model.pk)})
        assert page.status_code == 400 and f"<code>{path}</code>".encode() in page.content
    assert ServerInstance.objects.count() == 0 and sent == []
    response = client.post("/api/serving/servers/", {"profile": "fine", "model": str(demo_model.pk)},
                           content_type="application/json")
    assert response.status_code == 201


@pytest.mark.django_db(transaction=True)
def test_the_worker_refuses_a_profile_changed_after_the_launch_before_any_process_starts(ml_staff, demo_model, sent,
                                                                                         settings, tmp_path):
    settings.ENV = settings.ENV.model_copy(update={"data_dir": tmp_path})
    profile = serving.serve_profile_create(user=ml_staff, name="cpu-lora", spec=LOOPBACK_LORA)
    instance = serving.server_launch(user=ml_staff, profile=profile, model=demo_model)
    ServeProfile.objects.filter(pk=profile.pk).update(spec={**LOOPBACK_LORA, "extra_args": ["--middleware", "m"]})
    run = serving.server_run(instance.pk)
    assert run.status == "failed" and run.pid is None and run.argv == [], run.error
    assert run.error.startswith("the serve profile is invalid: spec.extra_args[0]: flag '--middleware'"), run.error
    assert not (tmp_path / "serve").exists()  # no log: nothing was started
    # stored while this host allowed every interface; the worker's host does not: its setting counts
    settings.HAT_SERVE_LISTEN_HOSTS = ["127.0.0.1", "0.0.0.0"]
    wide = serving.serve_profile_create(user=ml_staff, name="wide", spec={"kind": "local", "host": "0.0.0.0"})
    instance = serving.server_launch(user=ml_staff, profile=wide, model=demo_model)
    settings.HAT_SERVE_LISTEN_HOSTS = ["127.0.0.1"]
    run = serving.server_run(instance.pk)
    assert run.status == "failed" and run.pid is None and "spec.host" in run.error, run.error
    assert [s[0] for s in sent] == ["server_run", "server_run"]


# --- what the project itself stores -------------------------------------------------------------------------------

@pytest.mark.django_db
def test_the_seeded_and_default_profiles_pass():
    from training_jobs.base_models import smollm2

    for spec in (seed_demo.DEMO_PROFILE_SPEC, vllm_demo_spec(), smollm2.serve_spec(),
                 serving.default_cpu_profile().spec):
        assert serving.serve_spec_check(spec if isinstance(spec, dict) else spec.model_dump()).kind == "vllm"
