"""Run a scenario to the end on one harness version, synchronously, and print the summary (CLI and CI).

    manage.py run_scenario evening-flash-sale --version glow-gadget@1 [--endpoint local] [--seed 7]

The run is stored like one started from the runs page (its transcript is browsable there). Exits with status
1 when the run failed, 2 when --fail-on-fallback is given and a reply fell back.
"""

from __future__ import annotations

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from console import roles
from console.errors import DomainError
from harness_editor.models import HarnessVersion
from streams import selectors, services
from streams.models import ModelEndpoint, PreviewRoom, Scenario, ScenarioRun


def _version(spec: str) -> HarnessVersion:
    slug, sep, number = spec.rpartition("@")
    if not sep or not slug or not number.isdigit():
        raise CommandError(f"--version must be <harness-slug>@<number>, got {spec!r}")
    try:
        return HarnessVersion.objects.select_related("harness").get(harness__slug=slug, number=int(number))
    except HarnessVersion.DoesNotExist:
        raise CommandError(f"no harness version {spec}") from None


def _user(username: str | None):
    User = get_user_model()
    if username:
        try:
            user = User.objects.get(username=username)
        except User.DoesNotExist:
            raise CommandError(f"no user {username!r}") from None
    else:  # CI: the first superuser (seed_demo creates "admin")
        user = User.objects.filter(is_superuser=True, is_active=True).order_by("pk").first()
        if user is None:
            raise CommandError("no superuser: pass --user <username> (a user whose role may use the preview)")
    if not user.has_perm(roles.USE_PREVIEW):
        raise CommandError(f"{user.get_username()}'s role does not allow preview rooms or runs")
    return user


class Command(BaseCommand):
    help = "Play a scenario to the end on a harness version (synchronously) and print the run's summary."

    def create_parser(self, prog_name, subcommand, **kwargs):
        # --version names the harness version here: it replaces Django's "show the version and exit"
        return super().create_parser(prog_name, subcommand, conflict_handler="resolve", **kwargs)

    def add_arguments(self, parser):
        parser.add_argument("scenario", help="scenario slug (see the preview page or streams/scenarios/)")
        parser.add_argument("--version", required=True, metavar="HARNESS@NUMBER", help="e.g. glow-gadget@1")
        parser.add_argument("--endpoint", help="model endpoint name (default: the default endpoint)")
        parser.add_argument("--seed", type=int, help="default: the scenario's own seed")
        parser.add_argument("--user", help="who runs it (default: the first superuser)")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the summary as JSON only")
        parser.add_argument("--fail-on-fallback", action="store_true", help="exit 2 if any reply fell back")

    def handle(self, *args, scenario: str, version: str, endpoint: str | None, seed: int | None,
               user: str | None, as_json: bool, fail_on_fallback: bool, **options):
        try:
            scenario_obj = selectors.scenario_get(slug=scenario)
        except Scenario.DoesNotExist:
            raise CommandError(f"no scenario {scenario!r} (import it, or run seed_demo)") from None
        version_obj = _version(version)
        endpoint_obj = None
        if endpoint:
            endpoint_obj = ModelEndpoint.objects.filter(name=endpoint).first()
            if endpoint_obj is None:
                raise CommandError(f"no model endpoint {endpoint!r}")
        try:
            run = services.scenario_run_start(user=_user(user), version=version_obj, scenario=scenario_obj,
                                              endpoint=endpoint_obj, seed=seed, play=False)
        except DomainError as exc:
            raise CommandError(exc.message) from None
        if not as_json:
            self.stdout.write(f"run {run.pk}: {scenario_obj.slug} on {version} against {run.endpoint.name} "
                              f"({run.endpoint.model}), seed {run.seed}")

        def progress(turn_id, result):
            if not as_json:
                tag = "failed" if result is None else ("fallback: " + result.reason if result.fallback else "ok")
                self.stdout.write(f"  turn {turn_id[:8]} {tag}")

        try:
            run = services.scenario_run_execute(room_id=run.pk, on_turn=progress)
        except Exception as exc:  # recorded on the run; say so and fail
            run = PreviewRoom.objects.get(pk=run.pk)
            self.stderr.write(f"run {run.pk} failed: {type(exc).__name__}: {exc}")
        self._report(run.job, as_json)
        if run.job.status != ScenarioRun.Status.SUCCEEDED:
            raise SystemExit(1)
        if fail_on_fallback and run.job.summary.get("fallbacks"):
            raise SystemExit(2)

    def _report(self, run: ScenarioRun, as_json: bool) -> None:
        s = run.summary
        if as_json:
            self.stdout.write(json.dumps({"run": str(run.pk), "status": run.status, "summary": s}, indent=2))
            return
        took = (run.finished_at - run.started_at).total_seconds() if run.started_at and run.finished_at else None
        self.stdout.write(f"status: {run.status}" + (f" in {took:.1f} s" if took is not None else ""))
        if run.error:
            self.stdout.write(f"error: {run.error}")
        self.stdout.write(f"comments {s.get('comments', 0)} · turns {s.get('turns', 0)} · replies "
                          f"{s.get('replies', 0)} · fallbacks {s.get('fallbacks', 0)} · failed turns "
                          f"{s.get('failed_turns', 0)} · retries {s.get('retries', 0)}")
        self.stdout.write(f"tool calls {s.get('tool_calls', 0)} ({s.get('invalid_tool_calls', 0)} invalid) · "
                          f"tool faults {s.get('tool_faults', 0)} {s.get('tool_faults_by_kind') or ''}")
        hooks = ", ".join(f"{k} {v}" for k, v in (s.get("hook_failures") or {}).items()) or "none"
        self.stdout.write(f"hook failures: {hooks}")

        def ms(key):
            return "—" if s.get(key) is None else f"{s[key]:.0f}"

        self.stdout.write(f"turn ms p50 {ms('turn_ms_p50')} p95 {ms('turn_ms_p95')} · TTFT ms p50 "
                          f"{ms('ttft_ms_p50')} p95 {ms('ttft_ms_p95')}")
