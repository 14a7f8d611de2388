"""The start form of a reproduction run: base, budget, seed. It only turns inputs into
:func:`training_jobs.reproduce_services.reproduction_start`'s arguments; the service owns every rule (a base that
is not built, a seed out of range), and its located errors come back onto the boxes."""

from __future__ import annotations

from typing import Any

from django import forms

from training_jobs.reproduce_models import BASES, BUDGETS


class ReproductionForm(forms.Form):
    base = forms.ChoiceField(choices=BASES, initial="tiny", help_text="the model every arm is trained from")
    budget = forms.ChoiceField(choices=BUDGETS, initial="smoke",
                               help_text="steps, batch sizes, data and evaluation cases of every arm")
    seed = forms.IntegerField(initial=0, help_text="seed of the data draw and of every stage")

    def request(self) -> dict[str, Any]:
        d = self.cleaned_data
        return {"base": d["base"], "budget": d["budget"], "seed": d["seed"]}

    def add_located_errors(self, errors: list[dict[str, str]]) -> list[dict[str, str]]:
        """Put the service's errors on their boxes; returns those that belong to no box."""
        other = []
        for e in errors:
            if e.get("path") in self.fields:
                self.add_error(e["path"], e["message"])
            else:
                other.append(e)
        return other
