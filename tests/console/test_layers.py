"""The layers of DESIGN.md §3 hold: import-linter's contracts (.importlinter) exist, say what the design says, and
are kept. The registry (harness_editor) imports nothing from the runtime (streams) or training (training_jobs); the
runtime imports nothing from training; the plain-Python core imports no Django, DRF, Channels, Celery or console.
Where a lower layer needs something of a higher one, the project wires a provider by name in settings."""

from __future__ import annotations

import configparser
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")

# What the design and issue 13 §6 ask of the plain core; the contract may list more, never less.
PURE_CORE = {
    "harness_editor.schemas", "harness_editor.render", "harness_editor.room_state", "harness_editor.diff",
    "harness_editor.importers",
    "streams.engine", "streams.bindings", "streams.tool_bindings", "streams.bound_calls", "streams.simulator",
    "streams.live.handling", "streams.live.schemas",
    "training_jobs.hsa", "training_jobs.hat", "training_jobs.evals", "training_jobs.tiny_model",
}
NOT_IN_THE_CORE = {"django", "rest_framework", "channels", "celery", "console"}
LISTS = {"source_modules", "forbidden_modules", "ignore_imports"}


def _contracts(path: Path = REPO / ".importlinter") -> dict[str, dict[str, object]]:
    parser = configparser.ConfigParser()
    parser.read(path)
    out = {}
    for section in parser.sections():
        if section.startswith("importlinter:contract:"):
            raw = dict(parser[section])
            out[section.split(":", 2)[2]] = {
                key: {line.strip() for line in value.splitlines() if line.strip()} if key in LISTS else value.strip()
                for key, value in raw.items()}
    return out


def _lint(config: Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), str(config), "--no-cache", "--no-logo"], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=env)


def test_import_contracts_are_kept():
    proc = _lint(REPO / ".importlinter", REPO)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "3 kept, 0 broken" in proc.stdout


def test_each_layer_has_its_contract_without_escape_hatches():
    contracts = _contracts()
    assert set(contracts) == {"registry", "runtime", "pure-core"}
    registry, runtime, core = contracts["registry"], contracts["runtime"], contracts["pure-core"]
    # whole packages, not some of their modules
    assert registry["type"] == "forbidden" and registry["source_modules"] == {"harness_editor"}
    assert registry["forbidden_modules"] == {"streams", "training_jobs"}
    assert runtime["type"] == "forbidden" and runtime["source_modules"] == {"streams"}
    assert runtime["forbidden_modules"] == {"training_jobs"}
    assert core["type"] == "forbidden" and core["forbidden_modules"] == NOT_IN_THE_CORE
    assert PURE_CORE <= core["source_modules"], PURE_CORE - core["source_modules"]
    for name, contract in contracts.items():
        # an indirect import through console or a third module counts too; nothing is waved through
        assert "ignore_imports" not in contract, name
        assert contract.get("allow_indirect_imports", "false").lower() != "true", name
    parser = configparser.ConfigParser()
    parser.read(REPO / ".importlinter")
    assert {r.strip() for r in parser["importlinter"]["root_packages"].split()} == {
        "console", "harness_editor", "streams", "training_jobs"}
    assert parser["importlinter"]["include_external_packages"].strip() == "True"  # else django is invisible


def _module(root: Path, dotted: str, body: str = "") -> None:
    """A module ``dotted`` under ``root`` (packages on the way), holding ``body``."""
    parts = dotted.split(".")
    folder = root
    for part in parts:
        folder = folder / part
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").touch()
    if body:
        (folder / "__init__.py").write_text(body)


def test_the_contracts_catch_each_kind_of_leak(tmp_path):
    """The real .importlinter against a throwaway project of the same packages with one leak per contract, one of
    them indirect (through console): each contract is broken, by exactly its own leak."""
    for name in ("console", "harness_editor", "streams", "training_jobs", "training_jobs.models"):
        _module(tmp_path, name)
    for contract in _contracts().values():  # every module a contract names must exist
        for key in ("source_modules", "forbidden_modules"):
            for name in contract[key] - NOT_IN_THE_CORE:
                _module(tmp_path, name)
    _module(tmp_path, "harness_editor.leaky", "from streams import engine\n")
    _module(tmp_path, "streams.leaky", "from console import bridge\n")
    _module(tmp_path, "console.bridge", "import training_jobs.models\n")
    _module(tmp_path, "training_jobs.hat.leaky", "from django.db import models\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = _lint(REPO / ".importlinter", tmp_path, env)
    out = proc.stdout
    assert proc.returncode == 1 and "0 kept, 3 broken" in out, out[-4000:] + proc.stderr[-2000:]
    assert "harness_editor.leaky -> streams.engine" in out
    assert "streams.leaky -> console.bridge" in out and "training_jobs.models" in out
    assert "training_jobs.hat.leaky -> django (l.1)" in out


def test_a_forbidden_import_in_the_real_code_breaks_a_contract(tmp_path):
    """The check reads this project: a copy of the contracts that calls a module importing Django core is broken."""
    config = (REPO / ".importlinter").read_text()
    assert "    training_jobs.tiny_model\n" in config
    config = config.replace("    training_jobs.tiny_model\n", "    training_jobs.tiny_model\n    training_jobs.selectors\n")
    (tmp_path / ".importlinter").write_text(config)
    proc = _lint(tmp_path / ".importlinter", REPO)
    assert proc.returncode != 0 and "BROKEN" in proc.stdout and "training_jobs.selectors" in proc.stdout


@pytest.mark.parametrize("setting, protocol", [
    ("HAT_APPROVAL_EVIDENCE", None),
    ("HAT_MODEL_ARTEFACTS", "streams.model_artefacts.ModelArtefactProvider"),
    ("HAT_SAVE_SESSION_AS_EVAL_SET", None),
])
def test_the_settings_wire_each_provider_a_lower_layer_needs(settings, setting, protocol):
    """Each inversion is wired: the setting names something importable (of the upper layer), and a provider object
    has every method the lower layer's protocol declares, with the same parameters."""
    from django.utils.module_loading import import_string

    name = getattr(settings, setting)
    assert name.startswith("training_jobs."), name
    provider = import_string(name)
    if protocol is None:
        assert callable(provider)
        return
    declared = import_string(protocol)
    methods = [m for m in vars(declared) if not m.startswith("_") and callable(getattr(declared, m))]
    assert methods
    for method in methods:
        wanted = list(inspect.signature(getattr(declared, method)).parameters)
        assert list(inspect.signature(getattr(provider, method)).parameters) == wanted[1:], method
