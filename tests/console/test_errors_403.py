"""The 403 page says which role a page needs and which roles the user has; an ordinary 403 is one warning line in the
server's log, never a traceback (Django logs a raised PermissionDenied with its exception: console.log_filters)."""

from __future__ import annotations

import logging
import uuid

import pytest
from django.urls import reverse
from django.utils.html import strip_tags

from console import roles


def _text(response) -> str:
    return " ".join(strip_tags(response.content.decode()).split())


def test_roles_with_follows_the_role_table():
    assert roles.roles_with(roles.RUN_LIVE) == [roles.OPERATOR]
    assert roles.roles_with(roles.RUN_TRAINING) == [roles.ML_STAFF, roles.ML_LEAD]
    assert roles.roles_with(roles.VIEW_HARNESS) == list(roles.ROLES)
    assert roles.roles_with("console.no_such_permission") == []


def test_a_page_for_one_role_names_it_and_the_users_roles(client, manager):
    client.force_login(manager)
    response = client.post(reverse("live:mute", args=[uuid.uuid4()]), {"on": "1"})
    assert response.status_code == 403
    assert "This page needs the operator role; you are: campaign manager." in _text(response)


def test_a_page_for_several_roles_names_each(client, manager):
    client.force_login(manager)
    response = client.get(reverse("training:new"))
    assert response.status_code == 403
    assert "This page needs one of the roles ML staff or ML lead; you are: campaign manager." in _text(response)
    assert 'data-testid="needed-roles"' in response.content.decode()


def test_a_user_without_a_role_is_told_so(client, outsider):
    client.force_login(outsider)
    response = client.get(reverse("timeline"))
    assert response.status_code == 403
    text = _text(response)
    assert "This page needs one of the roles campaign manager, compliance reviewer" in text
    assert "you are: without a console role." in text and "no console role yet" in text


def test_a_permission_no_role_holds(rf, manager):
    from console.views import role_required

    @role_required("console.no_such_permission")
    def page(request):  # pragma: no cover - never reached
        raise AssertionError

    request = rf.get("/somewhere/")
    request.user = manager
    response = page(request)
    assert response.status_code == 403
    assert "a permission no console role has" in " ".join(strip_tags(response.content.decode()).split())


def test_an_object_rule_403_keeps_its_own_message(client, harness_with_history, manager2):
    """A view that raises PermissionDenied itself (here: only the author edits a draft) shows its reason."""
    client.force_login(manager2)
    response = client.get(reverse("harness_editor:edit", args=["glow-gadget", 3]))
    assert response.status_code == 403
    assert "only the author edits a draft" in _text(response)


def _forbidden_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "django.request" and getattr(r, "status_code", None) == 403]


@pytest.mark.parametrize("how", ["role gate", "raised PermissionDenied"])
def test_a_403_is_logged_as_a_warning_without_traceback(client, caplog, harness_with_history, manager, manager2,
                                                        how):
    caplog.set_level(logging.WARNING, logger="django.request")
    if how == "role gate":
        client.force_login(manager)
        path = reverse("training:new")
    else:
        client.force_login(manager2)
        path = reverse("harness_editor:edit", args=["glow-gadget", 3])
    assert client.get(path).status_code == 403
    records = _forbidden_records(caplog)
    assert len(records) == 1, caplog.text
    record = records[0]
    assert record.levelno == logging.WARNING and path in record.getMessage()
    assert record.exc_info is None and not record.exc_text
    assert "Traceback" not in caplog.text


def test_other_errors_keep_their_traceback():
    """The filter drops the traceback of a refusal only."""
    from console.log_filters import RefusalWithoutTraceback

    try:
        raise ValueError("a real bug")
    except ValueError:
        import sys

        record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "boom", (), sys.exc_info())
    assert RefusalWithoutTraceback().filter(record) and record.exc_info is not None

