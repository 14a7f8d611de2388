"""The authorization matrix, API side: every role × every action with the status it must get, plus the
rules about particular users (author-only edits, four eyes) and 404s for things that do not exist.

Denied requests must change nothing: no audit row, no version state change."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from console import roles
from console.models import AuditEvent
from harness_editor import services
from harness_editor.models import HarnessVersion

pytestmark = pytest.mark.django_db



BASE = "/api/harnesses/glow-gadget"
ROLE_FIXTURES = ["manager", "reviewer", "ml_staff", "operator", "outsider", "anonymous"]


@pytest.fixture
def world(harness_with_history, manager, reviewer, demo_manifest):
    """harness_with_history (v1 approved, v2 submitted, v3 draft) plus v4 approved, with `production` moved
    v1 -> v4 so it can be rolled back."""
    h = harness_with_history
    v4 = services.version_create_draft(user=manager, harness=h["harness"], manifest=demo_manifest("skincare_v2"),
                                       parent=h["v1"], change_note="v4")
    services.version_submit(user=manager, version=v4)
    v4 = services.version_approve(user=reviewer, version=v4)
    services.label_move(user=reviewer, harness=h["harness"], name="production", version=v4)
    return {**h, "v4": v4}


def _client(request, role: str) -> APIClient:
    client = APIClient()
    if role != "anonymous":
        client.force_login(request.getfixturevalue(role))
    return client


def _manifest(name: str = "skincare_v1") -> dict:
    from pathlib import Path

    from harness_editor.schemas import manifest_from_yaml

    path = Path(__file__).resolve().parents[2] / "harness_editor" / "demo" / f"{name}.yaml"
    return manifest_from_yaml(path.read_text(encoding="utf-8")).model_dump(mode="json")


ACTIONS = {
    "list": lambda c: c.get("/api/harnesses/"),
    "view harness": lambda c: c.get(f"{BASE}/"),
    "version history": lambda c: c.get(f"{BASE}/versions/"),
    "view version": lambda c: c.get(f"{BASE}/versions/2/"),
    "export": lambda c: c.get(f"{BASE}/versions/2/export/?as=json"),
    "render": lambda c: c.get(f"{BASE}/versions/2/render?room=demo"),
    "create harness": lambda c: c.post("/api/harnesses/", {"slug": "another", "name": "Another",
                                                           "manifest": _manifest()}, format="json"),
    "create draft": lambda c: c.post(f"{BASE}/versions/", {"parent": 1, "manifest": _manifest()}, format="json"),
    "edit draft": lambda c: c.patch(f"{BASE}/versions/3/", {"lock_version": 1, "change_note": "edit"},
                                    format="json"),
    "discard draft": lambda c: c.delete(f"{BASE}/versions/3/"),
    "submit": lambda c: c.post(f"{BASE}/versions/3/submit", {"comment": "please"}, format="json"),
    "approve": lambda c: c.post(f"{BASE}/versions/2/approve", {"comment": "fine"}, format="json"),
    "reject": lambda c: c.post(f"{BASE}/versions/2/reject", {"comment": "no"}, format="json"),
    "labels": lambda c: c.get(f"{BASE}/labels/"),
    "label history": lambda c: c.get(f"{BASE}/labels/production/history"),
    "move label": lambda c: c.put(f"{BASE}/labels/staging/", {"version": 1, "comment": "stage"}, format="json"),
    "rollback": lambda c: c.post(f"{BASE}/labels/production/rollback", {"comment": "undo"}, format="json"),
    "diff": lambda c: c.get(f"{BASE}/diff/?from=1&to=3"),
    "audit": lambda c: c.get("/api/audit/?scope=harness:glow-gadget"),
    "validate": lambda c: c.post("/api/validate", {"manifest": _manifest()}, format="json"),
}

R, D, A = 200, 403, 401  # read ok, denied, anonymous
#                     manager reviewer ml_staff operator outsider anonymous
MATRIX = {
    "list":            (R,      R,       R,       R,       D,       A),
    "view harness":    (R,      R,       R,       R,       D,       A),
    "version history": (R,      R,       R,       R,       D,       A),
    "view version":    (R,      R,       R,       R,       D,       A),
    "export":          (R,      R,       R,       R,       D,       A),
    "render":          (R,      R,       R,       R,       D,       A),
    "create harness":  (201,    D,       D,       D,       D,       A),
    "create draft":    (201,    D,       D,       D,       D,       A),
    "edit draft":      (R,      D,       D,       D,       D,       A),
    "discard draft":   (204,    D,       D,       D,       D,       A),
    "submit":          (R,      D,       D,       D,       D,       A),
    "approve":         (D,      R,       D,       D,       D,       A),
    "reject":          (D,      R,       D,       D,       D,       A),
    "labels":          (R,      R,       R,       R,       D,       A),
    "label history":   (R,      R,       R,       R,       D,       A),
    "move label":      (R,      R,       D,       D,       D,       A),
    "rollback":        (R,      R,       D,       D,       D,       A),
    "diff":            (R,      R,       R,       R,       D,       A),
    "audit":           (R,      R,       R,       R,       D,       A),
    "validate":        (R,      R,       R,       R,       D,       A),
}
CASES = [(action, role, expected) for action, row in MATRIX.items() for role, expected in zip(ROLE_FIXTURES, row)]


def test_matrix_covers_every_action():
    assert set(MATRIX) == set(ACTIONS)


def _state():
    return (AuditEvent.objects.count(),
            sorted(HarnessVersion.objects.values_list("number", "status", "lock_version")))


@pytest.mark.parametrize("action, role, expected", CASES, ids=[f"{a}-{r}" for a, r, _ in CASES])
def test_authorization_matrix(request, world, action, role, expected):
    client = _client(request, role)
    before = _state()
    response = ACTIONS[action](client)
    assert response.status_code == expected, (action, role, response.content[:300])
    if expected >= 400:
        body = response.json()
        assert body["code"] in {"not_authenticated", "permission_denied", "not_allowed"}
        assert body["detail"]
        assert _state() == before, "a refused request changed something"


# --- rules about the particular user and object --------------------------------------------------------------

@pytest.fixture
def manager_reviewer(db, django_user_model):
    """A campaign manager who is ALSO a compliance reviewer."""
    user = django_user_model.objects.create_user(username="both_hat", password="pw-not-used-1234")
    user.groups.add(Group.objects.get(name=roles.CAMPAIGN_MANAGER), Group.objects.get(name=roles.COMPLIANCE_REVIEWER))
    return user


def test_author_cannot_approve_even_with_the_reviewer_role(manager_reviewer, reviewer):
    client = APIClient()
    client.force_login(manager_reviewer)
    created = client.post("/api/harnesses/", {"slug": "dual", "name": "Dual", "manifest": _manifest()},
                          format="json")
    assert created.status_code == 201
    assert client.post("/api/harnesses/dual/versions/1/submit", {}, format="json").status_code == 200
    for verb in ("approve", "reject"):
        response = client.post(f"/api/harnesses/dual/versions/1/{verb}", {"comment": "self"}, format="json")
        assert response.status_code == 403
        assert response.json()["code"] == "not_allowed"
        assert "four eyes" in response.json()["detail"]
    assert HarnessVersion.objects.get(harness__slug="dual").status == "submitted"
    other = APIClient()
    other.force_login(reviewer)
    assert other.post("/api/harnesses/dual/versions/1/approve", {}, format="json").status_code == 200


def test_reviewer_cannot_edit_drafts(request, world):
    client = _client(request, "reviewer")
    assert client.patch(f"{BASE}/versions/3/", {"lock_version": 1, "manifest": _manifest()},
                        format="json").status_code == 403
    assert client.post(f"{BASE}/versions/", {"manifest": _manifest()}, format="json").status_code == 403
    assert client.delete(f"{BASE}/versions/3/").status_code == 403
    assert HarnessVersion.objects.get(pk=world["v3"].pk).lock_version == 1


def test_manager_cannot_approve_even_someone_elses_version(request, world, manager2):
    client = _client(request, "manager2")
    response = client.post(f"{BASE}/versions/2/approve", {}, format="json")
    assert response.status_code == 403
    assert HarnessVersion.objects.get(pk=world["v2"].pk).status == "submitted"


def test_only_the_author_edits_submits_or_discards_a_draft(request, world):
    client = _client(request, "manager2")
    edit = client.patch(f"{BASE}/versions/3/", {"lock_version": 1, "change_note": "mine now"}, format="json")
    assert edit.status_code == 403 and edit.json()["code"] == "not_allowed"
    assert client.post(f"{BASE}/versions/3/submit", {}, format="json").status_code == 403
    assert client.delete(f"{BASE}/versions/3/").status_code == 403
    v3 = HarnessVersion.objects.get(pk=world["v3"].pk)
    assert (v3.status, v3.lock_version, v3.change_note) == ("draft", 1, "tool rename")
    # but any manager may start their own draft from it
    own = client.post(f"{BASE}/versions/", {"parent": 3, "manifest": _manifest("skincare_v3")}, format="json")
    assert own.status_code == 201 and own.json()["author"] == "cm_bob"


@pytest.mark.parametrize("number", [2, 3])
def test_only_approved_versions_can_carry_a_label(request, world, number):
    client = _client(request, "reviewer")
    response = client.put(f"{BASE}/labels/production/", {"version": number}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "version"
    assert world["harness"].labels.get(name="production").version.number == 4


@pytest.mark.parametrize("url, method", [
    ("/api/harnesses/nope/", "get"),
    ("/api/harnesses/nope/versions/", "get"),
    ("/api/harnesses/nope/versions/1/", "get"),
    (f"{BASE}/versions/99/", "get"),
    (f"{BASE}/versions/99/export/", "get"),
    (f"{BASE}/versions/99/render", "get"),
    (f"{BASE}/versions/99/approve", "post"),
    (f"{BASE}/labels/nope/", "get"),
    (f"{BASE}/labels/nope/history", "get"),
    (f"{BASE}/labels/nope/rollback", "post"),
    ("/api/harnesses/nope/labels/", "get"),
    ("/api/harnesses/nope/diff/?from=1&to=2", "get"),
    (f"{BASE}/diff/?from=1&to=99", "get"),
])
def test_unknown_things_are_404(request, world, url, method):
    client = _client(request, "reviewer")
    response = getattr(client, method)(url, {}, format="json") if method == "post" else client.get(url)
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_role_check_comes_before_lookup(request, world):
    """Someone without a role learns nothing, not even whether a harness exists."""
    client = _client(request, "outsider")
    assert client.get("/api/harnesses/nope/").status_code == 403
    assert client.get(f"{BASE}/").status_code == 403


# --- whose object it is: the person who started it, another user with the same role, an ML lead -----------------
# (training jobs and dataset builds; preview rooms have no API: their pages and WebSocket are in
# tests/streams/test_room_access.py and test_room_access_channels.py, with owner / member / other columns)

@pytest.fixture
def erin_work(ml_staff, monkeypatch):
    """ml_erin's running and failed training jobs and running dataset build; Celery sends recorded."""
    from training_jobs import services as training_services
    from training_jobs import tasks
    from training_jobs.models import Dataset, TrainingJob

    sent = []
    monkeypatch.setattr(tasks.training_job, "apply_async", lambda args, queue, task_id: sent.append(args))
    base = training_services.demo_base_model()
    job = {"kind": "sft", "config": {"max_steps": 6}, "base_model": base, "created_by": ml_staff, "progress_total": 6}
    return {"running": TrainingJob.objects.create(name="running", status="running", **job),
            "failed": TrainingJob.objects.create(name="failed", status="failed", **job),
            "build": Dataset.objects.create(name="build", kind="hsa", created_by=ml_staff, status="running"),
            "sent": sent}


