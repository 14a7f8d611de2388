"""Reads for reviews: what a confirmation page says will change (label moves, rollbacks, discards), the review
comments of a diff placed on the diff's lines, and the review checklist."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from console import roles
from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from harness_editor.label_impact import LabelImpact, label_impact
from harness_editor.models import ApprovalChecklist, Harness, HarnessVersion, Label, ReviewChecklistItem, ReviewComment
from harness_editor.selectors import label_history
from harness_editor.services import label_move_refusals

Status = HarnessVersion.Status
_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


# --- confirmations ----------------------------------------------------------------------------------------


@dataclass
class LabelMovePlan:
    """A label move as the confirmation page shows it: ``name`` goes from ``from_version`` (None: the label is new)
    to ``to_version``, reaching what ``impact`` lists."""

    harness: Harness
    name: str
    from_version: HarnessVersion | None
    to_version: HarnessVersion
    impact: LabelImpact
    rollback: bool = False

    @property
    def expected_from(self) -> str:
        """What the confirming POST says the label pointed at, so a move in between is caught, not overwritten."""
        return str(self.from_version.number) if self.from_version else ""


def _label_now(harness: Harness, name: str) -> HarnessVersion | None:
    label = Label.objects.select_related("version").defer("version__manifest_json").filter(
        harness=harness, name=name).first()
    return label.version if label else None


def label_move_plan(*, harness: Harness, name: str, version: HarnessVersion, rollback: bool = False) -> LabelMovePlan:
    """What moving ``name`` to ``version`` would do; refuses (ValidationFailed) what the move itself would refuse,
    with the same messages (harness_editor.services.label_move_refusals), so errors show before the confirmation step."""
    label_move_refusals(harness=harness, name=name, version=version)
    now = _label_now(harness, name)
    if now is not None and now.id == version.id:
        raise ValidationFailed("nothing to move", errors=[
            {"path": "version", "message": f"'{name}' already points at v{version.number}"}])
    return LabelMovePlan(harness=harness, name=name, from_version=now, to_version=version,
                         impact=label_impact(harness, name), rollback=rollback)


def label_rollback_plan(*, harness: Harness, name: str) -> LabelMovePlan:
    """What rolling ``name`` back would do (to where it pointed before its latest move, as
    harness_editor.services.label_rollback does), with its errors."""
    last = label_history(harness=harness, name=name).first()
    if last is None:
        raise ValidationFailed("no such label", errors=[{"path": "name", "message": f"no label '{name}'"}])
    previous_id = last.data.get("from_version_id")
    if previous_id is None:
        raise ValidationFailed("nothing to roll back to", errors=[
            {"path": "name", "message": f"'{name}' has no earlier version"}])
    previous = HarnessVersion.objects.defer("manifest_json").get(pk=previous_id)
    return label_move_plan(harness=harness, name=name, version=previous, rollback=True)


def discard_check(*, user, version: HarnessVersion) -> None:
    """The refusals of harness_editor.services.version_discard_draft, before its confirmation step."""
    if version.author_id != user.id:
        raise NotAllowed("only the author can discard a draft")
    if version.status != Status.DRAFT:
        raise InvalidTransition(f"v{version.number} is {version.status}; only drafts can be discarded")
    if version.children.exists():
        raise InvalidTransition(f"v{version.number} is the parent of other versions")


# --- review comments on the diff ----------------------------------------------------------------------------


def line_anchor(component: str, path: str, line: str) -> str:
    """The HTML id of a diff line (or, with ``line`` empty, of a whole change): the same on every render."""
    digest = hashlib.sha1(f"{component}\x1f{path}\x1f{line}".encode()).hexdigest()[:16]
    return f"dl-{digest}"


def _keyed_lines(lines: list[dict[str, str]]) -> None:
    """Give each line of a unified diff its key: ``o<n>`` for a removed line (its number in the old text),
    ``n<n>`` for an added or context line (its number in the new text); header lines get none."""
    old = new = 0
    for line in lines:
        css, key = line["css"], ""
        if css == "hunk":
            match = _HUNK_RE.match(line["text"])
            if match:
                old, new = int(match.group(1)), int(match.group(2))
        elif css == "del":
            key, old = f"o{old}", old + 1
        elif css == "add":
            key, new = f"n{new}", new + 1
        elif css == "ctx":
            key, old, new = f"n{new}", old + 1, new + 1
        line["key"] = key


@dataclass
class Thread:
    root: ReviewComment
    replies: list[ReviewComment] = field(default_factory=list)

    @property
    def resolved(self) -> bool:
        return self.root.is_resolved


def diff_threads(*, version: HarnessVersion, base_number: int) -> list[Thread]:
    comments = list(ReviewComment.objects.filter(version=version, base_number=base_number)
                    .select_related("author", "resolved_by").order_by("id"))
    threads = {c.id: Thread(root=c) for c in comments if c.thread_id is None}
    for c in comments:
        if c.thread_id is not None and c.thread_id in threads:
            threads[c.thread_id].replies.append(c)
    return list(threads.values())


def annotate_diff(diff: dict[str, Any], threads: list[Thread], *, comment_on: str = "") -> list[Thread]:
    """Place ``threads`` on the lines of ``diff`` (views.diff_context's groups): every change and every line gets
    ``anchor`` and ``threads``; ``comment_on`` (an anchor) marks where the comment form opens. Answers the threads
    whose line is no longer in the diff, or says something else now (outdated)."""
    by_place: dict[tuple[str, str, str], list[Thread]] = {}
    for t in threads:
        by_place.setdefault((t.root.component, t.root.path, t.root.line), []).append(t)
    placed: set[int] = set()
    for group in diff["groups"]:
        for item in group["changes"]:
            change = item["c"]
            path = change.path or change.key
            item["path"] = path
            item["anchor"] = line_anchor(change.component, path, "")
            item["threads"] = by_place.get((change.component, path, ""), [])
            item["commenting"] = comment_on == item["anchor"]
            placed.update(id(t) for t in item["threads"])
            _keyed_lines(item["lines"])
            for line in item["lines"]:
                if not line["key"]:
                    continue
                line["anchor"] = line_anchor(change.component, path, line["key"])
                line["commenting"] = comment_on == line["anchor"]
                here = [t for t in by_place.get((change.component, path, line["key"]), [])
                        if t.root.line_text == line["text"]]
                line["threads"] = here
                placed.update(id(t) for t in here)
    return [t for t in threads if id(t) not in placed]


def diff_line(diff: dict[str, Any], *, component: str, path: str, line: str) -> str | None:
    """The text of ``line`` of the change (component, path) in ``diff`` ("" for the change as a whole); None when
    the diff has no such change or line."""
    for group in diff["groups"]:
        for item in group["changes"]:
            change = item["c"]
            if change.component != component or (change.path or change.key) != path:
                continue
            if not line:
                return ""
            lines = [dict(x) for x in item["lines"]]
            _keyed_lines(lines)
            for x in lines:
                if x["key"] == line:
                    return x["text"]
    return None


def unresolved_count(*, version: HarnessVersion) -> int:
    return ReviewComment.objects.filter(version=version, thread__isnull=True, resolved_at__isnull=True).count()


def may_comment(user, version: HarnessVersion) -> bool:
    """Reviewers, and the version's author (to answer them), comment on its diff."""
    return version.author_id == user.id or user.has_perm(roles.REVIEW_VERSION)


# --- checklist -------------------------------------------------------------------------------------------


def checklist_items() -> list[ReviewChecklistItem]:
    return list(ReviewChecklistItem.objects.filter(active=True).order_by("position", "id"))


def approval_checklist(*, version: HarnessVersion) -> ApprovalChecklist | None:
    return ApprovalChecklist.objects.select_related("ticked_by").filter(version=version).first()
