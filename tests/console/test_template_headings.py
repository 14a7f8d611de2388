"""Screen-reader basics every template keeps, checked on the template files (so pages the browser walk of
tests/browser/test_accessibility.py does not reach are covered too): no table header without text (axe-core's
``empty-table-header``: an action or link column says what it holds in visually hidden text), and within one template
no heading more than one level below the one before it (axe-core's ``heading-order``)."""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
TAG = re.compile(r"\{%.*?%\}|\{#.*?#\}", re.S)  # template tags and comments: no text of their own
EMPTY_TH = re.compile(r"<th\b[^>]*>(?:\s|&nbsp;)*</th>", re.I)
HEADING = re.compile(r"<h([1-6])\b", re.I)


def _templates():
    for path in sorted(TEMPLATES.rglob("*.html")):
        yield path.relative_to(TEMPLATES), path.read_text(encoding="utf-8")


def _line(text: str, at: int) -> int:
    return text[:at].count("\n") + 1


def empty_headers(text: str) -> list[int]:
    """Lines of the ``<th>`` elements with no text (template tags removed, so ``<th>{% if x %}{% endif %}</th>``
    counts as empty too)."""
    bare = TAG.sub(lambda m: re.sub(r"[^\n]", "", m.group(0)), text)  # keep the line numbers
    return [_line(bare, m.start()) for m in EMPTY_TH.finditer(bare)]


def skipped_levels(text: str) -> list[tuple[int, int, int]]:
    """(line, level before, level) of each heading more than one level below the one before it in the file."""
    out, previous = [], None
    for m in HEADING.finditer(text):
        level = int(m.group(1))
        if previous is not None and level > previous + 1:
            out.append((_line(text, m.start()), previous, level))
        previous = level
    return out


def test_every_table_header_has_text():
    found = [f"{name}:{line}" for name, text in _templates() for line in empty_headers(text)]
    assert not found, f"<th> without text (use <span class=\"visually-hidden\">…</span>): {found}"


def test_headings_go_down_one_level_at_a_time():
    found = [f"{name}:{line} h{before} → h{level}" for name, text in _templates()
             for line, before, level in skipped_levels(text)]
    assert not found, f"heading levels skipped: {found}"


def test_the_checks_find_what_they_look_for():
    assert empty_headers("<tr><th>A</th>\n<th class=\"x\"> </th>{% if a %}<th>{% endif %}</th></tr>") == [2, 2]
    assert empty_headers('<th><span class="visually-hidden">Actions</span></th><th title="x">B</th>') == []
    assert skipped_levels("<h1>a</h1>\n<h3>b</h3><h2>c</h2><h3>d</h3><h5>e</h5>") == [(2, 1, 3), (2, 3, 5)]
