"""Tags and notes on datasets, training jobs, models and evaluation runs (training_jobs.tags, tag_services,
tag_views): the rules and their messages, add / remove / note as plain form POSTs (a redirect to the page) and as
htmx POSTs (the panel alone), refusals (400, 404, 409) that change nothing, the audit trail, and who may edit (whoever
may launch such a thing: 403 for the others, who still see the tags on the pages they may view)."""

from __future__ import annotations

import re
import uuid

import pytest

from console.models import AuditEvent
from tests.training_jobs.eval_run_fixtures import (  # noqa: F401  (fixtures)
    queued_run,
    scripted_endpoint,
    scripted_model,
    t1_set,
    v1,
)
from training_jobs.models import Dataset, TrainedModel, TrainingJob
from training_jobs.tag_models import ObjectNote, ObjectTag
from training_jobs.tags import (
    MAX_TAGS,
    NOTE_MAX_CHARS,
    TagError,
    check_tag,
    clean_note,
    parse_tags,
)

# --- the rules (no database) --------------------------------------------------------------------------------------


def test_tags_are_parsed_in_order_without_repeats():
    assert parse_tags("baseline, lr-sweep  baseline\nq4-2026") == ["baseline", "lr-sweep", "q4-2026"]
    assert check_tag("  a  ") == "a" and check_tag("x" * 32) == "x" * 32


@pytest.mark.parametrize(("text", "message"), [
    ("", "Type a tag"),
    (" , ", "Type a tag"),
    ("SFT", "tags are lowercase (“sft”)"),
    ("lr_sweep", "use a–z, 0–9 and “-” only"),
    ("été", "use a–z, 0–9 and “-” only"),
    ("x" * 33, "33 characters long: a tag has at most 32"),
    ("ok BAD", "“BAD”: tags are lowercase"),
    (" ".join(f"t{i}" for i in range(MAX_TAGS + 1)), f"{MAX_TAGS + 1} tags at once"),
])
def test_a_tag_that_breaks_a_rule_is_refused_with_the_rule(text, message):
    with pytest.raises(TagError, match=re.escape(message)):
        parse_tags(text)


def test_notes_are_plain_text_within_the_limit():
    assert clean_note("line one\r\nline two  \n\n") == "line one\nline two"
    assert clean_note("  ") == ""
    assert clean_note("x" * NOTE_MAX_CHARS) == "x" * NOTE_MAX_CHARS
    with pytest.raises(TagError, match=f"{NOTE_MAX_CHARS + 1} characters long"):
        clean_note("x" * (NOTE_MAX_CHARS + 1))
    with pytest.raises(TagError, match="control characters"):
        clean_note("bell\x07")


# --- the things tagged --------------------------------------------------------------------------------------------


@pytest.fixture
def dataset(ml_staff):
    return Dataset.objects.create(name="hsa-main", created_by=ml_staff, status="succeeded")


@pytest.fixture
def base(db):
    return TrainedModel.objects.create(name="base-tiny", kind="base", path="/tmp/models/base-tiny")


@pytest.fixture
def job(ml_staff, base):
    return TrainingJob.objects.create(name="sft-1", kind="sft", config={}, base_model=base, created_by=ml_staff)


def _things(dataset, job, base):
    return {"dataset": (dataset, f"/datasets/{dataset.pk}/"), "training_job": (job, f"/training/{job.pk}/"),
            "model": (base, f"/models/{base.pk}/")}


def _tags(obj) -> list[str]:
    return list(ObjectTag.objects.filter(object_id=obj.pk).values_list("slug", flat=True))


HX = {"HTTP_HX_REQUEST": "true"}


# --- add, remove, note: plain POSTs and htmx ----------------------------------------------------------------------


