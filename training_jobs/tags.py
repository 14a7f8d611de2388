"""Tags and notes on datasets, training jobs, models and evaluation runs: the rules, without Django.

A tag is a short slug (lowercase letters, digits and '-', 1 to 32 characters), at most MAX_TAGS on one thing; a note
is plain text (no Markdown: it is shown as typed), at most NOTE_MAX_CHARS characters. Input that breaks a rule is
refused with a message that says which rule and how to fix it, never silently rewritten.
"""

from __future__ import annotations

import re

TAG_MAX_CHARS = 32
MAX_TAGS = 20
NOTE_MAX_CHARS = 5000
TAG_PATTERN = re.compile(r"[a-z0-9-]{1,%d}" % TAG_MAX_CHARS)
_SEPARATORS = re.compile(r"[\s,]+")
# control characters other than tab and newline: nothing a person types into a note
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class TagError(ValueError):
    """A tag or note that breaks a rule; the message is shown to the person as it is."""


def check_tag(tag: str) -> str:
    """One tag as typed (surrounding blanks dropped) → the tag, or TagError saying what is wrong with it."""
    tag = tag.strip()
    if not tag:
        raise TagError("A tag cannot be empty.")
    if len(tag) > TAG_MAX_CHARS:
        raise TagError(f"“{tag[:40]}…” is {len(tag)} characters long: a tag has at most {TAG_MAX_CHARS}.")
    if TAG_PATTERN.fullmatch(tag):
        return tag
    if TAG_PATTERN.fullmatch(tag.lower()):
        raise TagError(f"“{tag}”: tags are lowercase (“{tag.lower()}”).")
    raise TagError(f"“{tag}” has characters a tag may not have: use a–z, 0–9 and “-” only.")


def parse_tags(text: str) -> list[str]:
    """Tags typed in one box, separated by commas or blanks → the distinct tags in their order; TagError names
    every tag that breaks a rule (nothing is taken when one does)."""
    parts = [p for p in _SEPARATORS.split(text or "") if p]
    if not parts:
        raise TagError("Type a tag (for example “baseline” or “lr-sweep”).")
    tags, problems = [], []
    for part in parts:
        try:
            tag = check_tag(part)
        except TagError as exc:
            problems.append(str(exc))
        else:
            if tag not in tags:
                tags.append(tag)
    if problems:
        raise TagError(" ".join(problems))
    if len(tags) > MAX_TAGS:
        raise TagError(f"{len(tags)} tags at once: one thing has at most {MAX_TAGS}.")
    return tags


def check_tag_count(existing: int, adding: int, noun: str) -> None:
    if existing + adding > MAX_TAGS:
        article = "An" if noun[:1] in "aeiou" else "A"
        raise TagError(f"{article} {noun} has at most {MAX_TAGS} tags: this one has {existing}, and {adding} more would make "
                       f"{existing + adding}. Remove some first.")


def clean_note(text: str) -> str:
    """A note as posted → the text stored (line ends made '\\n', trailing blanks dropped); TagError when it is too
    long or holds control characters. An empty note means no note."""
    text = (text or "").replace("\r\n", "\n").replace("\r", "\n").rstrip()
    if len(text) > NOTE_MAX_CHARS:
        raise TagError(f"The note is {len(text)} characters long: a note has at most {NOTE_MAX_CHARS}.")
    if _CONTROL.search(text):
        raise TagError("The note holds control characters; a note is plain text (letters, digits, punctuation, "
                       "tabs and line breaks).")
    return text
