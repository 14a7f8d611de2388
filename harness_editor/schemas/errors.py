"""Located validation errors: :class:`FieldError` and the editor paths they carry (``tools[3].parameters.sku``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

_IDENT_RE = re.compile(r"^[^\W\d][\w\-]*$")


class FieldError(BaseModel):
    """One problem, located: ``path`` is "" for the document itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    message: str


class ManifestError(Exception):
    """Raised with every error found in one validation pass."""

    def __init__(self, errors: Iterable[FieldError]):
        self.errors: list[FieldError] = list(errors)
        super().__init__(self.errors)  # args stay (errors,) so the exception pickles (Celery results)

    def __str__(self) -> str:
        return "\n".join(f"{e.path}: {e.message}" if e.path else e.message for e in self.errors)


def _join(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    if _IDENT_RE.match(part):
        return f"{path}.{part}" if path else part
    return f"{path}[{json.dumps(part, ensure_ascii=False)}]"


def _path(parts: Iterable[str | int], base: str = "") -> str:
    path = base
    for part in parts:
        path = _join(path, part)
    return path

