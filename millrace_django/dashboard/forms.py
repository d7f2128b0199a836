"""Forms of the operator actions: the signals form and the bulk selections."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django import forms
from django.core.exceptions import ValidationError

from millrace_django.dashboard.actions import InstanceAction, JobAction
from millrace_django.dashboard.wire import read_json

MAX_BULK = 200
"""At most one page of ids per bulk action."""


class SignalForm(forms.Form):
    name = forms.CharField(label="Signal name", max_length=200)
    correlation_id = forms.CharField(label="Correlation id", max_length=400, strip=False)
    payload = forms.CharField(
        label="Payload (JSON)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "cols": 60, "spellcheck": "false"}),
        help_text="Optional; blank sends null.",
    )

    def clean_payload(self) -> Any:
        raw = self.cleaned_data.get("payload") or ""
        if not raw.strip():
            return None
        try:
            return read_json(raw)
        except ValueError as error:
            raise ValidationError(str(error)) from error


class Values(forms.Field):
    """Every value posted under the field's name (checkbox selections)."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[str]:
        if not value:
            return []
        if isinstance(value, str):
            return [value]
        return [str(v) for v in value]

    def validate(self, value: Any) -> None:
        super().validate(value)
        if len(value) > MAX_BULK:
            raise ValidationError(f"Select at most {MAX_BULK} at once.")
        if any("\x00" in item for item in value):
            raise ValidationError("An id holds a NUL character (%00), which no id holds.")


class _BulkForm(forms.Form):
    ids = Values(error_messages={"required": "Select at least one row."})
    next = forms.CharField(required=False)


class JobBulkForm(_BulkForm):
    action = forms.ChoiceField(choices=[(a.value, a.value) for a in JobAction])

    def clean_ids(self) -> list[UUID]:
        return _uuids(self.cleaned_data["ids"])


class InstanceBulkForm(_BulkForm):
    action = forms.ChoiceField(choices=[(a.value, a.value) for a in InstanceAction])

    def clean_ids(self) -> list[UUID]:
        return _uuids(self.cleaned_data["ids"])


class RecurringBulkForm(_BulkForm):
    def clean_ids(self) -> list[str]:
        return list(dict.fromkeys(self.cleaned_data["ids"]))


def _uuids(raw: list[str]) -> list[UUID]:
    try:
        return list(dict.fromkeys(UUID(value) for value in raw))
    except ValueError as error:
        raise ValidationError("Not a job or instance id.") from error
