"""Template filters for model endpoints (streams.labels): ``{{ e|endpoint_label }}``, ``{{ e.model|model_short }}``."""

from django import template

from streams.labels import endpoint_label as _endpoint_label
from streams.labels import model_short_name

register = template.Library()


@register.filter
def endpoint_label(endpoint, with_model=False):
    """``{{ e|endpoint_label }}`` (the name) or ``{{ e|endpoint_label:True }}`` (name · short model name)."""
    return _endpoint_label(endpoint, with_model=bool(with_model)) if endpoint else ""


@register.filter
def model_short(model):
    """``{{ e.model|model_short }}``: the model's last path component, never a directory's absolute path."""
    return model_short_name(model)
