"""``{% tags_notes obj %}``: the tags and note panel of a dataset, training job, model or evaluation run page, in one
line of its template (the page's view passes nothing for it)."""

from __future__ import annotations

from django import template

from training_jobs.tag_views import panel_context

register = template.Library()


@register.inclusion_tag("training_jobs/_tags_notes.html", takes_context=True)
def tags_notes(context, obj):
    return panel_context(context["request"].user, obj)
