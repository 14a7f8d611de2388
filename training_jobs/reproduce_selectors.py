"""Reproduction runs (reads): the runs, the committed result, and what a result folder holds for its page.

A result folder is what ``reproduce()`` writes (``run.json``, ``results.json``, ``table.md``, ``table.csv`` and
the four plots): a console run's ``out_dir``, or the committed cpu-budget result under
``results/hat-miniature/`` (read-only; shown when its ``results.json`` exists). :func:`folder_report` reads one
into what the pages draw: every cell of the table with its interval, the report's reference rows with their
sources, the claims with their verdicts, the plots present, and the provenance from ``run.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from training_jobs.reproduce.table import COLUMNS, ROWS
from training_jobs.reproduce_models import ReproductionRun

COMMITTED_DIR = Path(settings.BASE_DIR) / "results" / "hat-miniature"
PLOT_NAMES: dict[str, str] = {  # the only files the plot views serve, with their captions
    "accuracy.svg": "In-distribution (T1) vs harness-variant (T2) accuracy",
    "gap.svg": "Gap T1 − T2 (points)",
    "ifeval.svg": "IFEval, four metrics",
    "robustness.svg": "T3 accuracy by perturbation level",
}
TABLE_FILES = ("run.json", "results.json", "table.md", "table.csv", *PLOT_NAMES)
_POINTS = {c.key for c in COLUMNS if c.points}
_TITLES = dict(ROWS)


def reproduction_list() -> QuerySet[ReproductionRun]:
    return ReproductionRun.objects.select_related("created_by").order_by("-created_at")


def reproduction_get(*, run_id) -> ReproductionRun:
    return reproduction_list().get(pk=run_id)


def committed_dir() -> Path | None:
    """The committed result's folder, when its results.json exists."""
    return COMMITTED_DIR if (COMMITTED_DIR / "results.json").is_file() else None


def plot_file(folder: Path, name: str) -> Path | None:
    """One of the four plots of a result folder (None for any other name, or a plot not there)."""
    if name not in PLOT_NAMES:
        return None
    path = Path(folder) / name
    return path if path.is_file() and not path.is_symlink() else None


def _read_json(path: Path, problems: list[str]) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name} cannot be read: {type(exc).__name__}: {exc}")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path.name} is not a JSON object")
        return None
    return data


def _pct(value: Any, points: bool) -> str:
    return f"{100 * value:+.1f}" if points else f"{100 * value:.1f}"


def _cell(cell: Any, key: str) -> dict[str, Any]:
    if not isinstance(cell, dict) or not all(isinstance(cell.get(k), (int, float)) for k in ("mean", "ci_low",
                                                                                                "ci_high")):
        return {"key": key, "text": "—", "interval": "", "missing": True}
    points = key in _POINTS
    return {"key": key, "text": _pct(cell["mean"], points),
            "interval": f"[{_pct(cell['ci_low'], points)}, {_pct(cell['ci_high'], points)}]", "n": cell.get("n"),
            "missing": False}


def table_view(results: dict[str, Any]) -> dict[str, Any]:
    """The table of results.json as the pages draw it: columns, one row per model (every cell with its
    interval), the report's reference rows (each figure with its numbered source) and the sources."""
    table = results.get("table") if isinstance(results.get("table"), dict) else {}
    columns = [{"key": c.get("key"), "title": c.get("title") or c.get("key"), "points": c.get("key") in _POINTS}
               for c in table.get("columns") or [] if isinstance(c, dict)] \
        or [{"key": c.key, "title": c.title, "points": c.points} for c in COLUMNS]
    cells = table.get("cells") if isinstance(table.get("cells"), dict) else {}
    rows = [{"key": row, "title": _TITLES.get(row, row),
             "cells": [_cell((cells.get(row) or {}).get(c["key"]), c["key"]) for c in columns]}
            for row in [*(r for r, _ in ROWS if r in cells), *(r for r in cells if r not in _TITLES)]]
    sources: list[str] = []
    reference_rows = []
    for row, refs in (table.get("reference") or {}).items():
        if not isinstance(refs, dict) or not refs:
            continue
        out = []
        for c in columns:
            ref = refs.get(c["key"])
            if not isinstance(ref, dict) or not isinstance(ref.get("value"), (int, float)):
                out.append({"key": c["key"], "text": "n/s", "source": None})
                continue
            what = str(ref.get("source") or "") + (f" — {ref['note']}" if ref.get("note") else "")
            if what not in sources:
                sources.append(what)
            text = f"Δ {ref['value']:+.1f}" if ref.get("delta") else f"{ref['value']:.1f}"
            out.append({"key": c["key"], "text": text, "source": sources.index(what) + 1, "title": what})
        reference_rows.append({"key": row, "title": _TITLES.get(row, row), "cells": out})
    return {"columns": columns, "rows": rows, "reference_rows": reference_rows, "sources": sources}


