"""Evaluate a model endpoint on an eval set, synchronously, with a progress bar (CLI and CI).

    manage.py run_eval t1-live-stream-qa --harness glow-gadget@production [--endpoint local] [--k 3]
        [--seed 0] [--max-cases 20] [--temperature 0.7] [--judge ENDPOINT ...] [--json]
    manage.py run_eval t4-ifeval --max-cases 50          # IFEval: no harness

The set is ``NAME`` (its pinned version, else its latest) or ``NAME@N``; the harness ``SLUG@N`` or
``SLUG@LABEL``. The run is stored like one started from the console (browsable and comparable there). Exits with
status 1 when the run did not succeed.
"""

from __future__ import annotations

import json
import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from console import roles
from console.errors import DomainError
from harness_editor.models import HarnessVersion
from harness_editor.selectors import harness_version_by_ref
from streams.engine.outbound import OutboundRefused
from streams.models import ModelEndpoint
from training_jobs import eval_run_services as services
from training_jobs.eval_models import EvalSet, EvalSetVersion
from training_jobs.eval_run_models import EvalRun


def _set_version(spec: str) -> EvalSetVersion:
    name, sep, number = spec.partition("@")
    eval_set = EvalSet.objects.filter(name=name).first()
    if eval_set is None:
        known = ", ".join(EvalSet.objects.order_by("name").values_list("name", flat=True)) or "none (run seed_demo)"
        raise CommandError(f"no eval set {name!r}; known: {known}")
    if sep:
        if not number.isdigit():
            raise CommandError(f"the set is NAME or NAME@NUMBER, got {spec!r}")
        version = eval_set.versions.filter(number=int(number)).first()
        if version is None:
            raise CommandError(f"{name} has no version {number}")
        return version
    version = eval_set.pinned or eval_set.versions.order_by("-number").first()
    if version is None:
        raise CommandError(f"{name} has no version yet")
    return version


def _harness_version(spec: str) -> HarnessVersion:
    if "@" not in spec or spec.startswith("@") or spec.endswith("@"):
        raise CommandError(f"--harness must be SLUG@NUMBER or SLUG@LABEL, got {spec!r}")
    version = harness_version_by_ref(spec)
    if version is None:
        raise CommandError(f"no harness version {spec}")
    return version


def _user(username: str | None):
    User = get_user_model()
    if username:
        user = User.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
    else:  # CI: the first superuser (seed_demo creates "admin")
        user = User.objects.filter(is_superuser=True, is_active=True).order_by("pk").first()
        if user is None:
            raise CommandError("no superuser: pass --user <username> (a user whose role may run evaluations)")
    if not user.has_perm(roles.RUN_EVAL):
        raise CommandError(f"{user.get_username()}'s role does not allow evaluation runs")
    return user


class _Bar:
    """A one-line progress bar on stderr (a terminal), or a line every 10 % (a log)."""

    def __init__(self, stream) -> None:
        self.stream, self.tty, self.last_tenth = stream, stream.isatty(), -1
        self.solved = self.seen = 0

    def __call__(self, outcome, done: int, total: int) -> None:
        self.seen += 1
        self.solved += bool(outcome.solved)
        share = done / total if total else 1.0
        text = (f"{done}/{total} samples [{'#' * int(30 * share):<30}] {100 * share:5.1f} %  "
                f"solved {self.solved}/{self.seen}")
        if self.tty:
            self.stream.write("\r" + text + ("\n" if done >= total else ""))
            self.stream.flush()
        elif int(10 * share) > self.last_tenth:
            self.last_tenth = int(10 * share)
            self.stream.write(text + "\n")