@pytest.mark.parametrize("subject", ["dataset", "training_job", "model"])
def test_ml_staff_tag_and_annotate_each_kind_from_its_page(client, ml_staff, dataset, job, base, subject):
    obj, page = _things(dataset, job, base)[subject]
    client.force_login(ml_staff)
    html = client.get(page).content.decode()
    assert 'data-testid="tags-notes"' in html and 'data-testid="tag-input"' in html and 'data-testid="note-input"' in html
    assert f'action="{page}tags/"' in html and f'hx-post="{page}tags/"' in html

    response = client.post(page + "tags/", {"tags": "baseline, lr-sweep"})
    assert response.status_code == 302 and response["Location"] == page + "#tags-notes"
    assert _tags(obj) == ["baseline", "lr-sweep"]
    response = client.post(page + "note/", {"note": "Diverged after step 400 <b>twice</b> **check**", "revision": "0"})
    assert response.status_code == 302
    note = ObjectNote.objects.get(object_id=obj.pk)
    assert note.subject == subject and note.revision == 1 and note.updated_by == ml_staff

    html = client.get(page).content.decode()
    assert html.count('data-testid="tag"') == 2 and 'data-tag="lr-sweep"' in html
    # plain text: shown as typed, escaped, never rendered as HTML or Markdown
    assert "Diverged after step 400 &lt;b&gt;twice&lt;/b&gt; **check**" in html and "<b>twice</b>" not in html
    assert 'name="revision" value="1"' in html

    scope = obj.audit_scope() if hasattr(obj, "audit_scope") else f"model:{obj.pk}"
    events = AuditEvent.objects.filter(action__in=["tags.added", "note.edited"]).order_by("id")
    assert [(e.action, e.actor, e.scope) for e in events] == [("tags.added", ml_staff, scope),
                                                              ("note.edited", ml_staff, scope)]


def test_htmx_answers_with_the_panel_alone(client, ml_staff, dataset):
    client.force_login(ml_staff)
    url = f"/datasets/{dataset.pk}/"
    response = client.post(url + "tags/", {"tags": "keep"}, **HX)
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert html.lstrip().startswith('<section id="tags-notes"') and 'data-tag="keep"' in html
    response = client.post(url + "tags/remove/", {"tag": "keep"}, **HX)
    assert response.status_code == 200 and 'data-testid="no-tags"' in response.content.decode()
    response = client.post(url + "note/", {"note": "first", "revision": "0"}, **HX)
    assert response.status_code == 200 and 'data-testid="note-saved"' in response.content.decode()
    # the tag box offers the tags in use on datasets (only to those who may add them)
    client.post(url + "tags/", {"tags": "in-use"})
    other = Dataset.objects.create(name="other", created_by=ml_staff)
    assert '<datalist id="known-tags"><option value="in-use">' in client.get(f"/datasets/{other.pk}/").content.decode()
    client.post(url + "tags/remove/", {"tag": "in-use"})
    assert _tags(dataset) == [] and ObjectNote.objects.get(object_id=dataset.pk).text == "first"


def test_the_audit_trail_says_what_changed(client, ml_staff, dataset):
    client.force_login(ml_staff)
    url = f"/datasets/{dataset.pk}/"
    client.post(url + "tags/", {"tags": "a b"})
    client.post(url + "tags/", {"tags": "b"})  # nothing new: nothing recorded
    client.post(url + "tags/remove/", {"tag": "a"})
    client.post(url + "note/", {"note": "hello", "revision": "0"})
    client.post(url + "note/", {"note": "hello", "revision": "1"})  # the same text: nothing recorded
    events = list(AuditEvent.objects.filter(scope=f"dataset:{dataset.pk}", action__in=[
        "tags.added", "tags.removed", "note.edited"]).order_by("id"))
    assert [(e.action, e.to_state, e.data) for e in events] == [
        ("tags.added", "a b", {"added": ["a", "b"]}),
        ("tags.removed", "b", {"removed": "a"}),
        ("note.edited", "5 characters", {"revision": 1, "note": "hello"}),
    ]
    assert all(e.actor == ml_staff and e.target == "dataset:hsa-main" for e in events)


# --- refusals: clear 4xx, nothing half-saved ----------------------------------------------------------------------


@pytest.mark.parametrize(("tags", "message"), [
    ("", "Type a tag"),
    ("good Bad", "“Bad”: tags are lowercase (“bad”)."),
    ("spaces_are_not_ok", "use a–z, 0–9 and “-” only"),
    ("x" * 40, "40 characters long"),
])
def test_a_bad_tag_is_refused_and_nothing_is_added(client, ml_staff, dataset, tags, message):
    client.force_login(ml_staff)
    url = f"/datasets/{dataset.pk}/tags/"
    response = client.post(url, {"tags": tags})  # a plain form: a page with the form, the reason and the input kept
    html = response.content.decode()
    assert response.status_code == 400 and message in html and 'data-testid="tags-error"' in html
    assert "<html" in html and f'href="/datasets/{dataset.pk}/"' in html
    response = client.post(url, {"tags": tags}, **HX)
    assert response.status_code == 400 and message in response.content.decode()
    assert "<html" not in response.content.decode()
    assert _tags(dataset) == [] and not AuditEvent.objects.filter(action="tags.added").exists()