OWNER_ACTIONS = {
    "job detail": lambda c, w: c.get(f"/api/training-jobs/{w['running'].pk}/"),
    "cancel job": lambda c, w: c.post(f"/api/training-jobs/{w['running'].pk}/cancel/"),
    "resume job": lambda c, w: c.post(f"/api/training-jobs/{w['failed'].pk}/resume/"),
    "build detail": lambda c, w: c.get(f"/api/datasets/{w['build'].pk}/"),
    "cancel build": lambda c, w: c.post(f"/api/datasets/{w['build'].pk}/cancel"),
}
OWNER_COLUMNS = ["ml_staff", "ml_staff2", "ml_lead", "manager"]
#                  owner (erin)  other ML staff  ML lead  no ML role
OWNER_MATRIX = {
    "job detail":   (R,           R,              R,       D),
    "cancel job":   (R,           D,              R,       D),
    "resume job":   (R,           D,              R,       D),
    "build detail": (R,           R,              R,       R),
    "cancel build": (R,           D,              R,       D),
}
OWNER_CASES = [(a, who, e) for a, row in OWNER_MATRIX.items() for who, e in zip(OWNER_COLUMNS, row)]


def test_owner_matrix_covers_every_action():
    assert set(OWNER_MATRIX) == set(OWNER_ACTIONS)


def _work_state():
    from training_jobs.models import Dataset, TrainingJob

    return (sorted(TrainingJob.objects.values_list("name", "status", "cancel_requested", "resumes")),
            sorted(Dataset.objects.values_list("name", "status", "cancel_requested")), AuditEvent.objects.count())


@pytest.mark.parametrize("action, who, expected", OWNER_CASES, ids=[f"{a}-{w}" for a, w, _ in OWNER_CASES])
def test_owner_matrix(request, erin_work, action, who, expected):
    client = _client(request, who)
    before = _work_state()
    response = OWNER_ACTIONS[action](client, erin_work)
    assert response.status_code == expected, (action, who, response.content[:300])
    if expected >= 400:
        body = response.json()
        assert body["code"] in {"permission_denied", "not_allowed"} and body["detail"]
        if who == "ml_staff2":  # the role allows it, the object's owner does not
            assert body["code"] == "not_allowed" and "only ml_erin, who started it, or an ML lead may" in body["detail"]
        assert _work_state() == before and erin_work["sent"] == [], "a refused request changed something"
