"""Per-operator counts on every build, shown where build statistics are shown (issue 13, section 5): the dataset
page lists applied / skipped / dropped for each operator and marks an operator that never fired on the build's
harnesses; the API's stats carry the same counts; a foreign harness builds through the service."""

from __future__ import annotations

import pytest

from training_jobs.hsa.dataset import Recipe, build
from training_jobs.hsa.samples import load_demo_manifest
from training_jobs.hsa.written import load_turns, written_samples
from training_jobs.models import Dataset

from .test_hsa_foreign import TURNS

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def stats():
    samples = written_samples(load_demo_manifest("order_desk"), load_turns(TURNS))
    return build(samples, Recipe(seed=4, variants_per_sample=4)).stats.to_dict()


def test_dataset_page_shows_skipped_counts_and_operators_that_never_fired(client, ml_staff, stats):
    recipe = Recipe(seed=4, variants_per_sample=4).model_dump(mode="json")
    d = Dataset.objects.create(name="desk", kind="hsa", recipe=recipe, sources={}, created_by=ml_staff,
                               status="succeeded", stats=stats, sample_count=12, row_counts={"train": stats["rows"]},
                               progress_done=48, progress_total=48)
    client.force_login(ml_staff)
    page = client.get(f"/datasets/{d.pk}/").content.decode()
    assert '<th class="num">Skipped</th>' in page
    rows = page.split('data-testid="operator-row"')[1:]
    by_name = {r.split("<code>", 1)[1].split("</code>", 1)[0]: r for r in rows}
    assert set(by_name) == set(stats["operators"])
    switch = by_name["switch_id_types"]
    assert 'data-testid="operator-never-fired"' in switch
    assert f'<td class="num">{stats["operators"]["switch_id_types"]["skipped"]}</td>' in switch
    assert 'data-testid="operator-never-fired"' not in by_name["rename_tools"]


def test_api_stats_carry_the_counts(client, ml_staff, stats):
    d = Dataset.objects.create(name="desk-api", kind="hsa", recipe={}, sources={}, created_by=ml_staff,
                               status="succeeded", stats=stats, sample_count=12, row_counts={"train": stats["rows"]})
    client.force_login(ml_staff)
    resp = client.get(f"/api/datasets/{d.pk}/")
    assert resp.status_code == 200, resp.content
    ops = resp.json()["stats"]["operators"]
    assert ops["switch_id_types"]["applied"] == 0 and ops["switch_id_types"]["skipped"] > 0


def test_service_build_of_a_foreign_harness_is_not_refused_for_ordinary_words(tmp_path):
    """The trial's failure: ``held-out names in a training split: obtain`` (the order desk's policy says "Obtain the
    customer's consent"). The service's build (build, write, leak check, rename into place) now keeps it, and its
    stats.json carries the per-operator counts."""
    import json

    from training_jobs import services

    samples = written_samples(load_demo_manifest("order_desk"), load_turns(TURNS))
    out = tmp_path / "desk"
    result = services.build_artifact(samples, out, kind="hsa", recipe=Recipe(seed=1, variants_per_sample=3))
    assert result.stats.rows == 36 and (out / "dataset").is_dir()
    stored = json.loads((out / "stats.json").read_text())
    assert all("skipped" in o for o in stored["operators"].values())
