"""Forms of the operator actions: the signals form and the bulk selections."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django import forms
from django.core.exceptions import ValidationError

from millrace_django.contract import RecurringRecord
from millrace_django.dashboard.actions import InstanceAction, JobAction, RecurringEdit
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


def _json_field(label: str, help_text: str) -> forms.CharField:
    return forms.CharField(
        label=label,
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60, "spellcheck": "false"}),
        help_text=help_text,
    )


class RecurringEditForm(forms.Form):
    """A definition's schedule and arguments; only what changed is sent to the engine,
    which validates it (the view shows its refusal on the field concerned)."""

    cron = forms.CharField(label="Cron", max_length=200, strip=True)
    timezone = forms.CharField(label="Time zone", max_length=100, strip=True)
    args = _json_field("Positional arguments (JSON list)", "Blank: none.")
    kwargs = _json_field("Keyword arguments (JSON object)", "Blank: none.")

    REFUSED_FIELDS = {"cron": "cron", "timezone": "timezone", "arguments": "args"}
    """The field each refusal of the engine concerns (see ``actions.edit_recurring``)."""

    @classmethod
    def of(cls, record: RecurringRecord) -> RecurringEditForm:
        return cls(
            initial={
                "cron": record.cron,
                "timezone": record.timezone,
                "args": json.dumps(list(record.invocation.args), ensure_ascii=False),
                "kwargs": json.dumps(dict(record.invocation.kwargs), ensure_ascii=False),
            }
        )

    def clean_args(self) -> list[Any]:
        value = self._json("args", [])
        if not isinstance(value, list):
            raise ValidationError('Give a JSON list, such as [1, "two"].')
        return value

    def clean_kwargs(self) -> dict[str, Any]:
        value = self._json("kwargs", {})
        if not isinstance(value, dict):
            raise ValidationError('Give a JSON object, such as {"name": "value"}.')
        return value

    def _json(self, name: str, blank: Any) -> Any:
        raw = self.cleaned_data.get(name) or ""
        if not raw.strip():
            return blank
        try:
            return read_json(raw)
        except ValueError as error:
            raise ValidationError(str(error)) from error

    def edit(self, stored: RecurringRecord) -> RecurringEdit:
        """The changes to ``stored`` (unchanged arguments are not re-validated)."""
        data = self.cleaned_data
        same_arguments = (data["args"], data["kwargs"]) == (
            list(stored.invocation.args),
            dict(stored.invocation.kwargs),
        )
        return RecurringEdit(
            cron=data["cron"],
            timezone=data["timezone"],
            args=None if same_arguments else data["args"],
            kwargs=None if same_arguments else data["kwargs"],
        )

    def refuse(self, errors: dict[str, list[str]]) -> None:
        """Show the engine's refusal on the fields it concerns."""
        for concern, messages in errors.items():
            for message in messages:
                self.add_error(self.REFUSED_FIELDS.get(concern), message)


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