def test_at_most_twenty_tags_and_none_of_an_overflowing_batch(client, ml_staff, dataset):
    client.force_login(ml_staff)
    url = f"/datasets/{dataset.pk}/tags/"
    assert client.post(url, {"tags": " ".join(f"t{i:02d}" for i in range(MAX_TAGS - 1))}).status_code == 302
    response = client.post(url, {"tags": "extra-1 extra-2"}, **HX)
    assert response.status_code == 400
    assert "A dataset has at most 20 tags: this one has 19, and 2 more would make 21" in response.content.decode()
    assert len(_tags(dataset)) == MAX_TAGS - 1
    assert client.post(url, {"tags": "t00 extra-1"}).status_code == 302  # one new one: 20
    assert len(_tags(dataset)) == MAX_TAGS


def test_removing_a_tag_it_does_not_have_is_404_and_a_malformed_one_400(client, ml_staff, dataset):
    client.force_login(ml_staff)
    url = f"/datasets/{dataset.pk}/tags/remove/"
    response = client.post(url, {"tag": "ghost"}, **HX)
    assert response.status_code == 404 and "has no tag “ghost”" in response.content.decode()
    response = client.post(url, {"tag": "No Such"})
    assert response.status_code == 400 and "lowercase" in response.content.decode()
    assert not AuditEvent.objects.filter(action="tags.removed").exists()


def test_a_note_too_long_or_with_control_characters_is_refused_and_kept_in_the_box(client, ml_staff, dataset):
    client.force_login(ml_staff)
    url = f"/datasets/{dataset.pk}/note/"
    client.post(url, {"note": "kept", "revision": "0"})
    long = "y" * (NOTE_MAX_CHARS + 1)
    response = client.post(url, {"note": long, "revision": "1"}, **HX)
    html = response.content.decode()
    assert response.status_code == 400 and f"{NOTE_MAX_CHARS + 1} characters long" in html and long in html
    response = client.post(url, {"note": "bell\x07", "revision": "1"})
    assert response.status_code == 400 and "control characters" in response.content.decode()
    response = client.post(url, {"note": "nul\x00", "revision": "1"})  # refused before the view, for every form
    assert response.status_code == 400 and "NUL characters are not allowed" in response.content.decode()
    for data, message in (({"note": "x"}, "no edit number"), ({"note": "x", "revision": "one"}, "no edit number"),
                          ({"revision": "1"}, "sent no note")):
        response = client.post(url, data)
        assert response.status_code == 400 and message in response.content.decode(), data
    note = ObjectNote.objects.get(object_id=dataset.pk)
    assert (note.text, note.revision) == ("kept", 1)


def test_a_note_saved_meanwhile_is_not_overwritten(client, ml_staff, ml_staff2, dataset):
    client.force_login(ml_staff)
    url = f"/datasets/{dataset.pk}/note/"
    client.post(url, {"note": "mine", "revision": "0"})
    client.force_login(ml_staff2)
    response = client.post(url, {"note": "theirs, from an old page", "revision": "0"}, **HX)
    html = response.content.decode()
    assert response.status_code == 409 and "Someone saved this note meanwhile" in html
    # the saved note is shown, the draft stays in the box, and the form now carries the current edit number
    assert 'data-testid="note-text">mine' in html and "theirs, from an old page</textarea>" in html
    assert 'name="revision" value="1"' in html
    assert ObjectNote.objects.get(object_id=dataset.pk).text == "mine"
    assert client.post(url, {"note": "theirs, on purpose", "revision": "1"}).status_code == 302
    assert ObjectNote.objects.get(object_id=dataset.pk).text == "theirs, on purpose"


def test_an_empty_note_clears_it(client, ml_staff, dataset):
    client.force_login(ml_staff)
    url = f"/datasets/{dataset.pk}/note/"
    client.post(url, {"note": "temporary", "revision": "0"})
    assert client.post(url, {"note": "  \r\n", "revision": "1"}).status_code == 302
    assert ObjectNote.objects.get(object_id=dataset.pk).text == ""
    assert 'data-testid="row-note"' not in client.get("/datasets/").content.decode()


# --- who may edit, who may see ------------------------------------------------------------------------------------


