"""Whose training job is it (issue 10, point 8): every ML staff member watches every job and build (pages, API,
ws/training/<id>/), but only the person who started one, or an ML lead, cancels or resumes it, cancels a dataset
build, or stops a model server they did not start. The finding: a second ML user cancelled erin's training job.

The API side is in the authorization matrix too (tests/console/test_authz_matrix_api.py)."""

from __future__ import annotations

import asyncio

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from rest_framework.test import APIClient

from console import roles
from console.errors import NotAllowed
from console.models import AuditEvent
from streams.models import ModelEndpoint
from training_jobs import services, tasks
from training_jobs.models import Dataset, TrainingJob

pytestmark = pytest.mark.django_db

CONFIG = {"max_steps": 6, "per_device_batch_size": 2, "learning_rate": 5e-3, "save_steps": 3, "max_length": 1024}
NOT_YOURS_JOB = "only ml_erin, who started it, or an ML lead may"


@pytest.fixture
def sent(monkeypatch):
    """Celery sends (training, serving), recorded instead of queued."""
    out = []
    monkeypatch.setattr(tasks.training_job, "apply_async", lambda args, queue, task_id: out.append(("train", args)))
    from streams import serving_tasks  # the model page serves through serve profiles (streams.services.serving)

    monkeypatch.setattr(serving_tasks.server_run, "apply_async", lambda args, queue: out.append(("serve", args)))
    monkeypatch.setattr(serving_tasks.server_stop, "apply_async", lambda args, queue: out.append(("stop", args)))
    return out


@pytest.fixture
def erin(ml_staff):
    """erin's (ml_staff's) running and failed training jobs and running dataset build."""
    base = services.demo_base_model()

    def job(name, status, **kw):
        return TrainingJob.objects.create(name=name, kind="sft", status=status, config=CONFIG, base_model=base,
                                          created_by=ml_staff, progress_total=6, **kw)

    return {"running": job("erin-running", "running", progress_done=3, metrics=[{"step": 1, "loss": 2.0, "t": 1.0}]),
            "failed": job("erin-failed", "failed", error="boom"),
            "build": Dataset.objects.create(name="erin-build", kind="hsa", created_by=ml_staff, status="running",
                                            progress_done=5, progress_total=16, stage="building rows"),
            "base": base}


def _state():
    return (sorted(TrainingJob.objects.values_list("name", "status", "cancel_requested", "resumes")),
            sorted(Dataset.objects.values_list("name", "status", "cancel_requested")), AuditEvent.objects.count())


# --- services ----------------------------------------------------------------------------------------------------

def test_another_ml_user_cannot_cancel_resume_or_cancel_a_build(erin, ml_staff2, sent):
    before = _state()
    for act, what in ((lambda: services.training_job_cancel(user=ml_staff2, job=erin["running"]), "cancel this job"),
                      (lambda: services.training_job_resume(user=ml_staff2, job=erin["failed"]), "resume this job"),
                      (lambda: services.dataset_cancel(user=ml_staff2, dataset=erin["build"]), "cancel this build")):
        with pytest.raises(NotAllowed) as refused:
            act()
        assert refused.value.message == f"{NOT_YOURS_JOB} {what}"
    assert _state() == before and sent == []


def test_the_owner_and_an_ml_lead_may(erin, ml_staff, ml_lead, sent):
    services.training_job_cancel(user=ml_lead, job=erin["running"])
    services.dataset_cancel(user=ml_lead, dataset=erin["build"])
    services.training_job_resume(user=ml_staff, job=erin["failed"])
    assert TrainingJob.objects.get(pk=erin["running"].pk).status == "cancelling"
    assert Dataset.objects.get(pk=erin["build"].pk).cancel_requested
    assert TrainingJob.objects.get(pk=erin["failed"].pk).status == "queued"
    assert list(AuditEvent.objects.order_by("id").values_list("actor__username", "action")) == [
        ("ml_ivan", "training.cancel"), ("ml_ivan", "dataset.cancel"), ("ml_erin", "training.resume")]


