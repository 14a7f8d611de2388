"""training_jobs.provenance.git_commit: the commit a result records, marked dirty only by the code that trains,
serves and judges."""

import subprocess

from training_jobs.provenance import git_commit


def _git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def test_the_commit_is_dirty_only_when_the_code_changed(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "training_jobs").mkdir()
    (tmp_path / "training_jobs" / "stage.py").write_text("A = 1\n")
    (tmp_path / "notes.md").write_text("x\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert git_commit(tmp_path) == head
    (tmp_path / "notes.md").write_text("y\n")  # not code that trains: still clean
    assert git_commit(tmp_path) == head
    (tmp_path / "streams").mkdir()
    (tmp_path / "streams" / "new.py").write_text("B = 2\n")  # untracked code counts
    assert git_commit(tmp_path) == head + "+dirty"


def test_outside_a_checkout_there_is_no_commit(tmp_path):
    assert git_commit(tmp_path) is None