@pytest.mark.parametrize("subject", ["dataset", "training_job", "model"])
def test_only_who_may_launch_it_may_tag_it(client, manager, reviewer, operator, outsider, ml_staff, dataset, job, base,
                                           subject):
    obj, page = _things(dataset, job, base)[subject]
    ObjectTag.objects.create(subject=subject, object_id=obj.pk, slug="seen")
    ObjectNote.objects.create(subject=subject, object_id=obj.pk, text="a note for all", revision=1)
    for user in (manager, reviewer, operator, outsider):
        client.force_login(user)
        for suffix, data in (("tags/", {"tags": "x"}), ("tags/remove/", {"tag": "seen"}),
                             ("note/", {"note": "x", "revision": "1"})):
            assert client.post(page + suffix, data).status_code == 403, (user, suffix)
            assert client.post(page + suffix, data, **HX).status_code == 403, (user, suffix)
        viewing = client.get(page)
        if viewing.status_code == 200:  # whoever sees the page sees its tags and note, without the forms
            html = viewing.content.decode()
            assert 'data-tag="seen"' in html and "a note for all" in html, user
            assert 'data-testid="tag-input"' not in html and 'data-testid="note-input"' not in html
            assert 'data-testid="tag-remove"' not in html
        else:
            assert viewing.status_code == 403, user
    assert _tags(obj) == ["seen"] and ObjectNote.objects.get(object_id=obj.pk).text == "a note for all"
    client.logout()
    response = client.post(page + "tags/", {"tags": "x"})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_manager_sees_dataset_tags_and_reviewer_model_tags(client, manager, reviewer, dataset, base):
    """Campaign managers may view datasets and models, reviewers models: they see the tags (not the forms)."""
    ObjectTag.objects.create(subject="dataset", object_id=dataset.pk, slug="for-managers")
    ObjectTag.objects.create(subject="model", object_id=base.pk, slug="for-reviewers")
    client.force_login(manager)
    assert 'data-tag="for-managers"' in client.get(f"/datasets/{dataset.pk}/").content.decode()
    client.force_login(reviewer)
    assert 'data-tag="for-reviewers"' in client.get(f"/models/{base.pk}/").content.decode()


def test_ml_lead_may_tag_other_peoples_things(client, ml_lead, ml_staff2, dataset):
    client.force_login(ml_staff2)  # not the one who built it: tagging is not managing
    assert client.post(f"/datasets/{dataset.pk}/tags/", {"tags": "shared"}).status_code == 302
    client.force_login(ml_lead)
    assert client.post(f"/datasets/{dataset.pk}/tags/", {"tags": "lead"}).status_code == 302
    assert _tags(dataset) == ["lead", "shared"]


def test_unknown_ids_are_404_and_gets_405(client, ml_staff, manager, dataset):
    client.force_login(ml_staff)
    missing = uuid.uuid4()
    for prefix in ("/datasets/", "/training/", "/models/", "/evals/runs/"):
        for suffix, data in (("tags/", {"tags": "x"}), ("tags/remove/", {"tag": "x"}),
                             ("note/", {"note": "x", "revision": "0"})):
            assert client.post(f"{prefix}{missing}/{suffix}", data).status_code == 404, prefix + suffix
    assert client.post("/datasets/not-a-uuid/tags/", {"tags": "x"}).status_code == 404
    assert client.get(f"/datasets/{dataset.pk}/tags/").status_code == 405
    client.force_login(manager)  # the role first: 403 whether or not it exists
    assert client.post(f"/datasets/{missing}/tags/", {"tags": "x"}).status_code == 403


def test_evaluation_runs_take_tags_and_notes_from_who_may_run_them(client, ml_staff, reviewer, queued_run):  # noqa: F811
    url = f"/evals/runs/{queued_run.pk}/"
    client.force_login(reviewer)  # sees runs, may not launch them
    assert client.post(url + "tags/", {"tags": "gate-evidence"}).status_code == 403
    client.force_login(ml_staff)
    assert client.post(url + "tags/", {"tags": "gate-evidence"}).status_code == 302
    assert client.post(url + "note/", {"note": "for the v2 review", "revision": "0"}).status_code == 302
    assert _tags(queued_run) == ["gate-evidence"]
    assert AuditEvent.objects.filter(action="tags.added", scope=queued_run.audit_scope()).exists()
    client.force_login(reviewer)
    html = client.get(url).content.decode()
    assert 'data-tag="gate-evidence"' in html and "for the v2 review" in html and 'data-testid="tag-input"' not in html


def test_the_database_keeps_the_tag_rule_too(ml_staff, dataset):
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        ObjectTag.objects.create(subject="dataset", object_id=dataset.pk, slug="Not OK")
    ObjectTag.objects.create(subject="dataset", object_id=dataset.pk, slug="ok")
    with pytest.raises(IntegrityError), transaction.atomic():
        ObjectTag.objects.create(subject="dataset", object_id=dataset.pk, slug="ok")
