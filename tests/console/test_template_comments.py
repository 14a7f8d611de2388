"""Django's ``{# … #}`` comment ends at the line's end: one spread over lines is printed as text (found by the live
session walk: the subtitle overlay showed its template's comment on the broadcast, the recorded transcript one before
every turn). Longer comments use ``{% comment %}``."""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
OPEN_COMMENT = re.compile(r"\{#(?:(?!#\}).)*$", re.M)  # a {# with no #} after it on its line


def test_no_single_line_comment_spreads_over_lines():
    found = [f"{path.relative_to(TEMPLATES)}:{text[:m.start()].count(chr(10)) + 1}"
             for path in sorted(TEMPLATES.rglob("*.html")) for text in [path.read_text(encoding="utf-8")]
             for m in OPEN_COMMENT.finditer(text)]
    assert not found, f"{{# … #}} spread over lines (printed as text): {found}"


def test_the_check_finds_one():
    assert OPEN_COMMENT.search("<p>\n{# one\n   two #}\n</p>") and not OPEN_COMMENT.search("{# one #}\n{# two #}")
