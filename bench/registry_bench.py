"""Registry benchmark: do the history and diff pages and APIs stay fast and flat as a harness grows?

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/registry_bench.py \\
        [--versions 1000] [--requests 200] [--scratch-db NAME]

``DATABASE_URL`` only names the PostgreSQL server: the bench creates its own throw-away database
(``hat_bench_<pid>_<random>``, or ``--scratch-db NAME``, refused if that database exists; see
``bench/scratch_db.py``), migrates it, and drops it at the end -- also on failure, Ctrl-C or SIGTERM. It never
drops a database it did not create. In it, two harnesses built from the demo manifest grown to 50 skills:
``bench-big`` with 1,000 versions (statuses mixed, labels on a few) and ``bench-small`` with 10. Rows are
inserted with ``bulk_create`` (version content is produced by the real manifest code, so hashes and
canonical JSON are genuine). It then requests, logged in as a compliance reviewer through
``django.test.Client`` (the whole Django stack, no network):

- the history page ``/harnesses/<slug>/``  and the diff page ``/harnesses/<slug>/diff/?a=N&b=M`` (HTML)
- the API version list ``/api/harnesses/<slug>/versions/`` and API diff ``/api/harnesses/<slug>/diff/``

``--requests`` times each (after a warm-up; at most ``--budget-s`` seconds per endpoint) and prints p50/p95
server time in ms and the number of SQL queries per request, for 1,000 versions and for 10. PASS means
p95 < ``--target-ms`` (100) at 1,000 versions and the same query count at 10 and at 1,000 versions.
Exit status 1 on FAIL. Timings are wall-clock on this machine: run it on an otherwise idle one.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
os.environ.setdefault("HAT_LOG_LEVEL", "WARNING")
warnings.filterwarnings("ignore", message="No directory at")  # whitenoise: no collectstatic in a bench

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management.color import no_style  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402
from scratch_db import ScratchDatabase, ScratchRefused, use_in_django  # noqa: E402

N_SKILLS = 50


def build_manifest():
    """The demo manifest grown to N_SKILLS skills (copies of the demo skills under new ids)."""
    from harness_editor.schemas import manifest_from_yaml, parse_manifest

    base = manifest_from_yaml((ROOT / "harness_editor" / "demo" / "skincare_v1.yaml").read_text(encoding="utf-8"))
    data = base.model_dump(mode="json")
    originals = list(data["skills"])
    i = 0
    while len(data["skills"]) < N_SKILLS:
        src = dict(originals[i % len(originals)])
        src["id"] = f"{src['id']}_{i}"
        src["description"] = f"{src['description'].rstrip('.')} (variant {i})."
        src["body"] = src["body"] + f"\nVariant {i}: keep answers short.\n"
        data["skills"].append(src)
        i += 1
    return parse_manifest(data)


def version_manifest(base, n: int):
    """Version n: one skill body and the description changed, so neighbouring versions differ a little."""
    skills = list(base.skills)
    k = n % len(skills)
    skills[k] = skills[k].model_copy(update={"body": skills[k].body + f"\nRevision {n}.\n"})
    return base.model_copy(update={"skills": skills, "description": f"{base.description} Revision {n}."})


def seed(*, slug: str, n_versions: int, manager, reviewer, first_id: int) -> int:
    """Insert one harness with n_versions versions (explicit ids so each parent is the previous version).
    Returns the next free version id."""
    from console.services import audit_record
    from harness_editor.models import Harness, HarnessVersion, Label
    from harness_editor.schemas import manifest_to_json

    Status = HarnessVersion.Status
    base = build_manifest()
    harness = Harness.objects.create(slug=slug, name=f"Bench {slug}", created_by=manager)
    now = timezone.now()
    rows = []
    for n in range(1, n_versions + 1):
        text = manifest_to_json(version_manifest(base, n))
        if n > n_versions - 3:
            status = Status.DRAFT
        elif n > n_versions - 6:
            status = Status.SUBMITTED
        elif n % 7 == 0:
            status = Status.REJECTED
        else:
            status = Status.APPROVED
        decided = status in (Status.APPROVED, Status.REJECTED)
        rows.append(HarnessVersion(
            id=first_id + n - 1, harness=harness, number=n,
            parent_id=first_id + n - 2 if n > 1 else None, author=manager,
            change_note=f"revision {n}", manifest_json=text,
            content_hash=hashlib.sha256(text.encode()).hexdigest(),  # = schemas.content_hash, computed once
            status=status, submitted_at=now if status != Status.DRAFT else None,
            decided_at=now if decided else None, decided_by=reviewer if decided else None,
            decision_comment="bench" if decided else "",
        ))
    HarnessVersion.objects.bulk_create(rows, batch_size=250)
    approved = [r for r in rows if r.status == Status.APPROVED]
    for name, version in (("production", approved[-1]), ("staging", approved[-2]), ("room:7", approved[0])):
        Label.objects.create(harness=harness, name=name, version=version, moved_by=reviewer)
        audit_record(actor=reviewer, action="label.moved", scope=f"harness:{slug}", target=f"label:{name}",
                     to_state=f"v{version.number}", data={"label": name, "to_version_id": version.id})
    return first_id + n_versions


def reset_sequences():
    from harness_editor.models import HarnessVersion

    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(no_style(), [HarnessVersion]):
            cursor.execute(sql)


def measure(client: Client, url: str, *, requests: int, warmup: int,
            budget_s: float) -> tuple[float, float, int, int]:
    for _ in range(warmup):
        response = client.get(url)
        if response.status_code != 200:
            raise SystemExit(f"{url} answered {response.status_code}: {response.content[:300]!r}")
    with CaptureQueriesContext(connection) as ctx:
        client.get(url)
    queries = len(ctx.captured_queries)
    times = []
    deadline = time.perf_counter() + budget_s
    for _ in range(requests):
        start = time.perf_counter()
        client.get(url)
        times.append((time.perf_counter() - start) * 1000)
        if start > deadline:  # a very slow page: keep the whole run bounded, report how many were timed
            break
    times.sort()
    p50 = statistics.median(times)
    p95 = times[min(len(times) - 1, int(round(0.95 * len(times))) - 1)]
    return p50, p95, queries, len(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--target-ms", type=float, default=100.0)
    parser.add_argument("--budget-s", type=float, default=15.0,
                        help="stop timing one endpoint after this long (the table says how many were timed)")
    parser.add_argument("--scratch-db", default=None,
                        help="name of the scratch database to create (refused if it exists; default: a unique name)")
    args = parser.parse_args()

    if connection.vendor != "postgresql":
        raise SystemExit("set DATABASE_URL to a PostgreSQL server (the bench creates and drops its own database)")
    # Not django.test.utils.setup_test_environment(): it instruments template rendering (a context copy per
    # template), which would make the HTML pages look slower than they are in production.
    if "testserver" not in settings.ALLOWED_HOSTS:
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    started = time.perf_counter()
    try:
        with ScratchDatabase(os.environ["DATABASE_URL"], "hat_bench", name=args.scratch_db) as scratch:
            restore = use_in_django(scratch.name)
            try:
                return run(args, started, scratch.name)
            finally:
                restore()
    except ScratchRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2


def run(args, started: float, db_name: str) -> int:
    from django.contrib.auth.models import Group, User

    from console import roles

    manager = User.objects.create_user("bench_manager")
    manager.groups.add(Group.objects.get(name=roles.CAMPAIGN_MANAGER))
    reviewer = User.objects.create_user("bench_reviewer")
    reviewer.groups.add(Group.objects.get(name=roles.COMPLIANCE_REVIEWER))
    t0 = time.perf_counter()
    next_id = seed(slug="bench-big", n_versions=args.versions, manager=manager, reviewer=reviewer, first_id=1)
    seed(slug="bench-small", n_versions=10, manager=manager, reviewer=reviewer, first_id=next_id)
    reset_sequences()
    print(f"seeded {args.versions} + 10 versions of a {N_SKILLS}-skill manifest in {time.perf_counter() - t0:.1f} s "
          f"(scratch database {db_name}, created after {t0 - started:.1f} s)")

    client = Client()
    client.force_login(reviewer)
    big, small, n = "bench-big", "bench-small", args.versions
    pages = [
        ("history page (HTML)", "/harnesses/{slug}/"),
        ("diff page (HTML)", "/harnesses/{slug}/diff/?a={a}&b={b}"),
        ("API version list", "/api/harnesses/{slug}/versions/"),
        ("API diff", "/api/harnesses/{slug}/diff/?from={a}&to={b}"),
    ]
    header = (f"{'endpoint':<22} {'timed':>6} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8} | {'p95 @10':>8} "
              f"{'queries @10':>11}  result")
    print(f"{str(n) + ' versions (bench-big)':>56} | 10 versions (bench-small)")
    print(header)
    print("-" * len(header))
    ok = True
    for title, pattern in pages:
        url_big = pattern.format(slug=big, a=n - 10, b=n)
        url_small = pattern.format(slug=small, a=1, b=10)
        p50, p95, q_big, timed = measure(client, url_big, requests=args.requests, warmup=args.warmup,
                                         budget_s=args.budget_s)
        _, p95_small, q_small, _ = measure(client, url_small, requests=min(50, args.requests), warmup=3,
                                           budget_s=args.budget_s / 3)
        passed = p95 < args.target_ms and q_big == q_small
        ok &= passed
        print(f"{title:<22} {timed:>6} {p50:>8.1f} {p95:>8.1f} {q_big:>8} | {p95_small:>8.1f} {q_small:>11}  "
              f"{'PASS' if passed else 'FAIL'}")
    print(f"target: p95 < {args.target_ms:.0f} ms and the same query count at 10 and {n} versions; "
          f"{args.requests} requests each after {args.warmup} warm-up; total {time.perf_counter() - started:.1f} s")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
