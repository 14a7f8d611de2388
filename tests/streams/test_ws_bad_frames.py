"""A WebSocket frame that is not acceptable JSON (nested 5,000 levels, malformed, binary, with NUL) gets an error
frame and the socket stays open, on the preview room and the training progress socket: channels' JSON consumer
raised (RecursionError, JSONDecodeError, ValueError) and the socket closed with 1011."""

from __future__ import annotations

import asyncio

import pytest

from tests.streams.test_preview_channels import _fresh_channel_layer, communicator, login_cookie  # noqa: F401
from tests.training_jobs.test_training_progress_ws import job, ws  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

BAD_FRAMES = [
    ({"text_data": "[" * 5_000 + "]" * 5_000}, "nested more than"),
    ({"text_data": '{"type": "comment", "text": '}, "not JSON"),
    ({"text_data": '{"type": "comment", "text": "a\\u0000b"}'}, "NUL characters"),
    ({"bytes_data": b'{"type": "pause"}'}, "JSON text frame"),
]


async def _bad_frames_then_alive(comm) -> list[dict]:
    """Send every bad frame; return the answers, then prove the socket is still open with a valid frame."""
    answers = []
    for frame, _ in BAD_FRAMES:
        await comm.send_to(**frame)
        while True:
            message = await comm.receive_json_from(timeout=5)
            if message.get("type") == "error":
                answers.append(message)
                break
    await comm.send_json_to([1, 2])  # valid JSON, not an object: the consumer's own error, the socket still open
    return answers


def test_preview_room_answers_bad_frames_and_stays_open(manager, harness_with_history, scripted_model):
    from streams import services

    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    login_cookie(manager)

    async def go():
        comm = communicator(room.pk, manager)
        assert (await comm.connect(timeout=5))[0]
        answers = await _bad_frames_then_alive(comm)
        last = await comm.receive_json_from(timeout=5)
        while last.get("type") != "error":
            last = await comm.receive_json_from(timeout=5)
        await comm.disconnect()
        return answers, last

    answers, last = asyncio.run(go())
    for (_, expected), answer in zip(BAD_FRAMES, answers, strict=True):
        assert expected in answer["message"], answer
    assert last == {"type": "error", "message": "send a JSON object"}


def test_training_socket_answers_bad_frames_and_stays_open(job, ml_staff):  # noqa: F811
    login_cookie(ml_staff)

    async def go():
        comm = ws(job.pk, ml_staff)
        assert (await comm.connect(timeout=5))[0]
        answers = await _bad_frames_then_alive(comm)
        assert await comm.receive_nothing(timeout=0.5)  # the page only listens: a valid frame gets no answer
        await comm.disconnect()
        return answers

    answers = asyncio.run(go())
    for (_, expected), answer in zip(BAD_FRAMES, answers, strict=True):
        assert expected in answer["message"], answer
