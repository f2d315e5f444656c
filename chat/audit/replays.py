"""The audit's form that starts replays of a period's runs (docs/replay.md)."""

from __future__ import annotations

from typing import Any

from django import forms

from chat.llm.endpoints import model_choices
from chat.models import ReplayMode, ReplayTools

MAX_BATCH_RUNS = 200


class ReplayStartForm(forms.Form):
    """Which models to replay the period's newest runs on, how many runs, and how."""

    models = forms.MultipleChoiceField(
        choices=(), widget=forms.CheckboxSelectMultiple, help_text="One replay per run and model."
    )
    limit = forms.IntegerField(
        min_value=1, max_value=MAX_BATCH_RUNS, initial=20, help_text="The newest completed runs."
    )
    tools = forms.ChoiceField(choices=ReplayTools.choices, initial=ReplayTools.RECORDED)
    replay = forms.ChoiceField(choices=ReplayMode.choices, initial=ReplayMode.FREE)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read per form: a providers file may list its server's models as they come and go.
        models = self.fields["models"]
        assert isinstance(models, forms.MultipleChoiceField)
        models.choices = [(choice.id, choice.label) for choice in model_choices()]

    def clean(self) -> dict[str, Any]:
        """A forced replay runs no tool: its tools are the recorded ones."""
        cleaned: dict[str, Any] = super().clean() or {}
        if (
            cleaned.get("replay") == ReplayMode.FORCED
            and cleaned.get("tools") != ReplayTools.RECORDED
        ):
            raise forms.ValidationError("A forced replay runs no tool: choose recorded tools.")
        return cleaned
