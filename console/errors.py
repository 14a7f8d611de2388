"""Domain errors raised by services; views and APIs translate them into 4xx answers.

Each carries the HTTP status it maps to, so the translation is one place and never a 500.
"""

from __future__ import annotations


class DomainError(Exception):
    status_code = 400
    code = "invalid"

    def __init__(self, message: str, *, errors: list[dict] | None = None):
        super().__init__(message)
        self.message = message
        self.errors = errors or []  # [{"path": ..., "message": ...}] for field-level problems


class ValidationFailed(DomainError):
    status_code = 400
    code = "validation_failed"


class NotAllowed(DomainError):
    """The user has the role but this particular action breaks a rule (e.g. approving one's own version)."""

    status_code = 403
    code = "not_allowed"


class InvalidTransition(DomainError):
    status_code = 409
    code = "invalid_transition"


class EditConflict(DomainError):
    """Optimistic-lock failure: someone saved the draft since this editor loaded it."""

    status_code = 409
    code = "edit_conflict"

    def __init__(self, message: str, *, current_lock_version: int):
        super().__init__(message)
        self.current_lock_version = current_lock_version
