"""Which code a result came from: the commit recorded with a trained checkpoint, a reproduction run or a base model's
scores. Plain Python (the CLI, workers and management commands all record it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CODE_PATHS = ("training_jobs", "streams", "harness_editor")  # the code that trains, serves and judges


def git_commit(repo: Path = REPO) -> str | None:
    """HEAD, with '+dirty' when the code under :data:`CODE_PATHS` has uncommitted or untracked changes (the tree may
    move on while a long run works, so callers take this at the start); None outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *CODE_PATHS], cwd=repo, capture_output=True,
                               text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None
