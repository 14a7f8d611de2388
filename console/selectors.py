"""Reads of the audit timeline and of the notifications derived from it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from console import roles
from console.models import AuditEvent, Notification

UNREAD_CAP = 99  # the bell shows "99+" past this: counting stops there, however many there are


@dataclass(frozen=True)
class AuditFilter:
    """What the timeline page and its CSV export filter by (all optional; dates are whole days, both included)."""

    scope: str = ""
    user: str = ""  # a username, exactly; "system" = events without an actor
    action: str = ""
    since: dt.date | None = None
    until: dt.date | None = None

    def as_query(self) -> dict[str, str]:
        """The non-empty fields as GET parameters (pagination and the export link keep the filter)."""
        return {k: str(v) for k, v in (("scope", self.scope), ("user", self.user), ("action", self.action),
                                        ("since", self.since or ""), ("until", self.until or "")) if v}


def audit_list(*, scope: str | None = None, filters: AuditFilter | None = None) -> QuerySet[AuditEvent]:
    qs = AuditEvent.objects.select_related("actor").order_by("-id")
    if scope:
        qs = qs.filter(scope=scope)
    if filters is not None:
        if filters.scope:
            qs = qs.filter(scope=filters.scope)
        if filters.user == "system":
            qs = qs.filter(actor__isnull=True)
        elif filters.user:
            qs = qs.filter(actor__username=filters.user)
        if filters.action:
            qs = qs.filter(action=filters.action)
        # whole days in the console's time zone, as ranges on ``at`` (its index serves them)
        if filters.since:
            qs = qs.filter(at__gte=_day_start(filters.since))
        if filters.until:
            qs = qs.filter(at__lt=_day_start(filters.until + dt.timedelta(days=1)))
    return qs


def _day_start(day: dt.date) -> dt.datetime:
    return timezone.make_aware(dt.datetime.combine(day, dt.time.min))


def audit_actions(*, scope: str = "") -> list[str]:
    """The actions that occur on the timeline, within ``scope`` when one is chosen (the action filter's choices)."""
    qs = AuditEvent.objects.filter(scope=scope) if scope else AuditEvent.objects.all()
    return list(qs.order_by("action").values_list("action", flat=True).distinct())


def audit_rows_batched(qs: QuerySet[AuditEvent], batch: int = 1000) -> Iterator[list[AuditEvent]]:
    """The rows of ``qs`` (newest first) a batch at a time, each batch one query by id (keyset), so an export of
    the whole timeline holds neither every row in memory nor a cursor open between batches."""
    last_id = None
    while True:
        page = qs if last_id is None else qs.filter(id__lt=last_id)
        rows = list(page.order_by("-id")[:batch])
        if not rows:
            return
        yield rows
        last_id = rows[-1].id


# --- what an event is about, and where its page is ----------------------------------------------------------

@dataclass(frozen=True)
class AuditObject:
    label: str  # "glow-gadget v4", "glow-gadget production", "deployment tiny-live r2"
    url: str | None  # the object's page; None when there is none (or the kind is unknown)


def _url(name: str, *args) -> str | None:
    try:
        return reverse(name, args=args)
    except NoReverseMatch:  # an id of the wrong shape, or a page that does not exist (any more)
        return None


# Scopes and targets named "<kind>:<key>" whose page takes the key as its one argument. Kinds not here get no link.
_PAGES = {
    "harness": "harness_editor:detail",
    "deployment": "deployment:detail",
    "live_session": "live:session",
    "preview": "streams:preview_room",
    "scenario_run": "streams:preview_room",  # a scenario run shares its room's id
    "dataset": "training_jobs:detail",
    "training": "training:detail",
    "model": "models:detail",
    "eval": "eval_runs:detail",
    "latency_replay": "latency:detail",
    "reproduction": "training:reproduction",
    "eval_set": "evals:set",
    "server": "serving:server",
    "serve_profile": "serving:index",
}


def audit_object(event: AuditEvent) -> AuditObject:
    """What ``event`` is about, named for people, with a link to its page: the target when it has a page of its
    own (a version, a revision, a live session, an eval set's version), else the scope."""
    kind, _, key = event.scope.partition(":")
    tkind, _, tkey = event.target.partition(":")
    if kind == "harness":
        if tkind == "version" and tkey.isdigit():
            # a discarded draft is gone: its harness is the page left
            url = (_url("harness_editor:detail", key) if event.action == "version.discarded"
                   else _url("harness_editor:version", key, int(tkey)))
            return AuditObject(f"{key} v{tkey}", url)
        if tkind == "label":
            return AuditObject(f"{key} {tkey}", _url("harness_editor:detail", key))
        return AuditObject(key if tkind == "harness" else f"{key} {event.target}", _url("harness_editor:detail", key))
    if kind == "deployment":
        if tkind == "revision" and tkey.isdigit():
            return AuditObject(f"deployment {key} r{tkey}", _url("deployment:revision", key, int(tkey)))
        if tkind == "live_session":
            return AuditObject(f"live session on {key}", _url("live:session", tkey))
        return AuditObject(f"deployment {key}", _url("deployment:detail", key))
    if tkind == "eval_set" and "@" in tkey:
        name, _, number = tkey.rpartition("@")
        if number.isdigit():
            return AuditObject(f"eval set {name} v{number}", _url("evals:version", name, int(number)))
    name = _PAGES.get(kind)
    if name is None:
        return AuditObject(event.target or event.scope, None)
    if name == "serving:index":
        return AuditObject(event.target or event.scope, _url(name))
    return AuditObject(event.target or event.scope, _url(name, key))


# --- notifications ---------------------------------------------------------------------------------------------

def notification_list(*, user) -> QuerySet[Notification]:
    return Notification.objects.filter(recipient=user).select_related("event").order_by("-id")


def notification_unread_count(*, user) -> int:
    """One query on a partial index (unread rows only), stopping at UNREAD_CAP + 1: the bell is on every page."""
    return Notification.objects.filter(recipient=user, read_at__isnull=True)[:UNREAD_CAP + 1].count()


def notifications_to_email(ids: list[int]) -> QuerySet[Notification]:
    """Of these notifications, the ones still to e-mail: not sent yet, the recipient active with an address and
    not opted out (no preference row = e-mail on)."""
    return (Notification.objects.filter(pk__in=ids, emailed_at__isnull=True, recipient__is_active=True)
            .exclude(recipient__email="").exclude(recipient__notification_preference__email=False)
            .select_related("recipient", "event", "event__actor").order_by("id"))


def notification_email_enabled(*, user) -> bool:
    from console.models import NotificationPreference

    preference = NotificationPreference.objects.filter(user=user).first()
    return preference is None or preference.email


def active_user_ids(ids) -> list[int]:
    return list(get_user_model().objects.filter(pk__in=list(ids), is_active=True).values_list("pk", flat=True))


def _ids_with_perm(perm: str) -> list[int]:
    """Everyone active whose role gives ``perm`` (superusers only when a role gives them the right)."""
    return list(get_user_model().objects.with_perm(perm, include_superusers=False)
                .filter(is_active=True).values_list("pk", flat=True))


def version_reviewer_ids() -> list[int]:
    """Everyone whose role may review harness versions."""
    return _ids_with_perm(roles.REVIEW_VERSION)


def deployment_reviewer_ids() -> list[int]:
    """Everyone whose role may approve or reject a deployment change (compliance reviewers, ML leads)."""
    return _ids_with_perm(roles.REVIEW_DEPLOYMENT)


# the timeline actions that put a deployment revision up for review (streams.services.deployments)
DEPLOYMENT_PROPOSALS = ("deployment.create", "deployment.propose")


def deployment_proposer_id(event: AuditEvent) -> int | None:
    """Who proposed the revision ``event`` decides: the actor of the row that proposed it, read from the timeline
    (the console imports nothing from the runtime, where revisions live)."""
    return (AuditEvent.objects.filter(scope=event.scope, target=event.target, action__in=DEPLOYMENT_PROPOSALS,
                                      id__lt=event.id)
            .order_by("-id").values_list("actor_id", flat=True).first())


def version_author_id(version_id: int | None) -> int | None:
    from harness_editor.models import HarnessVersion

    if version_id is None:
        return None
    return HarnessVersion.objects.filter(pk=version_id).values_list("author_id", flat=True).first()


def version_submitter_id(event: AuditEvent) -> int | None:
    """Who submitted the version ``event`` decides: the actor of its latest "version.submitted" row."""
    return (AuditEvent.objects.filter(scope=event.scope, target=event.target, action="version.submitted",
                                      id__lt=event.id)
            .order_by("-id").values_list("actor_id", flat=True).first())


# the timeline actions by which someone took part in a harness's review: deciding a version, commenting on one
PARTICIPATION_ACTIONS = ("version.approved", "version.rejected", "review.commented", "review.replied")


def harness_participant_ids(slug: str) -> set[int]:
    """Everyone who wrote a version of the harness, and everyone who approved, rejected or commented on one (read
    from the timeline, which records all of these in the harness's scope)."""
    from harness_editor.models import HarnessVersion

    ids = set(HarnessVersion.objects.filter(harness__slug=slug).values_list("author_id", flat=True))
    ids.update(AuditEvent.objects.filter(scope=f"harness:{slug}", action__in=PARTICIPATION_ACTIONS,
                                         actor__isnull=False).values_list("actor_id", flat=True).distinct())
    return ids