class Command(BaseCommand):
    help = "Evaluate a model endpoint on an eval set through the turn engine (synchronously) and print the scores."

    def add_arguments(self, parser):
        parser.add_argument("eval_set", metavar="SET[@N]", help="eval set name (see the Evaluations page)")
        parser.add_argument("--harness", metavar="SLUG@N|SLUG@LABEL", help="harness version (T1–T3)")
        parser.add_argument("--endpoint", default="local", help="model endpoint name (default: local)")
        parser.add_argument("--k", type=int, default=1, help="samples per case (pass^k)")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--max-cases", type=int, help="only the first N cases")
        parser.add_argument("--temperature", type=float)
        parser.add_argument("--max-tokens", type=int)
        parser.add_argument("--deadline", type=float, help="seconds per turn (default: the harness's own)")
        parser.add_argument("--judge", action="append", default=[], metavar="ENDPOINT",
                            help="a model endpoint that also judges each sample (repeatable; the rules stay the score)")
        parser.add_argument("--user", help="who runs it (default: the first superuser)")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the run as JSON only")

    def handle(self, *args, eval_set: str, harness: str | None, endpoint: str, k: int, seed: int,
               max_cases: int | None, temperature: float | None, max_tokens: int | None, deadline: float | None,
               judge: list[str], user: str | None, as_json: bool, **options):
        version = _set_version(eval_set)
        harness_version = _harness_version(harness) if harness else None
        endpoint_obj = ModelEndpoint.objects.filter(name=endpoint).first()
        if endpoint_obj is None:
            raise CommandError(f"no model endpoint {endpoint!r}")
        sampling = {key: value for key, value in (("temperature", temperature), ("max_tokens", max_tokens))
                    if value is not None}
        try:
            run = services.eval_run_start(user=_user(user), eval_set_version=version, endpoint=endpoint_obj,
                                          harness_version=harness_version, sampling=sampling, k=k, seed=seed,
                                          max_cases=max_cases, deadline_s=deadline, judges=judge or None,
                                          enqueue=False)
        except DomainError as exc:
            detail = "; ".join(f"{e['path']}: {e['message']}" for e in getattr(exc, "errors", []) or [])
            raise CommandError(f"{exc.message}{': ' + detail if detail else ''}") from None
        except OutboundRefused as exc:
            raise CommandError(str(exc)) from None
        if not as_json:
            self.stdout.write(f"run {run.pk}: {run.name}, {run.progress_total} samples (k={run.k}, seed {run.seed})")
        run = services.eval_run_execute(run_id=run.pk, on_sample=_Bar(sys.stderr))
        self._report(run, as_json)
        if run.status != EvalRun.Status.SUCCEEDED:
            raise SystemExit(1)

    def _report(self, run: EvalRun, as_json: bool) -> None:
        s = run.summary or {}
        if as_json:
            self.stdout.write(json.dumps({"run": str(run.pk), "name": run.name, "status": run.status,
                                          "error": run.error, "summary": s}, indent=2, default=str))
            return
        took = (run.finished_at - run.started_at).total_seconds() if run.started_at and run.finished_at else None
        self.stdout.write(f"status: {run.status}" + (f" in {took:.1f} s" if took is not None else ""))
        if run.error:
            self.stdout.write(f"error: {run.error}")

        def pct(score):
            if not score or score.get("mean") is None:
                return "—"
            return f"{100 * score['mean']:.1f} [{100 * score['ci_low']:.1f}, {100 * score['ci_high']:.1f}]"

        if run.kind == "t4":
            for sample, figures in (s.get("ifeval") or {}).items():
                self.stdout.write(f"IFEval sample {sample} ({figures['prompts']} prompts): prompt strict "
                                  f"{figures['prompt_strict']:.2f} · instruction strict "
                                  f"{figures['instruction_strict']:.2f} · prompt loose {figures['prompt_loose']:.2f} "
                                  f"· instruction loose {figures['instruction_loose']:.2f}")
        else:
            self.stdout.write(f"cases {s.get('cases', 0)} · samples {s.get('samples', 0)} · accuracy "
                              f"{pct(s.get('accuracy'))} · effectiveness {pct(s.get('effectiveness'))} · "
                              f"pass^{run.k} {pct(s.get('pass_k'))}")
            problems = ", ".join(f"{k} {v}" for k, v in list((s.get("problems") or {}).items())[:8]) or "none"
            self.stdout.write(f"problems: {problems}")
        lat = s.get("latency") or {}

        def sec(key):
            return "—" if lat.get(key) is None else f"{lat[key]:.2f}"

        self.stdout.write(f"turn s p50 {sec('p50_s')} p95 {sec('p95_s')} · TTFT s p50 {sec('ttft_p50_s')} · "
                          f"decode tok/s p50 {sec('decode_tps_p50')}")
