"""Tags, notes and list search in Chromium: ML staff tag a dataset and write its note on its page (htmx: the panel
changes in place, a refused tag shows why), then find it again in the dataset list by typing in the search box and by
tag (the table updates in place and the address bar carries the filters, so the URL can be shared)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from training_jobs.models import Dataset
from training_jobs.tag_models import ObjectNote, ObjectTag

pytestmark = pytest.mark.browser


@pytest.fixture
def datasets(ml_staff):
    return {name: Dataset.objects.create(name=name, kind=kind, created_by=ml_staff, status=status)
            for name, kind, status in (("hsa-skincare", "hsa", "succeeded"), ("fixed-skincare", "fixed_harness",
                                                                                 "failed"),
                                       ("hsa-electronics", "hsa", "succeeded"))}


def test_tag_annotate_and_find_a_dataset(page, login, shot, ml_staff, datasets):
    target = datasets["hsa-skincare"]
    login(ml_staff)
    page.goto(f"/datasets/{target.pk}/")
    page.evaluate("window.__samePage = true")  # gone if anything below reloads the page
    panel = page.locator("[data-testid=tags-notes]")
    expect(panel.locator("[data-testid=no-tags]")).to_be_visible()

    page.fill("[data-testid=tag-input]", "baseline q4-review")
    page.click("[data-testid=tag-add]")
    expect(panel.locator("[data-testid=tag]")).to_have_count(2)
    expect(panel.locator("[data-tag=q4-review]")).to_be_visible()

    page.fill("[data-testid=tag-input]", "Bad_Tag")
    page.click("[data-testid=tag-add]")
    expect(panel.locator("[data-testid=tags-error]")).to_contain_text("use a–z, 0–9 and “-” only")
    expect(panel.locator("[data-testid=tag-input]")).to_have_value("Bad_Tag")  # kept to fix
    expect(panel.locator("[data-testid=tag]")).to_have_count(2)

    page.fill("[data-testid=note-input]", "Best HSA build so far.\nUse for the Q4 review <not HTML>.")
    page.click("[data-testid=note-save]")
    expect(panel.locator("[data-testid=note-saved]")).to_be_visible()
    expect(panel.locator("[data-testid=note-meta]")).to_contain_text("edit 1 by ml_erin")
    page.click("[data-tag=baseline] [data-testid=tag-remove]")
    expect(panel.locator("[data-testid=tag]")).to_have_count(1)
    assert page.evaluate("window.__samePage") is True and page.url.endswith(f"/datasets/{target.pk}/")
    shot("detail")
    assert list(ObjectTag.objects.filter(object_id=target.pk).values_list("slug", flat=True)) == ["q4-review"]
    assert ObjectNote.objects.get(object_id=target.pk).text.endswith("<not HTML>.")

    # the list: type to search (the note's words too); the table changes in place and the URL follows
    page.goto("/datasets/")
    page.evaluate("window.__samePage = true")
    rows = page.locator("[data-testid=dataset-row]")
    expect(rows).to_have_count(3)
    page.fill("#id_q", "skincare")
    expect(rows).to_have_count(2)
    expect(page).to_have_url(re.compile(r"/datasets/\?q=skincare$"))
    page.fill("#id_q", "q4 review")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("hsa-skincare")
    page.fill("#id_q", "")
    page.select_option("#id_status", "failed")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("fixed-skincare")
    expect(page).to_have_url(re.compile(r"/datasets/\?status=failed$"))
    page.fill("#id_tag", "Q4")  # a refused filter says why, in place
    expect(page.locator("[data-testid=filter-errors]")).to_contain_text("tags are lowercase")
    expect(rows).to_have_count(0)
    assert page.evaluate("window.__samePage") is True

    # a shared URL: the filters come back filled in; a row's tag is a link to the list by that tag
    page.goto("/datasets/?status=succeeded")
    expect(page.locator("#id_status")).to_have_value("succeeded")
    expect(rows).to_have_count(2)
    page.click("[data-testid=row-tags] >> text=q4-review")
    expect(page).to_have_url(re.compile(r"/datasets/\?tag=q4-review$"))
    expect(rows).to_have_count(1)
    expect(page.locator("#id_tag")).to_have_value("q4-review")
    expect(page.locator("[data-testid=row-note]")).to_contain_text("Best HSA build so far.")
    shot("list")
    page.go_back()
    expect(rows).to_have_count(2)


def test_filter_training_jobs_and_models_in_place(page, login, shot, ml_staff, ml_staff2):
    from training_jobs.models import TrainedModel, TrainingJob

    base = TrainedModel.objects.create(name="base-tiny", kind="base", path="/tmp/base-tiny")
    sft = TrainedModel.objects.create(name="sft-skin", kind="sft", path="/tmp/sft-skin", parent=base,
                                      created_by=ml_staff)
    TrainedModel.objects.create(name="rl-skin", kind="rl", path="/tmp/rl-skin", parent=sft, created_by=ml_staff2)
    ObjectTag.objects.create(subject="model", object_id=sft.pk, slug="candidate")
    for name, kind, by in (("sft-a", "sft", ml_staff), ("rl-b", "rl", ml_staff2), ("sft-c", "sft", ml_staff2)):
        TrainingJob.objects.create(name=name, kind=kind, config={}, base_model=base, created_by=by, status="succeeded")
    login(ml_staff)

    page.goto("/training/")
    page.evaluate("window.__samePage = true")
    rows = page.locator("[data-testid=job-row]")
    expect(rows).to_have_count(3)
    page.select_option("#id_kind", "sft")
    expect(rows).to_have_count(2)
    page.select_option("#id_by", "ml_judy")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("sft-c")
    expect(page).to_have_url(re.compile(r"/training/\?kind=sft&by=ml_judy$"))
    assert page.evaluate("window.__samePage") is True
    shot("training")

    page.goto("/models/")
    rows = page.locator("[data-testid=model-row]")
    expect(rows).to_have_count(3)
    page.fill("#id_tag", "candidate")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("base-tiny")  # its lineage
    expect(page).to_have_url(re.compile(r"/models/\?tag=candidate$"))
    page.go_back()  # htmx restores the unfiltered table
    expect(rows).to_have_count(3)
    shot("models")
