"""Try this draft: one viewer comment sent, in one click, to a harness version and to the version ``production``
points at, side by side, on the same room state and the same model.

Nothing here runs a turn: each side is an ordinary preview room (:func:`streams.services.preview.preview_open`, the
demo live room, the default endpoint) that gets the comment through
:func:`streams.services.preview.preview_comment_post`, so its turn runs in the interactive runner (the interactive
queue, never behind batch jobs) through the one engine, and streams over the room's WebSocket like any preview.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from console.errors import ValidationFailed
from streams.models import ModelEndpoint, PreviewRoom
from streams.services.catalog import model_endpoint_ensure_default
from streams.services.preview import (
    MAX_VIEWER_COMMENT_CHARS,
    _require_preview,
    preview_comment_post,
    preview_open,
)

DRAFT, PRODUCTION = "draft", "production"


@dataclass(frozen=True)
class TrySide:
    side: str  # DRAFT (the version tried) or PRODUCTION
    version: Any  # harness_editor.models.HarnessVersion
    room: PreviewRoom
    turn_id: str


def try_draft_production(version):
    """The version the harness's ``production`` label points at, or None when it has no such label."""
    from harness_editor.models import Label

    label = Label.objects.select_related("version__harness").filter(harness_id=version.harness_id,
                                                                     name="production").first()
    return label.version if label is not None else None


def try_draft_problems(version) -> list[dict[str, str]]:
    """Why ``version`` does not validate under today's rules (each ``{"path", "message"}``); [] when it does. A
    stored version always loads (under the rules of its day), so this parses its text again with every check on."""
    from harness_editor.schemas import ManifestError, load_json, parse_manifest

    try:
        parse_manifest(load_json(version.manifest_json))
    except ManifestError as exc:
        return [{"path": e.path, "message": e.message} for e in exc.errors] or [{"path": "", "message": str(exc)}]
    return []


def try_draft_endpoint(version=None) -> ModelEndpoint:
    """The endpoint a draft is tried on: the default one, unless its model was never trained on ``version``'s
    harness and another endpoint's model was (this very version first): one click, no setup, and a flagship draft
    is not tried on a model that can only fall back on it."""
    from streams.model_fit import model_fit

    default = ModelEndpoint.objects.filter(is_default=True).first() or model_endpoint_ensure_default()
    if version is not None:
        fit = model_fit(endpoint=default, version=version)
        if fit is not None and fit.better:
            return ModelEndpoint.objects.get(pk=fit.better[0]["id"])
    return default


def try_draft_start(*, user, version, text: str) -> list[TrySide]:
    """Open one preview room per side (the version tried; the production version, when there is one and it is
    another version) on the same room state and endpoint, and post ``text`` to each: their turns are queued on the
    interactive queue when this commits. All or nothing: a refused comment opens no room. Returns the sides,
    the tried version first."""
    _require_preview(user)
    text = (text or "").strip()
    if not text:
        raise ValidationFailed("the comment is empty", errors=[{"path": "text", "message": "write something"}])
    if len(text) > MAX_VIEWER_COMMENT_CHARS:
        raise ValidationFailed("the comment is too long", errors=[
            {"path": "text", "message": f"at most {MAX_VIEWER_COMMENT_CHARS} characters"}])
    problems = try_draft_problems(version)
    if problems:
        raise ValidationFailed(f"v{version.number} does not validate: fix it in the editor, then try it",
                               errors=problems)
    production = try_draft_production(version)
    versions = [(DRAFT, version)]
    if production is not None and production.pk != version.pk:
        versions.append((PRODUCTION, production))
    endpoint = try_draft_endpoint(version)
    sides: list[TrySide] = []
    with transaction.atomic():
        rooms = [(side, v, preview_open(user=user, version=v, endpoint=endpoint, seed=0)) for side, v in versions]
        state = rooms[0][2].room_state
        for _side, _v, room in rooms[1:]:  # read once: the same room state on both sides, whatever changed meanwhile
            PreviewRoom.objects.filter(pk=room.pk).update(room_state=state)
            room.room_state = state
        for side, v, room in rooms:
            sides.append(TrySide(side=side, version=v, room=room,
                                 turn_id=preview_comment_post(user=user, room=room, text=text)))
    return sides
