"""``manage.py build_hsa_dataset``: the same samples, recipe and artifact folder as a console job."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from tests.streams.preview_helpers import price_script, scripted_model  # noqa: F401  (fixture)
from tests.streams.scripted_endpoint import reply, scripted_endpoint  # noqa: F401  (fixture)
from tests.training_jobs.test_hsa_recorded_jobs import FLASH, recorded_rooms  # noqa: F401  (fixture)


def run(*args) -> str:
    out = io.StringIO()
    call_command("build_hsa_dataset", *args, "--no-progress", stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_builds_a_dataset_folder_from_scenarios(tmp_path):
    text = run("--out", str(tmp_path / "ds"), "--scenarios", "compliance-traps", "--demo-manifests", "skincare_v1",
               "--max-samples", "6", "--variants", "2", "--seed", "3")
    assert "6 samples -> 12 rows (hsa)" in text and "wrote " in text
    assert {p.name for p in (tmp_path / "ds").iterdir()} >= {"dataset", "recipe.json", "stats.json", "samples.jsonl"}
    assert json.loads((tmp_path / "ds" / "recipe.json").read_text())["seed"] == 3


@pytest.mark.django_db
def test_recorded_rooms_as_a_source(tmp_path, recorded_rooms):
    approved, draft = recorded_rooms
    text = run("--out", str(tmp_path / "rec"), "--scenarios", "", "--fixed-harness",
               "--preview-rooms", f"{approved.pk},{draft.pk}")
    assert "recorded turns: 1 of 3 kept; left out: no_reference 1, unapproved_version 1" in text
    assert "1 samples -> 1 rows (fixed_harness)" in text


@pytest.mark.django_db
@pytest.mark.parametrize("args, message", [
    (("--variants", "0"), "variants_per_sample"),
    (("--scenarios", "nope"), "unknown scenarios"),
    (("--scenarios", "", "--preview-rooms", "0b5b4a47-2f0e-4a39-9d8b-3c4f5c1d2e3f"), "sources.preview_rooms[0]"),
])
def test_bad_input_is_a_clear_error(tmp_path, args, message):
    with pytest.raises(CommandError, match=message.replace("[", r"\[").replace("]", r"\]")):
        run("--out", str(tmp_path / "bad"), *args)
    assert not (tmp_path / "bad").exists()
