"""Replay a recorded live session's answered turns under another harness version and/or model (synchronously, in
this process) and print the turn-by-turn comparison and the summary.

    manage.py replay_session SESSION_ID --harness tiny-room@2 [--endpoint local] [--model LORA_NAME]
        [--temperature 0] [--max-tokens N] [--seed 0] [--deadline 30] [--regressions] [--json] [--user NAME]

The harness is ``SLUG@N`` or ``SLUG@LABEL`` (drafts too). The replay is stored like one started from the console
(the session's replay page shows it). Exits with status 1 when the replay did not succeed, 2 with ``--fail-on-
regression`` when a turn regressed (for CI).
"""

from __future__ import annotations

import json

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from console.errors import DomainError
from harness_editor.models import HarnessVersion
from harness_editor.selectors import harness_version_by_ref
from streams.models import LiveSession, ModelEndpoint, SessionReplay


def _harness_version(spec: str) -> HarnessVersion:
    if "@" not in spec or spec.startswith("@") or spec.endswith("@"):
        raise CommandError(f"--harness must be SLUG@NUMBER or SLUG@LABEL, got {spec!r}")
    version = harness_version_by_ref(spec)
    if version is None:
        raise CommandError(f"no harness version {spec}")
    return version


def _user(username: str | None):
    from streams.services.session_replays import may_start

    User = get_user_model()
    if username:
        user = User.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
    else:  # CI: the first superuser (seed_demo creates "admin")
        user = User.objects.filter(is_superuser=True, is_active=True).order_by("pk").first()
        if user is None:
            raise CommandError("no superuser: pass --user <username> (a user whose role may replay sessions)")
    if not may_start(user):
        raise CommandError(f"{user.get_username()}'s role does not allow session replays (operators and ML staff "
                           "replay sessions)")
    return user


class Command(BaseCommand):
    help = "Replay a recorded live session's turns under another harness version or model and compare them."

    def add_arguments(self, parser):
        parser.add_argument("session", help="the live session's id")
        parser.add_argument("--harness", metavar="SLUG@N|SLUG@LABEL", required=True,
                            help="the harness version the turns run under now")
        parser.add_argument("--endpoint", default="local", help="model endpoint name (default: local)")
        parser.add_argument("--model", default="", help="the model name requests carry (a loaded LoRA adapter's)")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--temperature", type=float)
        parser.add_argument("--max-tokens", type=int)
        parser.add_argument("--deadline", type=float, help="seconds per turn (default: the harness's own)")
        parser.add_argument("--regressions", action="store_true", help="print only the turns that regressed")
        parser.add_argument("--fail-on-regression", action="store_true", help="exit 2 when a turn regressed")
        parser.add_argument("--user", help="who runs it (default: the first superuser)")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the replay as JSON only")

    def handle(self, *args, session: str, harness: str, endpoint: str, model: str, seed: int,
               temperature: float | None, max_tokens: int | None, deadline: float | None, regressions: bool,
               fail_on_regression: bool, user: str | None, as_json: bool, **options):
        from streams.services import session_replays as services

        try:
            recorded = LiveSession.objects.filter(pk=session).first()
        except ValidationError:  # not a UUID
            recorded = None
        if recorded is None:
            raise CommandError(f"no live session {session!r}")
        endpoint_obj = ModelEndpoint.objects.filter(name=endpoint).first()
        if endpoint_obj is None:
            raise CommandError(f"no model endpoint {endpoint!r}")
        sampling = {key: value for key, value in (("temperature", temperature), ("max_tokens", max_tokens))
                    if value is not None}
        try:
            replay = services.session_replay_start(
                user=_user(user), session=recorded, harness_version=_harness_version(harness), endpoint=endpoint_obj,
                request_model=model, sampling=sampling, seed=seed, deadline_s=deadline, enqueue=False)
        except DomainError as exc:
            detail = "; ".join(f"{e['path']}: {e['message']}" for e in getattr(exc, "errors", []) or [])
            raise CommandError(f"{exc.message}{': ' + detail if detail else ''}") from None

        def progress(row, done: int, total: int) -> None:
            if not as_json:
                self.stderr.write(f"{done}/{total} turns: {row.outcome}")

        replay = services.session_replay_execute(replay_id=replay.pk, on_turn=progress)
        self._report(replay, as_json, regressions)
        if replay.status != SessionReplay.Status.SUCCEEDED:
            raise SystemExit(1)
        if fail_on_regression and (replay.summary or {}).get("regressed"):
            raise SystemExit(2)

    def _report(self, replay: SessionReplay, as_json: bool, only_regressions: bool) -> None:
        from streams.replay_selectors import replay_turn_list

        turns = replay_turn_list(replay=replay, outcome="regressed" if only_regressions else None)
        if as_json:
            self.stdout.write(json.dumps({
                "replay": str(replay.pk), "name": replay.name, "status": replay.status, "error": replay.error,
                "summary": replay.summary,
                "turns": [{"position": t.position, "turn_id": t.turn_id, "outcome": t.outcome,
                           "comments": t.comments, "original": t.original.get("reply"),
                           "new": (t.new or {}).get("reply"), "why": (t.new or {}).get("why", []),
                           "skipped": t.skipped, "error": t.error} for t in turns]}, indent=2, default=str))
            return
        self.stdout.write(f"status: {replay.status}" + (f" ({replay.error})" if replay.error else ""))
        for t in turns:
            said = " / ".join(f"[{c['viewer']}] {c['text']}" for c in t.comments)
            self.stdout.write(f"\n#{t.position} {t.outcome.upper()}  {said}")
            self.stdout.write(f"  original: {t.original.get('reply', '')}")
            if t.skipped or t.error:
                self.stdout.write(f"  not played: {t.skipped or t.error}")
            else:
                self.stdout.write(f"  new:      {t.new.get('reply', '')}")
                if t.new.get("why"):
                    self.stdout.write(f"  why:      {'; '.join(t.new['why'])}")
        s = replay.summary or {}
        if s:
            self.stdout.write(f"\n{s.get('replayed', 0)} of {s.get('turns', 0)} turns played again: "
                              f"{s.get('changed', 0)} changed, {s.get('regressed', 0)} regressed, "
                              f"{s.get('improved', 0)} improved, {s.get('skipped', 0)} not replayable")
            for side in ("original", "new"):
                f = s.get(side) or {}
                self.stdout.write(f"  {side:>8}: {f.get('fallbacks', 0)} fallbacks, {f.get('judge_problems', 0)} "
                                  f"judge problems, {f.get('inaccurate', 0)} inaccurate, effectiveness "
                                  f"{f.get('effectiveness_mean')}")
