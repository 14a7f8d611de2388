"""Search and filters of the dataset, training job, model and evaluation run lists, as GET parameters (a filtered
list is a URL to share): ``q`` (a word of the name, the id or the note), ``tag`` (one or more, all of them), ``status``,
``kind`` (the kind or stage), ``by`` (who started it: a username) and ``since`` / ``until`` (dates, inclusive), with
``page``. A value that is not one of the choices, a malformed tag or date, or ``since`` after ``until`` is refused
(400) with the reason shown above the table, which then lists nothing rather than an unfiltered list.

:func:`listing` is what a list view calls: the filter form, the page of things (each with its ``tag_slugs`` and
``note_text``) and the query string for the page links.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.core.paginator import Page, Paginator
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from training_jobs import tag_selectors
from training_jobs.tags import MAX_TAGS, TagError, parse_tags

PER_PAGE = 50
ANY = [("", "(any)")]


class ListFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Search",
                        widget=forms.TextInput(attrs={"type": "search", "placeholder": "name, id or note",
                                                      "autocomplete": "off"}))
    tag = forms.CharField(required=False, max_length=400, label="Tag",
                          widget=forms.TextInput(attrs={"placeholder": "e.g. baseline", "autocomplete": "off",
                                                        "autocapitalize": "none", "spellcheck": "false"}))
    status = forms.ChoiceField(required=False, label="Status")
    kind = forms.ChoiceField(required=False, label="Kind")
    by = forms.ChoiceField(required=False, label="Started by")
    since = forms.DateField(required=False, label="From", input_formats=["%Y-%m-%d"],
                            widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"),
                            error_messages={"invalid": "Give the date as YYYY-MM-DD."})
    until = forms.DateField(required=False, label="To", input_formats=["%Y-%m-%d"],
                            widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"),
                            error_messages={"invalid": "Give the date as YYYY-MM-DD."})

    def __init__(self, *args: Any, statuses: list | None, kinds: list | None, people: list[str],
                 kind_label: str = "Kind", **kwargs: Any) -> None:
        """``statuses`` / ``kinds`` None: the list has no such filter (or filters it another way)."""
        super().__init__(*args, **kwargs)
        for name, choices in (("status", statuses), ("kind", kinds)):
            if choices is None:
                del self.fields[name]
            else:
                self.fields[name].choices = ANY + list(choices)
        if kinds is not None:
            self.fields["kind"].label = kind_label
        self.fields["by"].choices = ANY + [(u, u) for u in people]
        for name in ("status", "kind", "by"):
            if name in self.fields:
                self.fields[name].error_messages["invalid_choice"] = (
                    f"“%(value)s” is not one of the choices for “{self.fields[name].label}”.")

    def clean_tag(self) -> list[str]:
        text = self.cleaned_data.get("tag") or ""
        if not text.strip():
            return []
        try:
            tags = parse_tags(text)
        except TagError as exc:
            raise forms.ValidationError(str(exc)) from None
        if len(tags) > MAX_TAGS:
            raise forms.ValidationError(f"At most {MAX_TAGS} tags in one filter.")
        return tags

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.add_error("until", f"“To” ({until:%Y-%m-%d}) is before “From” ({since:%Y-%m-%d}).")
        return data


def filter_queryset(qs: QuerySet, subject: str, data: dict[str, Any]) -> QuerySet:
    """``qs`` narrowed by the cleaned filters ``data`` (every filter that is set must hold)."""
    text = (data.get("q") or "").strip()
    if text:
        match = Q(name__icontains=text) | Q(pk__in=tag_selectors.noted_ids(subject, text))
        if all(c in "0123456789abcdefABCDEF-" for c in text):
            match |= Q(pk__icontains=text)  # part of the id, as copied from a page or a log
        qs = qs.filter(match)
    for tag in data.get("tag") or []:
        qs = qs.filter(pk__in=tag_selectors.tagged_ids(subject, tag))
    if data.get("status"):
        qs = qs.filter(status=data["status"])
    if data.get("kind"):
        qs = qs.filter(kind=data["kind"])
    if data.get("by"):
        qs = qs.filter(created_by__username=data["by"])
    if data.get("since"):
        qs = qs.filter(created_at__date__gte=data["since"])
    if data.get("until"):
        qs = qs.filter(created_at__date__lte=data["until"])
    return qs


def people(qs: QuerySet) -> list[str]:
    """Usernames of whoever started something in ``qs``: the "started by" choices."""
    return list(get_user_model().objects.filter(pk__in=qs.order_by().values("created_by")).order_by("username")
                .values_list(get_user_model().USERNAME_FIELD, flat=True))


@dataclass
class Listing:
    form: ListFilterForm
    page: Page
    objects: list
    query: str  # the filters as a query string, without the page: for the page links
    filtered: bool
    status: int = 200
    context: dict[str, Any] = field(default_factory=dict)


def narrow(request: HttpRequest, subject: str, qs: QuerySet, *, kinds: list | None = None,
           statuses: list | None = None, kind_label: str = "Kind", everyone: QuerySet | None = None
           ) -> tuple[ListFilterForm, QuerySet, int]:
    """The filter form bound to the request, ``qs`` narrowed by it, and the status to answer: 400 (and nothing
    listed) when a filter is refused. "Started by" offers whoever started something in ``everyone`` (default
    ``qs``: pass the unfiltered list when ``qs`` is narrowed already)."""
    form = ListFilterForm(request.GET, statuses=statuses, kinds=kinds, kind_label=kind_label,
                          people=people(qs if everyone is None else everyone))
    form.known_tags = tag_selectors.known_tags(subject)
    if form.known_tags:
        form.fields["tag"].widget.attrs["list"] = "known-tags"
    if form.is_valid():
        return form, filter_queryset(qs, subject, form.cleaned_data), 200
    return form, qs.none(), 400


def given(request: HttpRequest, form: ListFilterForm) -> bool:
    return any(request.GET.get(name, "").strip() for name in form.fields)


def errors(form: ListFilterForm) -> list[str]:
    return [e for errs in form.errors.values() for e in errs]


def listing(request: HttpRequest, subject: str, qs: QuerySet, *, kinds: list | None, statuses: list | None,
            kind_label: str = "Kind", per_page: int = PER_PAGE) -> Listing:
    form, qs, status = narrow(request, subject, qs, kinds=kinds, statuses=statuses, kind_label=kind_label)
    filtered = given(request, form)
    page = Paginator(qs, per_page).get_page(request.GET.get("page"))
    objects = list(page.object_list)
    tag_selectors.tags_and_notes(subject, objects)
    query = request.GET.copy()
    query.pop("page", None)
    for name in list(query):
        if not query.get(name, "").strip():
            query.pop(name)  # an empty box: not worth a parameter in a link
    out = Listing(form=form, page=page, objects=objects, query=query.urlencode(), filtered=filtered, status=status)
    out.context = {"filters": form, "page": page, "query": out.query, "filtered": filtered,
                   "filter_errors": errors(form)}
    return out