def folder_report(folder: Path | str | None) -> dict[str, Any]:
    """What one result folder holds for its page: ``present`` (results.json is there), ``table`` (see
    :func:`table_view`), ``claims``, ``plots`` (name, caption), ``run`` (run.json or None), ``results`` (the
    metadata of results.json: budget, k, serving, sets) and ``problems`` (files that cannot be read)."""
    problems: list[str] = []
    folder = Path(folder) if folder else None
    results = _read_json(folder / "results.json", problems) if folder else None
    run = _read_json(folder / "run.json", problems) if folder else None
    report: dict[str, Any] = {"folder": str(folder) if folder else "", "present": results is not None,
                              "problems": problems, "run": run, "table": None, "claims": [], "plots": [],
                              "files": [], "results": {}}
    if folder is None:
        return report
    report["files"] = [name for name in TABLE_FILES if (folder / name).is_file()]
    if results is None:
        return report
    report["table"] = table_view(results)
    report["claims"] = [c for c in results.get("claims") or [] if isinstance(c, dict)]
    report["plots"] = [{"name": name, "caption": caption} for name, caption in PLOT_NAMES.items()
                       if plot_file(folder, name) is not None]
    report["results"] = {k: results.get(k) for k in ("budget", "seed", "k", "serving", "sampling", "sets",
                                                     "eval_wall_s") if k in results}
    return report


def provenance_view(run_json: dict[str, Any] | None, *, stored: dict[str, Any] | None = None,
                    git_commit: str = "", wall_s: dict[str, Any] | None = None) -> dict[str, Any]:
    """Provenance for the page: from run.json when there, else what the job stored when it ended."""
    src = dict(run_json or {})
    if not src and stored:
        src = {**stored, "git_commit": git_commit, "wall_s": wall_s or {}}
    data = src.get("data") if isinstance(src.get("data"), dict) else {}
    data_hashes = [{"stage": stage, "sha256": info.get("sha256"), "rows": info.get("rows"), "file": info.get("file")}
                   for stage, info in data.items() if isinstance(info, dict) and info.get("sha256")]
    arms = [{"name": name, **{k: a.get(k) for k in ("stages", "steps", "wall_s", "train_data_sha256")}}
            for name, a in (src.get("arms") or {}).items() if isinstance(a, dict)]
    base = src.get("base") if isinstance(src.get("base"), dict) else {}
    budget = src.get("budget") if isinstance(src.get("budget"), dict) else {}
    wall = src.get("wall_s") if isinstance(src.get("wall_s"), dict) else {}
    return {"present": bool(src), "command": src.get("command") or "", "git_commit": src.get("git_commit") or "",
            "base": base, "budget": budget, "seed": src.get("seed"), "data_hashes": data_hashes, "arms": arms,
            "wall_s": [{"what": k, "s": v} for k, v in wall.items()]}


def reproductions_for_compare(limit: int = 10) -> dict[str, Any]:
    """The compare page's section: the latest runs and whether a committed result is there."""
    return {"reproductions": list(reproduction_list()[:limit]), "committed_reproduction": committed_dir() is not None}
