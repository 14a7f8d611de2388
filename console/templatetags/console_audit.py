"""``{{ event|audit_object }}``: what a timeline row is about, named for people, with its page (console.selectors)."""

from __future__ import annotations

from django import template

from console import selectors

register = template.Library()


@register.filter
def audit_object(event) -> selectors.AuditObject:
    return selectors.audit_object(event)
