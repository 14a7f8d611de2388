"""Search and filters of the dataset, training job and model lists (training_jobs.list_filters): GET parameters
(shareable URLs) for text (name, id, note), tag, status, kind or stage, who started it and dates; with pagination
that keeps them; htmx answers with the table alone (Vary: HX-Request), a history restore with the whole page; bad
values are refused (400) with the reason, never an unfiltered list; and the lists' roles (403)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tests.training_jobs.eval_run_fixtures import (  # noqa: F401  (fixtures)
    queued_run,
    scripted_endpoint,
    scripted_model,
    t1_set,
    v1,
)
from training_jobs.models import Dataset, TrainedModel, TrainingJob
from training_jobs.tag_models import ObjectNote, ObjectTag

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def _aged(obj, days: int):
    type(obj).objects.filter(pk=obj.pk).update(created_at=timezone.now() - dt.timedelta(days=days))
    return obj


@pytest.fixture
def datasets(ml_staff, ml_staff2):
    a = _aged(Dataset.objects.create(name="hsa-skincare", kind="hsa", created_by=ml_staff, status="succeeded"), 10)
    b = _aged(Dataset.objects.create(name="fixed-skincare", kind="fixed_harness", created_by=ml_staff,
                                     status="failed"), 5)
    c = Dataset.objects.create(name="hsa-electronics", kind="hsa", created_by=ml_staff2, status="succeeded")
    for obj, tags in ((a, ["baseline", "q4"]), (b, ["q4"]), (c, ["electronics"])):
        for t in tags:
            ObjectTag.objects.create(subject="dataset", object_id=obj.pk, slug=t)
    ObjectNote.objects.create(subject="dataset", object_id=b.pk, text="Judge rejected half the rows: re-run", revision=1)
    return {"a": a, "b": b, "c": c}


def _names(response) -> list[str]:
    return sorted(d.name for d in response.context["datasets"])


@pytest.mark.parametrize(("query", "expected"), [
    ({}, ["fixed-skincare", "hsa-electronics", "hsa-skincare"]),
    ({"q": "SKINCARE"}, ["fixed-skincare", "hsa-skincare"]),
    ({"q": "judge rejected"}, ["fixed-skincare"]),  # the note
    ({"tag": "q4"}, ["fixed-skincare", "hsa-skincare"]),
    ({"tag": "q4 baseline"}, ["hsa-skincare"]),  # every tag given
    ({"tag": "nobody-uses-this"}, []),
    ({"status": "failed"}, ["fixed-skincare"]),
    ({"kind": "hsa"}, ["hsa-electronics", "hsa-skincare"]),
    ({"by": "ml_judy"}, ["hsa-electronics"]),
    ({"since": "today"}, ["hsa-electronics"]),
    ({"until": "-3"}, ["fixed-skincare", "hsa-skincare"]),
    ({"since": "-7", "until": "-3"}, ["fixed-skincare"]),
    ({"q": "hsa", "kind": "hsa", "tag": "q4", "by": "ml_erin"}, ["hsa-skincare"]),
    ({"q": "", "tag": " ", "status": ""}, ["fixed-skincare", "hsa-electronics", "hsa-skincare"]),  # empty boxes
])
def test_dataset_filters(client, ml_staff, datasets, query, expected):
    today = timezone.localdate()
    for key in ("since", "until"):
        if key in query and query[key] != "":
            days = 0 if query[key] == "today" else int(query[key])
            query[key] = (today + dt.timedelta(days=days)).isoformat()
    client.force_login(ml_staff)
    response = client.get("/datasets/", query)
    assert response.status_code == 200
    assert _names(response) == expected
    html = response.content.decode()
    assert html.count('data-testid="dataset-row"') == len(expected)
    if any(v.strip() for v in query.values()):
        assert "match" in html.split('data-testid="list-count"')[1].split("</p>")[0]


def test_search_by_id_and_part_of_it(client, ml_staff, datasets):
    client.force_login(ml_staff)
    pk = str(datasets["c"].pk)
    assert _names(client.get("/datasets/", {"q": pk})) == ["hsa-electronics"]
    assert _names(client.get("/datasets/", {"q": pk[-12:]})) == ["hsa-electronics"]


def test_rows_show_their_tags_as_filter_links_and_their_note(client, ml_staff, datasets):
    client.force_login(ml_staff)
    html = client.get("/datasets/").content.decode()
    assert 'href="/datasets/?tag=baseline"' in html and 'href="/datasets/?tag=electronics"' in html
    assert 'data-testid="row-note"' in html and "Judge rejected half the rows" in html
    # the tag box offers the tags in use
    assert 'list="known-tags"' in html
    assert '<datalist id="known-tags"><option value="baseline"><option value="electronics"><option value="q4">' in html


@pytest.mark.parametrize(("query", "message"), [
    ({"status": "exploded"}, "“exploded” is not one of the choices for “Status”."),
    ({"kind": "lora"}, "“lora” is not one of the choices for “Kind”."),
    ({"by": "mallory"}, "“mallory” is not one of the choices for “Started by”."),
    ({"tag": "Q4"}, "“Q4”: tags are lowercase (“q4”)."),
    ({"tag": "a_b"}, "use a–z, 0–9 and “-” only"),
    ({"since": "2026-13-01"}, "Give the date as YYYY-MM-DD."),
    ({"until": "yesterday"}, "Give the date as YYYY-MM-DD."),
    ({"since": "2026-05-02", "until": "2026-05-01"}, "“To” (2026-05-01) is before “From” (2026-05-02)."),
    ({"q": "x" * 201}, "at most 200 characters"),
])
def test_bad_filters_are_refused_with_the_reason_and_list_nothing(client, ml_staff, datasets, query, message):
    client.force_login(ml_staff)
    for extra in ({}, HX):
        response = client.get("/datasets/", query, **extra)
        html = response.content.decode()
        assert response.status_code == 400, query
        assert 'data-testid="filter-errors"' in html and message in html.replace("&ldquo;", "“")
        assert 'data-testid="dataset-row"' not in html and "fix the filters" in html


def test_htmx_gets_the_table_alone_and_a_history_restore_the_page(client, ml_staff, datasets):
    client.force_login(ml_staff)
    response = client.get("/datasets/", {"tag": "q4"}, **HX)
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html and html.lstrip().startswith('<section id="datasets"')
    assert "HX-Request" in response["Vary"]
    response = client.get("/datasets/", {"tag": "q4"}, HTTP_HX_HISTORY_RESTORE_REQUEST="true", **HX)
    assert "<html" in response.content.decode() and 'data-testid="list-filters"' in response.content.decode()
    page = client.get("/datasets/", {"tag": "q4"}).content.decode()
    assert 'hx-get="/datasets/" hx-target="#datasets" hx-swap="outerHTML" hx-push-url="true"' in page
    assert 'value="q4"' in page  # the filters keep what was asked


def test_a_list_polling_while_something_runs_keeps_its_filters(client, ml_staff, datasets):
    Dataset.objects.filter(pk=datasets["a"].pk).update(status="running")
    client.force_login(ml_staff)
    html = client.get("/datasets/", {"tag": "q4"}).content.decode()
    assert 'hx-get="/datasets/?tag=q4" hx-trigger="every 2s"' in html
    assert 'hx-trigger="every 2s"' not in client.get("/datasets/", {"tag": "electronics"}).content.decode()


def test_pages_keep_the_filters(client, ml_staff):
    for i in range(60):
        Dataset.objects.create(name=f"sweep-{i:02d}", created_by=ml_staff, status="succeeded")
    Dataset.objects.create(name="other", created_by=ml_staff, status="succeeded")
    client.force_login(ml_staff)
    response = client.get("/datasets/", {"q": "sweep", "kind": ""})
    html = response.content.decode()
    assert html.count('data-testid="dataset-row"') == 50 and "page 1 of 2" in html and "60 datasets match" in html
    assert 'href="?q=sweep&amp;page=2"' in html and 'hx-get="?q=sweep&amp;page=2"' in html
    second = client.get("/datasets/", {"q": "sweep", "page": "2"}, **HX)
    assert second.content.decode().count('data-testid="dataset-row"') == 10
    assert "other" not in _names(second)


def test_training_job_filters(client, ml_staff, ml_staff2, reviewer):
    base = TrainedModel.objects.create(name="base", kind="base", path="/tmp/base")
    sft = TrainingJob.objects.create(name="sft-long", kind="sft", config={}, base_model=base, created_by=ml_staff,
                                     status="succeeded")
    rl = TrainingJob.objects.create(name="rl-try", kind="rl", config={}, base_model=base, created_by=ml_staff2,
                                    status="failed")
    ObjectTag.objects.create(subject="training_job", object_id=rl.pk, slug="reward-bug")
    ObjectNote.objects.create(subject="training_job", object_id=sft.pk, text="best so far", revision=1)
    client.force_login(ml_staff)

    def names(**query):
        response = client.get("/training/", query)
        assert response.status_code == 200, response.content.decode()[:300]
        return sorted(j.name for j in response.context["jobs"])

    assert names() == ["rl-try", "sft-long"]
    assert names(kind="rl") == ["rl-try"] and names(status="succeeded") == ["sft-long"]
    assert names(tag="reward-bug") == ["rl-try"] and names(q="best so") == ["sft-long"]
    assert names(by="ml_erin") == ["sft-long"]
    html = client.get("/training/").content.decode()
    assert 'hx-trigger="every' not in html.split('id="jobs"')[1]  # nothing runs: the table does not poll
    assert '<label for="id_kind">Stage</label>' in html
    assert client.get("/training/", {"kind": "gkd"}).status_code == 400
    fragment = client.get("/training/", {"tag": "reward-bug"}, **HX).content.decode()
    assert fragment.lstrip().startswith('<section id="jobs"') and 'data-testid="compare-pick"' in fragment
    client.force_login(reviewer)
    assert client.get("/training/", {"tag": "reward-bug"}).status_code == 403


def test_model_filters(client, ml_staff, reviewer, operator):
    base = TrainedModel.objects.create(name="base", kind="base", path="/tmp/base")
    sft = TrainedModel.objects.create(name="sft-a", kind="sft", path="/tmp/a", parent=base, created_by=ml_staff)
    TrainedModel.objects.create(name="rl-b", kind="rl", path="/tmp/b", parent=sft, created_by=ml_staff)
    ObjectTag.objects.create(subject="model", object_id=sft.pk, slug="candidate")
    client.force_login(reviewer)  # reviewers see the registry and its tags

    def rows(**query):
        response = client.get("/models/", query)
        assert response.status_code == 200
        return sorted(r["model"].name for r in response.context["rows"])

    assert rows() == ["base", "rl-b", "sft-a"]
    assert rows(kind="sft") == ["sft-a"] and rows(tag="candidate") == ["sft-a"] and rows(q="rl-") == ["rl-b"]
    assert rows(by="ml_erin") == ["rl-b", "sft-a"]
    response = client.get("/models/", {"tag": "candidate"}, **HX)
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="models"') and 'href="/models/?tag=candidate"' in html
    # the lineage is still there for a filtered page
    assert [m.name for m in response.context["rows"][0]["lineage"]] == ["base", "sft-a"]
    assert 'name="status"' not in client.get("/models/").content.decode()  # models have no status
    assert client.get("/models/", {"kind": "nonsense"}).status_code == 400
    client.force_login(operator)
    assert client.get("/models/").status_code == 403


def test_lists_refuse_roles_without_them(client, operator, outsider, manager):
    for user, url in ((operator, "/datasets/"), (outsider, "/datasets/"), (outsider, "/models/"),
                      (manager, "/training/")):
        client.force_login(user)
        assert client.get(url, {"q": "x"}).status_code == 403, (user, url)
    client.logout()
    response = client.get("/datasets/", {"tag": "x"})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_evaluation_run_search_tags_and_dates_beside_their_filters(client, reviewer, ml_staff, queued_run):  # noqa: F811
    ObjectTag.objects.create(subject="eval_run", object_id=queued_run.pk, slug="gate-evidence")
    ObjectNote.objects.create(subject="eval_run", object_id=queued_run.pk, text="for the v2 review", revision=1)
    client.force_login(reviewer)

    def count(query, **extra):
        response = client.get("/evals/runs/", query, **extra)
        return response.status_code, response.content.decode().count('data-testid="run-row"')

    assert count({}) == (200, 1)
    assert count({"tag": "gate-evidence"}) == (200, 1) and count({"tag": "other"}) == (200, 0)
    assert count({"q": "v2 review"}) == (200, 1) and count({"q": "nothing like it"}) == (200, 0)
    assert count({"by": "ml_erin", "status": "queued"}) == (200, 1)
    assert count({"tag": "gate-evidence", "eval_set": "t1-mini"}) == (200, 1)
    status, rows = count({"tag": "Gate"})
    assert (status, rows) == (400, 0)
    html = client.get("/evals/runs/", {"since": "2026-02-30"}, **HX).content.decode()
    assert "<html" not in html and "Give the date as YYYY-MM-DD." in html
    page = client.get("/evals/runs/").content.decode()
    assert 'href="/evals/runs/?tag=gate-evidence"' in page and 'hx-target="#runs"' in page and 'id="id_q"' in page
