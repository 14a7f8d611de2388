"""Review comments on lines of the semantic diff, through the pages: a reviewer (or the author) comments on one
line (component, path, line — the same anchor on every render), replies thread under it, a thread is resolved and
reopened, each step audited; who may not gets 403, unknown things 404, bad input 400 with nothing saved; approving
with open threads warns and records how many, without blocking."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console.models import AuditEvent
from harness_editor import review_selectors, selectors
from harness_editor.models import HarnessVersion, ReviewComment
from harness_editor.views import diff_context

pytestmark = pytest.mark.django_db
SLUG = "glow-gadget"


def url(name: str, *args) -> str:
    return reverse(f"harness_editor:{name}", args=args)


def an_added_line(version: HarnessVersion, base: HarnessVersion) -> dict:
    """The first added line of the diff base → version: its component, path, key and text."""
    diff = diff_context(selectors.version_diff(old=base, new=version))
    for group in diff["groups"]:
        for item in group["changes"]:
            lines = [dict(x) for x in item["lines"]]
            review_selectors._keyed_lines(lines)
            for line in lines:
                if line["css"] == "add":
                    c = item["c"]
                    return {"component": c.component, "path": c.path or c.key, "line": line["key"],
                            "text": line["text"]}
    raise AssertionError("the diff has no added line")


@pytest.fixture
def h(harness_with_history):
    return harness_with_history


@pytest.fixture
def line(h):
    return an_added_line(h["v2"], h["v1"])


def _comment(client, line, body="Is this claim backed by a tool result?", base=1, number=2, **extra):
    data = {"base": base, "component": line["component"], "path": line["path"], "line": line["line"], "body": body}
    return client.post(url("review_comment", SLUG, number), {**data, **extra})


def test_the_version_page_offers_a_comment_link_on_each_line(h, client, reviewer, line):
    client.force_login(reviewer)
    anchor = review_selectors.line_anchor(line["component"], line["path"], line["line"])
    html = client.get(url("version", SLUG, 2)).content.decode()
    assert f'id="{anchor}" data-line="{line["line"]}"' in html
    assert f'href="?comment_on={anchor}#{anchor}"' in html
    assert client.get(url("version", SLUG, 2)).content.decode().count(f'id="{anchor}"') == 1  # stable, unique
    opened = client.get(url("version", SLUG, 2) + f"?comment_on={anchor}").content.decode()
    assert 'data-testid="comment-form"' in opened and f'name="line" value="{line["line"]}"' in opened


def test_a_reviewer_comments_on_a_line_and_it_shows_there(h, client, reviewer, line):
    client.force_login(reviewer)
    response = _comment(client, line)
    anchor = review_selectors.line_anchor(line["component"], line["path"], line["line"])
    assert response.status_code == 302 and response["Location"] == url("version", SLUG, 2) + f"#{anchor}"
    c = ReviewComment.objects.get()
    assert (c.version_id, c.base_number, c.line, c.line_text, c.author) == (h["v2"].pk, 1, line["line"], line["text"],
                                                                            reviewer)
    event = AuditEvent.objects.get(action="review.commented")
    assert event.actor == reviewer and event.data["comment_id"] == c.pk and event.data["line"] == line["line"]
    assert event.scope == f"harness:{SLUG}" and event.target == "version:2"
    html = client.get(url("version", SLUG, 2)).content.decode()
    at = html.index(f'id="{anchor}"')
    assert html.index(f'data-thread="{c.pk}"') > at and "Is this claim backed by a tool result?" in html
    assert 'data-testid="comment-count"' in html and "1 open" in html


def test_the_author_replies_and_the_reviewer_resolves_and_reopens(h, client, reviewer, manager, line):
    client.force_login(reviewer)
    _comment(client, line)
    thread = ReviewComment.objects.get()
    client.force_login(manager)  # the author answers
    response = client.post(url("review_comment", SLUG, 2), {"thread": thread.pk, "body": "It is: get_product."})
    assert response.status_code == 302
    reply = ReviewComment.objects.exclude(pk=thread.pk).get()
    assert reply.thread_id == thread.pk and reply.line == thread.line
    assert AuditEvent.objects.get(action="review.replied").data["thread_id"] == thread.pk
    client.force_login(reviewer)
    assert client.post(url("review_comment_resolve", SLUG, 2, thread.pk)).status_code == 302
    thread.refresh_from_db()
    assert thread.is_resolved and thread.resolved_by == reviewer
    html = client.get(url("version", SLUG, 2)).content.decode()
    assert 'data-resolved="true"' in html and 'data-testid="reopen"' in html
    again = client.post(url("review_comment_resolve", SLUG, 2, thread.pk))
    assert again.status_code == 409 and "already resolved" in again.content.decode()
    assert client.post(url("review_comment_resolve", SLUG, 2, reply.pk)).status_code == 400  # a reply
    assert client.post(url("review_comment_reopen", SLUG, 2, thread.pk)).status_code == 302
    thread.refresh_from_db()
    assert not thread.is_resolved
    assert list(AuditEvent.objects.filter(action__startswith="review.").order_by("id")
                .values_list("action", flat=True)) == ["review.commented", "review.replied", "review.resolved",
                                                       "review.reopened"]


def test_a_whole_change_takes_a_comment_too(h, client, reviewer, line):
    client.force_login(reviewer)
    assert _comment(client, {**line, "line": ""}, body="Why this change at all?").status_code == 302
    c = ReviewComment.objects.get()
    assert c.line == "" and c.line_text == ""
    anchor = review_selectors.line_anchor(line["component"], line["path"], "")
    html = client.get(url("version", SLUG, 2)).content.decode()
    assert html.index(f'data-thread="{c.pk}"') > html.index(f'id="{anchor}"')


def test_comments_on_the_diff_page_come_back_there(h, client, reviewer, line):
    client.force_login(reviewer)
    response = _comment(client, line, page="diff")
    assert response.status_code == 302 and response["Location"].startswith(url("diff", SLUG) + "?a=1&b=2#dl-")
    html = client.get(url("diff", SLUG) + "?a=1&b=2").content.decode()
    assert 'data-testid="thread"' in html and "comment_on=" in html
    # the same diff on the version page shows the same thread
    assert 'data-testid="thread"' in client.get(url("version", SLUG, 2)).content.decode()


def test_a_line_that_changed_shows_its_thread_as_outdated(h, client, reviewer, line):
    client.force_login(reviewer)
    _comment(client, line)
    ReviewComment.objects.update(line_text="something the line no longer says")
    html = client.get(url("version", SLUG, 2)).content.decode()
    assert 'data-testid="outdated"' in html and "something the line no longer says" in html


@pytest.mark.parametrize("who", ["manager2", "ml_staff", "operator", "outsider"])
def test_only_reviewers_and_the_author_comment(request, h, client, reviewer, line, who):
    client.force_login(reviewer)
    _comment(client, line)
    thread = ReviewComment.objects.get()
    client.force_login(request.getfixturevalue(who))
    before = AuditEvent.objects.count()
    assert _comment(client, line).status_code == 403
    assert client.post(url("review_comment", SLUG, 2), {"thread": thread.pk, "body": "x"}).status_code == 403
    assert client.post(url("review_comment_resolve", SLUG, 2, thread.pk)).status_code == 403
    assert ReviewComment.objects.count() == 1 and AuditEvent.objects.count() == before
    if who != "outsider":  # they read the thread, without the forms
        html = client.get(url("version", SLUG, 2)).content.decode()
        assert 'data-testid="thread"' in html and 'name="thread"' not in html and "comment_on=" not in html


def test_unknown_things_are_404(h, client, reviewer, line):
    client.force_login(reviewer)
    _comment(client, line)
    thread = ReviewComment.objects.get()
    assert _comment(client, line, number=42).status_code == 404
    assert client.post(url("review_comment", "ghost", 2), {"body": "x"}).status_code == 404
    assert _comment(client, line, base=42).status_code == 404
    assert client.post(url("review_comment", SLUG, 2), {"thread": 999999, "body": "x"}).status_code == 404
    assert client.post(url("review_comment", SLUG, 3), {"thread": thread.pk, "body": "x"}).status_code == 404
    assert client.post(url("review_comment_resolve", SLUG, 2, 999999)).status_code == 404
    assert client.post(url("review_comment_reopen", SLUG, 3, thread.pk)).status_code == 404
    assert ReviewComment.objects.count() == 1


@pytest.mark.parametrize("change,message", [
    ({"body": "   "}, "write a comment"),
    ({"body": "x" * 4001}, "at most 4000 characters"),
    ({"line": "n99999"}, "has no line n99999"),
    ({"path": "skills[nope]"}, "has no line"),
    ({"component": "weights"}, "has no line"),
    ({"base": "one"}, "base must be a version number"),
])
def test_bad_input_is_400_and_saves_nothing(h, client, reviewer, line, change, message):
    client.force_login(reviewer)
    data = {"base": 1, "component": line["component"], "path": line["path"], "line": line["line"], "body": "ok"}
    response = client.post(url("review_comment", SLUG, 2), {**data, **change})
    assert response.status_code == 400 and message in response.content.decode()
    assert not ReviewComment.objects.exists() and not AuditEvent.objects.filter(action="review.commented").exists()


def test_comment_actions_are_post_only(h, client, reviewer):
    client.force_login(reviewer)
    assert client.get(url("review_comment", SLUG, 2)).status_code == 405
    assert client.get(url("review_comment_resolve", SLUG, 2, 1)).status_code == 405


def test_approving_with_open_threads_warns_and_records_them(h, client, reviewer, reviewer2, line):
    client.force_login(reviewer)
    _comment(client, line)
    client.force_login(reviewer2)
    page = client.get(url("version", SLUG, 2)).content.decode()
    assert 'data-testid="unresolved-warning"' in page and "1 review comment thread still open" in page
    response = client.post(url("approve", SLUG, 2), {"comment": "fine"}, follow=True)
    assert response.status_code == 200 and "1 review comment thread was still open." in response.content.decode()
    assert HarnessVersion.objects.get(pk=h["v2"].pk).status == "approved"
    event = AuditEvent.objects.get(action="version.approved", target="version:2")
    assert event.data["review"] == {"checklist": [], "unresolved_comments": 1}


def test_discarding_a_draft_takes_its_comments(h, client, manager, line):
    client.force_login(manager)  # the author may comment on their own draft's diff
    diff = diff_context(selectors.version_diff(old=h["v2"], new=h["v3"]))
    change = diff["groups"][0]["changes"][0]["c"]
    whole = {"component": change.component, "path": change.path or change.key, "line": ""}
    assert _comment(client, whole, base=2, number=3).status_code == 302
    page = client.post(url("discard", SLUG, 3)).content.decode()
    assert "1 (deleted with it)" in page
    client.post(url("discard", SLUG, 3), {"confirm": "1", "expected_lock": h["v3"].lock_version})
    assert not ReviewComment.objects.exists()
