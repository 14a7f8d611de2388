"""Who may touch whose preview room (issue 10, point 8), through the services and the pages.

An interactive room belongs to its owner and the people the owner invites: they see it, comment and drive its
clock; only the owner invites, removes and closes; everyone else (even with the preview role) gets a 404, as for
a room that does not exist. A scenario run is shared evidence: every preview user reads it, only its owner drives
or cancels it. A comment carries the console user who sent it; nobody comments under a colleague's username.
The WebSocket side is tests/streams/test_room_access_channels.py."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console.errors import NotAllowed, ValidationFailed
from console.models import AuditEvent
from streams import selectors, services
from streams.models import PreviewEvent, PreviewRoom

pytestmark = pytest.mark.django_db

ROOM_POSTS = ("play", "pause", "resume", "close")


@pytest.fixture
def scenario(demo_scenarios):
    return demo_scenarios["after-sales-faults"]


@pytest.fixture
def room(manager, harness_with_history, scripted_model, scenario):
    """cm_alice's interactive room, playing a scenario (so every clock control applies)."""
    return services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model,
                                 scenario=scenario)


@pytest.fixture
def no_ticks(monkeypatch):
    """Play queues clock ticks on commit: recorded here, never sent to a broker."""
    from streams import tasks

    sent = []
    monkeypatch.setattr(tasks.preview_clock_tick, "apply_async", lambda args, countdown=0: sent.append(args))
    monkeypatch.setattr(tasks.preview_turn, "delay", lambda *args: sent.append(args))
    return sent


def _login(client, user):
    client.force_login(user)
    return client


def _state(room):
    room = PreviewRoom.objects.get(pk=room.pk)
    return (room.status, room.paused, room.playing, room.last_seq, sorted(room.members.values_list("pk", flat=True)),
            AuditEvent.objects.count())


# --- the room matrix: pages, by who the user is to the room ------------------------------------------------------

def _pages(room):
    return {
        "room page": ("get", reverse("streams:preview_room", args=[room.pk]), {}),
        "transcript": ("get", reverse("streams:preview_transcript", args=[room.pk]), {}),
        "play": ("post", reverse("streams:preview_play", args=[room.pk]), {"speed": "10"}),
        "pause": ("post", reverse("streams:preview_pause", args=[room.pk]), {}),
        "resume": ("post", reverse("streams:preview_resume", args=[room.pk]), {}),
        "invite": ("post", reverse("streams:preview_member_add", args=[room.pk]), {"username": "cr_dave"}),
        "close": ("post", reverse("streams:preview_close", args=[room.pk]), {}),
    }


OK, GO, NO, HID, FBD = 200, 302, 403, 404, 403  # page, done (back to the room), refused, hidden, no role
#                 owner member other  reviewer-other  operator
ROOM_MATRIX = {
    "room page":  (OK,   OK,    HID,   HID,            FBD),
    "transcript": (OK,   OK,    HID,   HID,            FBD),
    "play":       (GO,   GO,    HID,   HID,            FBD),
    "pause":      (GO,   GO,    HID,   HID,            FBD),
    "resume":     (GO,   GO,    HID,   HID,            FBD),
    "invite":     (GO,   NO,    HID,   HID,            FBD),
    "close":      (GO,   NO,    HID,   HID,            FBD),
}
WHO = ["owner", "member", "other", "reviewer", "operator"]
CASES = [(action, who, expected) for action, row in ROOM_MATRIX.items() for who, expected in zip(WHO, row)]


@pytest.mark.parametrize("action, who, expected", CASES, ids=[f"{a}-{w}" for a, w, _ in CASES])
def test_room_matrix(client, room, manager, manager2, reviewer, reviewer2, operator, no_ticks, action, who,
                     expected):
    services.preview_member_add(user=manager, room=room, username=manager2.username)
    user = {"owner": manager, "member": manager2, "other": reviewer, "reviewer": reviewer2,
            "operator": operator}[who]
    method, url, data = _pages(room)[action]
    before = _state(room)
    response = getattr(_login(client, user), method)(url, data)
    assert response.status_code == expected, (action, who, response.content[:300])
    if expected >= 400:
        assert _state(room) == before, "a refused request changed something"
    if expected == HID:  # the same page as for a room that does not exist: nothing about it leaks
        body = response.content.decode()
        assert str(room.pk) not in body and room.created_by.username not in body
    if who == "member" and expected == NO:
        assert "only cm_alice, who opened this preview room, may" in response.content.decode()


def test_matrix_covers_every_room_action():
    assert set(ROOM_MATRIX) == set(_pages(PreviewRoom(pk="00000000-0000-0000-0000-000000000000")))


