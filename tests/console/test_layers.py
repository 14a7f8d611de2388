"""The layers of DESIGN.md §3 hold: import-linter's contracts (.importlinter) are kept. The registry imports
nothing from training or the runtime's services; the plain-Python core imports no Django."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--config", str(REPO / ".importlinter"), "--no-cache"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_a_forbidden_import_breaks_a_contract(tmp_path):
    """The check can fail: a copy of the contracts pointed at a module that imports Django is broken."""
    config = (REPO / ".importlinter").read_text()
    config = config.replace("    training_jobs.tiny_model\n", "    training_jobs.tiny_model\n    training_jobs.selectors\n")
    (tmp_path / ".importlinter").write_text(config)
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--config", str(tmp_path / ".importlinter"), "--no-cache"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "BROKEN" in proc.stdout
