"""The home page: each role lands on its work — a reviewer's queue, a manager's drafts, ML staff's running jobs,
builds and evaluations, an operator's live sessions — and a user with several roles sees several sections, ordered by
role. The runtime's and training's sections come through ``settings.HAT_HOME_SECTIONS``: console imports neither.
Also here: the favicon (/favicon.ico answers with the icon) and the skip link and landmarks every page has."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from console import roles
from tests.streams.live_helpers import live_session, live_world  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[2]
SECTION = re.compile(r'<section class="card" data-testid="([a-z-]+)" data-role="([^"]+)"')


def _section(body: str, testid: str) -> str:
    start = body.index(f'data-testid="{testid}"')
    return body[start:body.index("</section>", start)]


def _sections(client, user) -> list[tuple[str, str]]:
    client.force_login(user)
    response = client.get(reverse("home"))
    assert response.status_code == 200
    return SECTION.findall(response.content.decode())


@pytest.fixture
def running_work(ml_staff, ml_lead):
    """One active job of each kind ML staff run (and finished ones, which the home page leaves out)."""
    from training_jobs import services
    from training_jobs.models import Dataset, TrainingJob

    base = services.demo_base_model()
    config = {"max_steps": 6, "per_device_batch_size": 2, "learning_rate": 5e-3, "save_steps": 3, "max_length": 1024}
    return {
        "job": TrainingJob.objects.create(name="erin-sft", kind="sft", status="running", config=config,
                                          base_model=base, created_by=ml_staff, progress_done=3, progress_total=6,
                                          stage="training"),
        "done": TrainingJob.objects.create(name="erin-old", kind="sft", status="succeeded", config=config,
                                           base_model=base, created_by=ml_staff),
        "build": Dataset.objects.create(name="ivan-build", kind="hsa", created_by=ml_lead, status="queued"),
    }


def test_reviewer_lands_on_the_review_queue(client, harness_with_history, reviewer):
    assert _sections(client, reviewer) == [("review-queue", roles.COMPLIANCE_REVIEWER)]
    body = client.get(reverse("home")).content.decode()
    assert reverse("harness_editor:version", args=["glow-gadget", 2]) in body and "glow-gadget v2" in body


def test_manager_lands_on_their_drafts(client, harness_with_history, manager, manager2):
    assert _sections(client, manager) == [("my-drafts", roles.CAMPAIGN_MANAGER)]
    assert reverse("harness_editor:edit", args=["glow-gadget", 3]) in client.get(reverse("home")).content.decode()
    # another manager's drafts are theirs, not bob's
    assert _sections(client, manager2) == [("my-drafts", roles.CAMPAIGN_MANAGER)]
    drafts = _section(client.get(reverse("home")).content.decode(), "my-drafts")
    assert "glow-gadget v3" not in drafts and "No drafts." in drafts


def test_ml_staff_land_on_running_jobs_builds_and_evaluations(client, running_work, ml_staff, ml_lead):
    assert _sections(client, ml_staff) == [("running-work", roles.ML_STAFF)]
    body = client.get(reverse("home")).content.decode()
    assert reverse("training:detail", args=[running_work["job"].pk]) in body and "erin-sft" in body
    assert reverse("training_jobs:detail", args=[running_work["build"].pk]) in body and "ivan-build" in body
    assert "50% (training)" in body and "(yours)" in body
    assert "erin-old" not in body  # finished: not on the home page
    assert _sections(client, ml_lead) == [("running-work", roles.ML_STAFF)]


def test_ml_staff_with_nothing_running(client, ml_staff):
    assert _sections(client, ml_staff) == [("running-work", roles.ML_STAFF)]
    assert "Nothing is queued or running." in client.get(reverse("home")).content.decode()


def test_operator_lands_on_live_sessions(client, live_session, operator):  # noqa: F811
    assert _sections(client, operator) == [("live-sessions", roles.OPERATOR)]
    body = client.get(reverse("home")).content.decode()
    assert reverse("live:session", args=[live_session.pk]) in body and "Evening show" in body


def test_operator_without_sessions_on_air(client, operator):
    assert _sections(client, operator) == [("live-sessions", roles.OPERATOR)]
    assert "No session is live." in client.get(reverse("home")).content.decode()


def test_several_roles_see_several_sections_ordered_by_role(client, harness_with_history, running_work,
                                                            django_user_model):
    user = django_user_model.objects.create_user(username="many_hats", password="x-pass-123")
    # added in an order other than the one the page uses
    for role in (roles.OPERATOR, roles.ML_STAFF, roles.COMPLIANCE_REVIEWER, roles.CAMPAIGN_MANAGER):
        user.groups.add(Group.objects.get(name=role))
    assert _sections(client, user) == [("my-drafts", roles.CAMPAIGN_MANAGER),
                                       ("review-queue", roles.COMPLIANCE_REVIEWER),
                                       ("running-work", roles.ML_STAFF), ("live-sessions", roles.OPERATOR)]


def test_roles_without_a_home_section_still_see_harnesses_and_activity(client, harness_with_history,
                                                                       django_user_model):
    user = django_user_model.objects.create_user(username="lead_only", password="x-pass-123")
    user.groups.add(Group.objects.get(name=roles.COMPLIANCE_LEAD))  # reviews: the queue is its work too
    assert _sections(client, user) == [("review-queue", roles.COMPLIANCE_REVIEWER)]
    body = client.get(reverse("home")).content.decode()
    assert "Harnesses" in body and "Recent activity" in body


def test_home_sections_setting_names_the_apps_providers(settings):
    from django.utils.module_loading import import_string

    assert settings.HAT_HOME_SECTIONS == ["streams.home_sections.live_sessions",
                                          "training_jobs.home_sections.running_work"]
    assert all(callable(import_string(name)) for name in settings.HAT_HOME_SECTIONS)


def test_no_provider_setting_leaves_the_console_sections(client, settings, harness_with_history, operator):
    settings.HAT_HOME_SECTIONS = []
    assert _sections(client, operator) == []
    assert client.get(reverse("home")).status_code == 200


@pytest.mark.parametrize("module", ["console/views.py", "console/home.py"])
def test_console_imports_neither_the_runtime_nor_training(module):
    tree = ast.parse((REPO / module).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    assert not {name for name in imported if name.split(".")[0] in {"streams", "training_jobs"}}, imported


def test_favicon_ico_is_the_svg_icon(client, db):
    response = client.get("/favicon.ico")
    assert response.status_code == 302 and response["Location"].endswith("/static/console/favicon.svg")
    icon = client.get(response["Location"])
    assert icon.status_code == 200 and b"<svg" in b"".join(icon.streaming_content if icon.streaming else
                                                             [icon.content])


def test_pages_link_the_favicon(client, manager):
    client.force_login(manager)
    body = client.get(reverse("home")).content.decode()
    assert '<link rel="icon" href="/static/console/favicon.svg" type="image/svg+xml">' in body


def test_pages_have_a_skip_link_and_landmarks(client, manager):
    """The first thing a keyboard reaches is the skip link to the main content; the navigation is labelled."""
    client.force_login(manager)
    body = client.get(reverse("home")).content.decode()
    assert body.index('<a class="skip-link" href="#content">Skip to content</a>') < body.index("<header")
    assert '<nav aria-label="Main">' in body and '<main id="content" tabindex="-1">' in body