def test_list_shows_only_rooms_i_own_or_was_invited_to(client, room, manager, manager2, reviewer,
                                                       harness_with_history, scripted_model):
    bobs = services.preview_open(user=manager2, version=harness_with_history["v1"], endpoint=scripted_model)
    url = reverse("streams:preview_list")
    listing = _login(client, reviewer).get(url).content.decode()
    assert str(room.pk) not in listing and str(bobs.pk) not in listing
    listing = _login(client, manager2).get(url).content.decode()
    assert str(room.pk) not in listing and str(bobs.pk) in listing
    services.preview_member_add(user=manager, room=room, username=manager2.username)
    listing = _login(client, manager2).get(url).content.decode()
    assert str(room.pk) in listing and 'data-testid="invited"' in listing
    assert set(selectors.preview_room_list(user=manager2)) == {bobs, room}
    assert list(selectors.preview_room_list(user=reviewer)) == []


# --- the services: what was reproduced ---------------------------------------------------------------------------

def test_another_preview_user_can_neither_post_nor_drive_nor_close(room, manager, manager2, no_ticks):
    """The finding: manager2 (a campaign manager too) posted as 'alice', paused and closed alice's room."""
    before = _state(room)
    for act in (lambda: services.preview_comment_post(user=manager2, room=room, text="hi", viewer="cm_alice"),
                lambda: services.preview_comment_post(user=manager2, room=room, text="hi"),
                lambda: services.preview_pause(user=manager2, room=room),
                lambda: services.preview_resume(user=manager2, room=room),
                lambda: services.preview_play(user=manager2, room=room, speed=10),
                lambda: services.preview_clock_step(user=manager2, room=room, minutes=1),
                lambda: services.preview_version_switch(user=manager2, room=room, version=room.harness_version),
                lambda: services.preview_close(user=manager2, room=room),
                lambda: services.preview_member_add(user=manager2, room=room, username=manager2.username)):
        with pytest.raises(NotAllowed) as refused:
            act()
        assert "not in this preview room" in refused.value.message
    assert _state(room) == before


def test_a_member_drives_but_only_the_owner_closes_or_invites(room, manager, manager2, reviewer, no_ticks):
    services.preview_member_add(user=manager, room=room, username=manager2.username)
    services.preview_pause(user=manager2, room=room)
    services.preview_resume(user=manager2, room=room)
    services.preview_clock_step(user=manager2, room=room, minutes=1)
    services.preview_comment_post(user=manager2, room=room, text="is #101 on sale?")
    for act in (lambda: services.preview_close(user=manager2, room=room),
                lambda: services.preview_member_add(user=manager2, room=room, username=reviewer.username),
                lambda: services.preview_member_remove(user=manager2, room=room, username=manager2.username)):
        with pytest.raises(NotAllowed, match="only cm_alice, who opened this preview room, may"):
            act()
    services.preview_close(user=manager, room=room)
    assert PreviewRoom.objects.get(pk=room.pk).status == "closed"


def test_comments_carry_their_sender_and_never_a_colleagues_name(client, room, manager, manager2, reviewer,
                                                                 no_ticks):
    services.preview_member_add(user=manager, room=room, username=manager2.username)
    for name in ("cm_alice", "CM_ALICE", " cr_carol "):  # another console user's username, in any case
        with pytest.raises(ValidationFailed) as refused:
            services.preview_comment_post(user=manager2, room=room, text="approve it", viewer=name)
        assert refused.value.errors[0]["path"] == "viewer"
        assert "another console user's username" in refused.value.errors[0]["message"]
    assert not PreviewEvent.objects.filter(room=room, type="viewer_comment", payload__source="viewer").exists()
    services.preview_comment_post(user=manager2, room=room, text="hello", viewer="Mia")  # a viewer persona
    services.preview_comment_post(user=manager2, room=room, text="me again")  # default: their own username
    services.preview_comment_post(user=manager2, room=room, text="still me", viewer="CM_BOB")  # their own name
    comments = [e.payload for e in PreviewEvent.objects.filter(room=room, type="viewer_comment",
                                                               payload__source="viewer").order_by("seq")]
    assert [(c["viewer"], c["sent_by"], c["viewer_id"]) for c in comments] == [
        ("Mia", "cm_bob", f"user-{manager2.pk}"), ("cm_bob", "cm_bob", f"user-{manager2.pk}"),
        ("CM_BOB", "cm_bob", f"user-{manager2.pk}")]
    transcript = _login(client, manager).get(reverse("streams:preview_transcript", args=[room.pk])).content.decode()
    assert transcript.count('data-testid="sent-by">sent by cm_bob</span>') == 3
    page = _login(client, manager2).get(reverse("streams:preview_room", args=[room.pk])).content.decode()
    assert 'id="comment-viewer" class="narrow" value="cm_bob"' in page and "sent by cm_bob" in page


# --- inviting and removing -------------------------------------------------------------------------------------

def test_invite_form_errors_are_clear_and_save_nothing(client, room, manager, operator, outsider):
    c = _login(client, manager)
    url = reverse("streams:preview_member_add", args=[room.pk])
    for username, message in (("nobody-here", "no console user is called &#x27;nobody-here&#x27;"),
                              (operator.username, "op_frank does not hold a role that may use the preview room"),
                              (outsider.username, "nobody_gina does not hold a role that may use the preview room"),
                              (manager.username, "you own this room: you are in it already"),
                              ("", "required")):
        before = _state(room)
        response = c.post(url, {"username": username})
        assert response.status_code == 400, username
        assert message in response.content.decode(), (username, response.content.decode()[-3000:])
        assert 'data-testid="invite-error"' in response.content.decode()
        assert _state(room) == before


