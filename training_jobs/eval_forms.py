"""Forms of the eval-set pages: import a set (pasted or uploaded JSON lines), filter a version's cases, and save a
recorded turn as a case. The forms only turn inputs into the service's arguments; the services own every rule, and
their located errors come back onto the fields (:meth:`_Located.add_located_errors`)."""

from __future__ import annotations

import re

from django import forms

from training_jobs.eval_models import EvalSet
from training_jobs.evals.cases import CLAIM_KINDS
from training_jobs.eval_services import MAX_IMPORT_BYTES, TURN_SET_DEFAULT

MAX_PASTE_CHARS = 2_000_000  # a pasted set; larger ones are uploaded as a file


class _Located:
    # located error path (its first part) → the field it belongs to
    FIELD_OF: dict[str, str] = {}

    def add_located_errors(self, errors: list[dict[str, str]]) -> list[dict[str, str]]:
        """Put each error on its field; returns those that belong to no field (e.g. ``line 12.comments[0].text``),
        for the page to list with their paths."""
        rest = []
        for e in errors:
            head = re.split(r"[.\[]", e.get("path", ""), maxsplit=1)[0]
            field = self.FIELD_OF.get(head)
            if field and field in self.fields:
                self.add_error(field, f"{e['path']}: {e['message']}" if e["path"] != head else e["message"])
            else:
                rest.append(e)
        return rest


class EvalSetImportForm(_Located, forms.Form):
    name = forms.CharField(max_length=64, help_text="an existing set gets a new version; a new name makes a new set "
                                                    "(lowercase letters, digits, '-' and '_')")
    kind = forms.ChoiceField(choices=EvalSet.Kind.choices)
    description = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}),
                                  help_text="for a new set (or to update the set's description)")
    note = forms.CharField(required=False, max_length=2000, label="Change note",
                           widget=forms.TextInput(attrs={"placeholder": "what changed in these cases"}))
    jsonl = forms.CharField(required=False, max_length=MAX_PASTE_CHARS, label="Paste JSON lines",
                            widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false", "class": "mono"}),
                            help_text="one case per line (training_jobs.evals.cases.EvalCase)")
    file = forms.FileField(required=False, label="... or upload a .jsonl file",
                           help_text=f"at most {MAX_IMPORT_BYTES // (1024 * 1024)} MB")

    FIELD_OF = {"name": "name", "kind": "kind", "note": "note", "description": "description", "jsonl": "jsonl"}

    def clean(self):
        data = super().clean()
        upload = data.get("file")
        if upload is not None:
            if upload.size > MAX_IMPORT_BYTES:
                self.add_error("file", f"at most {MAX_IMPORT_BYTES // (1024 * 1024)} MB")
            else:
                data["jsonl_text"] = upload.read(MAX_IMPORT_BYTES + 1)
        elif data.get("jsonl", "").strip():
            data["jsonl_text"] = data["jsonl"]
        elif not self.errors:
            self.add_error("jsonl", "paste the cases or upload a file")
        return data


class CaseFilterForm(forms.Form):
    """The case table's filters: a tag, text, and the kind-specific fields of the version (added per version)."""

    tag = forms.ChoiceField(required=False)
    q = forms.CharField(required=False, max_length=200, label="Search",
                        widget=forms.TextInput(attrs={"placeholder": "words in comments, replies, prompts, ids",
                                                      "type": "search"}))

    def __init__(self, *args, facets: list[dict], tags: dict[str, int], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tag"].choices = [("", "(any tag)")] + [(t, f"{t} ({n})") for t, n in sorted(tags.items())]
        self.facet_keys = []
        for facet in facets:
            self.fields[facet["key"]] = forms.ChoiceField(
                required=False, label=facet["label"],
                choices=[("", "(any)")] + [(v, f"{v} ({n})") for v, n in facet["values"]])
            self.facet_keys.append(facet["key"])

    def filters(self) -> dict:
        """Only valid values (an unknown choice is dropped, not a 500): tag, q and the facets."""
        self.is_valid()  # cleaned_data then holds the fields that are valid
        data = self.cleaned_data
        return {"tag": data.get("tag") or None, "q": data.get("q") or None,
                "facets": {k: data[k] for k in self.facet_keys if data.get(k)}}


def _claim_lines(text: str) -> tuple[list[dict], list[str]]:
    claims, errors = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        kind, sep, rest = line.partition(":")
        kind = kind.strip()
        if not sep or not rest.strip():
            errors.append(f"line {n}: write 'kind: what the reply must not say'")
        elif kind not in CLAIM_KINDS:
            errors.append(f"line {n}: unknown kind {kind!r}; one of {', '.join(CLAIM_KINDS)}")
        else:
            claims.append({"kind": kind, "text": rest.strip()[:500]})
    return claims, errors


class SaveCaseForm(_Located, forms.Form):
    set_name = forms.CharField(max_length=64, label="Eval set", initial=TURN_SET_DEFAULT,
                               widget=forms.TextInput(attrs={"list": "t1-sets"}),
                               help_text="a T1 set (picked from the list, or a new name for a new set): the case goes "
                                         "into a new version of it")
    gold_reply = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 3}),
                                 label="Gold reply", help_text="the reply the avatar should have given (edit it)")
    tags = forms.CharField(required=False, max_length=400,
                           help_text="separated by spaces or commas: lowercase letters, digits, '-' and '_'")
    forbidden_claims = forms.CharField(
        required=False, max_length=5000, widget=forms.Textarea(attrs={"rows": 3, "class": "mono"}),
        label="Forbidden claims",
        help_text="one per line, 'kind: what the reply must not say' — kinds: " + ", ".join(CLAIM_KINDS))
    note = forms.CharField(required=False, max_length=2000, label="Change note")

    FIELD_OF = {"set_name": "set_name", "kind": "set_name", "gold_reply": "gold_reply", "tags": "tags",
                "forbidden_claims": "forbidden_claims", "note": "note"}

    def clean_tags(self) -> list[str]:
        return [t for t in re.split(r"[\s,]+", self.cleaned_data.get("tags", "")) if t]

    def clean_forbidden_claims(self) -> list[dict]:
        claims, errors = _claim_lines(self.cleaned_data.get("forbidden_claims", ""))
        if errors:
            raise forms.ValidationError(errors)
        return claims