# --- pages ---------------------------------------------------------------------------------------------------------

def test_pages_show_another_ml_user_the_jobs_but_not_the_buttons(client, erin, ml_staff2, sent):
    client.force_login(ml_staff2)
    running, failed, build = erin["running"], erin["failed"], erin["build"]
    for url in (f"/training/{running.pk}/", f"/training/{failed.pk}/", f"/datasets/{build.pk}/"):
        page = client.get(url)
        assert page.status_code == 200, url
        body = page.content.decode()
        assert 'data-testid="cancel"' not in body and 'data-testid="resume"' not in body, url
        assert 'data-testid="not-yours"' in body and "started by ml_erin" in body, url
    before = _state()
    for url, what in ((f"/training/{running.pk}/cancel/", "cancel this job"),
                      (f"/training/{failed.pk}/resume/", "resume this job"),
                      (f"/datasets/{build.pk}/cancel/", "cancel this build")):
        response = client.post(url)
        assert response.status_code == 403, url
        assert f"{NOT_YOURS_JOB} {what}" in response.content.decode()
    assert _state() == before and sent == []


def test_pages_give_an_ml_lead_the_buttons(client, erin, ml_lead, sent, django_capture_on_commit_callbacks):
    client.force_login(ml_lead)
    running, failed, build = erin["running"], erin["failed"], erin["build"]
    assert 'data-testid="cancel"' in client.get(f"/training/{running.pk}/").content.decode()
    assert 'data-testid="resume"' in client.get(f"/training/{failed.pk}/").content.decode()
    assert 'data-testid="cancel"' in client.get(f"/datasets/{build.pk}/").content.decode()
    assert client.post(f"/training/{running.pk}/cancel/").status_code == 302
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(f"/training/{failed.pk}/resume/").status_code == 302
    assert client.post(f"/datasets/{build.pk}/cancel/").status_code == 302
    assert [s[0] for s in sent] == ["train"]
    assert {j.name: j.status for j in TrainingJob.objects.all()} == {"erin-running": "cancelling",
                                                                     "erin-failed": "queued"}


def test_a_model_server_is_stopped_by_who_started_it_its_owner_or_an_ml_lead(client, erin, ml_staff, ml_staff2,
                                                                            ml_lead, sent,
                                                                            django_capture_on_commit_callbacks):
    from streams.models import ServerInstance

    base = erin["base"]  # the demo base model: nobody owns it
    services.model_serve_start(user=ml_staff, model=base)
    base.endpoint = ModelEndpoint.objects.create(name="model-demo", base_url="http://127.0.0.1:9/v1", model="demo")
    base.save(update_fields=["endpoint"])
    instance = ServerInstance.objects.get(model=base)  # a serve worker on host-b runs it
    ServerInstance.objects.filter(pk=instance.pk).update(status="ready", host="host-b", pid=1,
                                                         endpoint=base.endpoint)
    client.force_login(ml_staff2)
    page = client.get(f"/models/{base.pk}/").content.decode()
    assert 'data-testid="unserve"' not in page and 'data-testid="not-yours"' in page
    response = client.post(f"/models/{base.pk}/serve/", {"stop": "1"})
    assert response.status_code == 403 and "only the person who started its server" in response.content.decode()
    with pytest.raises(NotAllowed):
        services.model_unserve(user=ml_staff2, model=base)
    assert sent == [] and AuditEvent.objects.filter(action="model.unserve").count() == 0
    for user in (ml_lead, ml_staff):
        client.force_login(user)
        assert 'data-testid="unserve"' in client.get(f"/models/{base.pk}/").content.decode()
        with django_capture_on_commit_callbacks(execute=True):
            services.model_unserve(user=user, model=base)
    assert sent == [("stop", (str(instance.pk),))] * 2  # to serve.host-b, the host running it
    assert list(AuditEvent.objects.filter(action="model.unserve").order_by("id")
                .values_list("actor__username", flat=True)) == ["ml_ivan", "ml_erin"]