def test_invite_and_remove_through_the_page_are_audited(client, room, manager, manager2):
    c = _login(client, manager)
    page = c.get(reverse("streams:preview_room", args=[room.pk])).content.decode()
    assert 'data-testid="invite-form"' in page and 'id="close-room"' in page
    response = c.post(reverse("streams:preview_member_add", args=[room.pk]), {"username": "cm_bob"})
    assert response.status_code == 302 and response["Location"] == reverse("streams:preview_room", args=[room.pk])
    again = c.post(reverse("streams:preview_member_add", args=[room.pk]), {"username": "cm_bob"})
    assert again.status_code == 400 and "cm_bob is already in this room" in again.content.decode()
    page = c.get(reverse("streams:preview_room", args=[room.pk])).content.decode()
    assert 'data-testid="member">cm_bob' in page and 'data-testid="remove-member"' in page
    # the member sees the room, drives it, but has neither the invite form nor the close button
    member_page = _login(client, manager2).get(reverse("streams:preview_room", args=[room.pk])).content.decode()
    assert 'id="pause"' in member_page and 'id="comment-form"' in member_page
    assert 'data-testid="invite-form"' not in member_page and 'id="close-room"' not in member_page
    assert 'data-testid="remove-member"' not in member_page
    c = _login(client, manager)
    response = c.post(reverse("streams:preview_member_remove", args=[room.pk]), {"username": "cm_bob"})
    assert response.status_code == 302
    gone = c.post(reverse("streams:preview_member_remove", args=[room.pk]), {"username": "cm_bob"})
    assert gone.status_code == 400 and "cm_bob is not invited into this room" in gone.content.decode()
    events = list(AuditEvent.objects.filter(scope=f"preview:{room.pk}").order_by("id")
                  .values_list("actor__username", "action", "target", "from_state", "to_state"))
    assert events == [("cm_alice", "preview.member_added", "user:cm_bob", "", "member"),
                      ("cm_alice", "preview.member_removed", "user:cm_bob", "member", "")]
    # on the timeline page too, and in the room's own log
    timeline = c.get(reverse("timeline")).content.decode()
    assert "preview.member_added" in timeline and "preview.member_removed" in timeline
    assert [(e.type, e.payload) for e in PreviewEvent.objects.filter(room=room, type__startswith="member_")
            .order_by("seq")] == [("member_added", {"by": "cm_alice", "user": "cm_bob"}),
                                  ("member_removed", {"by": "cm_alice", "user": "cm_bob"})]
    # removed: the room is hidden from them again
    assert _login(client, manager2).get(reverse("streams:preview_room", args=[room.pk])).status_code == 404


# --- scenario runs: shared evidence, driven by their owner ---------------------------------------------------------

def test_a_run_is_read_by_every_preview_user_and_driven_by_its_owner(client, manager, reviewer, ml_staff, operator,
                                                                     harness_with_history, scripted_model, scenario,
                                                                     no_ticks):
    run = services.scenario_run_start(user=manager, version=harness_with_history["v1"], scenario=scenario,
                                      endpoint=scripted_model, play=False)
    for user in (reviewer, ml_staff):
        c = _login(client, user)
        assert str(run.pk) in c.get(reverse("streams:run_list")).content.decode()
        assert c.get(reverse("streams:preview_transcript", args=[run.pk])).status_code == 200
        page = c.get(reverse("streams:preview_room", args=[run.pk]))
        assert page.status_code == 200
        body = page.content.decode()
        assert 'data-testid="read-only"' in body and "cm_alice's scenario run" in body
        assert 'id="comment-form"' not in body and 'id="pause"' not in body and 'id="close-room"' not in body
        before = _state(run)
        for name in ROOM_POSTS:
            response = c.post(reverse(f"streams:preview_{name}", args=[run.pk]), {"speed": "10"})
            assert response.status_code == 403, name
            assert "started by cm_alice" in response.content.decode() or "only cm_alice" in response.content.decode()
        assert _state(run) == before
    assert _login(client, operator).get(reverse("streams:preview_transcript", args=[run.pk])).status_code == 403
    with pytest.raises(ValidationFailed, match="nobody is invited into a scenario run"):
        services.preview_member_add(user=manager, room=run, username=reviewer.username)
    c = _login(client, manager)
    assert 'id="close-room">Cancel the run' in c.get(reverse("streams:preview_room", args=[run.pk])).content.decode()
    assert c.post(reverse("streams:preview_close", args=[run.pk])).status_code == 302
    run.refresh_from_db()
    assert (run.job.status, run.status) == ("cancelled", "closed")  # closing a run is cancelling it