# --- API -----------------------------------------------------------------------------------------------------------

def test_api_refuses_another_ml_user_with_the_error_shape(erin, ml_staff2, sent):
    api = APIClient()
    api.force_login(ml_staff2)
    assert api.get(f"/api/training-jobs/{erin['running'].pk}/").status_code == 200  # watching is fine
    before = _state()
    for url, what in ((f"/api/training-jobs/{erin['running'].pk}/cancel/", "cancel this job"),
                      (f"/api/training-jobs/{erin['failed'].pk}/resume/", "resume this job"),
                      (f"/api/datasets/{erin['build'].pk}/cancel", "cancel this build")):
        response = api.post(url)
        assert response.status_code == 403, url
        assert response.json() == {"detail": f"{NOT_YOURS_JOB} {what}", "code": "not_allowed", "errors": []}
    assert _state() == before and sent == []


# --- the progress WebSocket: every ML staff member watches --------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_another_ml_user_and_a_lead_watch_the_progress_socket(erin, ml_staff2, ml_lead, manager):
    from tests.training_jobs.test_training_progress_ws import login_cookie, ws
    from training_jobs.consumers import CLOSE_FORBIDDEN

    for u in (ml_staff2, ml_lead, manager):
        login_cookie(u)

    async def go():
        out = []
        for u in (ml_staff2, ml_lead):
            comm = ws(erin["running"].pk, u)
            connected, _ = await comm.connect(timeout=5)
            assert connected
            out.append(await comm.receive_json_from(timeout=5))
            await comm.disconnect()
        comm = ws(erin["running"].pk, manager)
        out.append(await comm.connect(timeout=5))
        return out

    try:
        judy, ivan, manager_answer = asyncio.run(go())
    finally:  # the consumer's database calls ran in asgiref's sync thread: close its connection
        from asgiref.sync import sync_to_async
        from django.db import connections

        asyncio.run(sync_to_async(connections.close_all)())
    assert judy["job"]["status"] == ivan["job"]["status"] == "running" and judy["points"][0]["loss"] == 2.0
    assert manager_answer == (False, CLOSE_FORBIDDEN)


# --- the role ------------------------------------------------------------------------------------------------------

def test_the_ml_lead_role_is_ml_staff_plus_managing_others_work(ml_lead, ml_staff):
    group = Group.objects.get(name=roles.ML_LEAD)
    perms = {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.select_related("content_type")}
    # plus the second pair of eyes on deployment changes and their rollback (a model or adapter goes live)
    assert perms == roles.ROLE_PERMISSIONS[roles.ML_STAFF] | {roles.MANAGE_ANY_TRAINING, roles.PIN_EVAL_SET,
                                                              roles.REVIEW_DEPLOYMENT, roles.ROLLBACK_DEPLOYMENT}
    assert ml_lead.has_perm(roles.MANAGE_ANY_TRAINING) and not ml_staff.has_perm(roles.MANAGE_ANY_TRAINING)
    assert Permission.objects.get(codename="manage_any_trainingjob").name == (
        "Can cancel and resume other people's training jobs and dataset builds (ML lead)")
    assert roles.user_roles(ml_lead) == [roles.ML_LEAD]


def test_seed_demo_creates_ivan_the_ml_lead(capsys):
    from django.contrib.auth import get_user_model

    call_command("seed_demo", password="pw-for-tests-123")
    ivan = get_user_model().objects.get(username="ivan")
    assert roles.user_roles(ivan) == [roles.ML_LEAD] and ivan.check_password("pw-for-tests-123")
    assert ivan.has_perm(roles.MANAGE_ANY_TRAINING) and "ivan" in capsys.readouterr().out
