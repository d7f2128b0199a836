"""The list filters, declared with django-filter, producing read-model queries.

django-filter declares the filters, builds and validates their form (the pages render
it; the API reports its errors as a 400). The result is not a queryset but a query of
:mod:`millrace_django.contract.monitoring`, so the lists stay on the storage's keyset
read model whatever the provider.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime
from typing import Any

import django_filters  # type: ignore[import-untyped]
from django import forms
from django.http import QueryDict

from millrace_django.contract import (
    MAX_TAG_LENGTH,
    InstanceQuery,
    InstanceState,
    JobQuery,
    JobState,
    RecurringQuery,
    TenantFilter,
    tag_of,
)

TARGET_SEARCH = "target_contains" in {f.name for f in fields(JobQuery)}
"""Whether the read model can search job targets (``JobQuery.target_contains``)."""


def tag_validator(value: str) -> None:
    """A form field's check that ``value`` is a well-formed tag (the message says why
    not)."""
    try:
        tag_of(value)
    except ValueError as error:
        raise forms.ValidationError(str(error)) from None


class _Unqueried:
    """Stands in for the queryset a FilterSet expects: these filter sets build a
    read-model query instead (see :meth:`ReadModelFilterSet.query`)."""

    model = None

    def all(self) -> _Unqueried:
        return self


class IntegerFilter(django_filters.NumberFilter):  # type: ignore[misc]
    field_class = forms.IntegerField


class _DateTimeInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def format_value(self, value: Any) -> str | None:
        if isinstance(value, datetime):
            return value.strftime("%Y-%m-%dT%H:%M")
        return super().format_value(value)


def _created_range() -> tuple[django_filters.IsoDateTimeFilter, django_filters.IsoDateTimeFilter]:
    return (
        django_filters.IsoDateTimeFilter(
            label="Created from", widget=_DateTimeInput(), help_text="inclusive"
        ),
        django_filters.IsoDateTimeFilter(
            label="Created before", widget=_DateTimeInput(), help_text="exclusive"
        ),
    )


def _tag() -> django_filters.CharFilter:
    return django_filters.CharFilter(
        label="Tag",
        help_text="exact tag; read through the tags' index",
        max_length=MAX_TAG_LENGTH,
        validators=[tag_validator],
    )


class ReadModelFilterSet(django_filters.FilterSet):  # type: ignore[misc]
    """A filter set whose result is a read-model query (``query()``), not a queryset.

    Call :meth:`is_valid` first; ``form.errors`` says what was wrong.
    """

    tenant = django_filters.CharFilter(label="Tenant")
    untenanted = django_filters.BooleanFilter(
        label="Untenanted only", widget=forms.CheckboxInput, help_text="wins over Tenant"
    )

    def __init__(self, data: QueryDict | dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(data, queryset=_Unqueried(), **kwargs)

    @property
    def values(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = self.form.cleaned_data
        return cleaned

    def tenant_filter(self) -> TenantFilter:
        """``untenanted`` wins; a tenant name selects that tenant; neither: any."""
        if self.values.get("untenanted"):
            return TenantFilter.untenanted()
        name = (self.values.get("tenant") or "").strip()
        return TenantFilter.of(name) if name else TenantFilter.any()

    @property
    def active(self) -> bool:
        """Whether any filter narrows the list."""
        return any(v not in (None, "", [], False) for v in self.values.values())


class StatisticsFilter(ReadModelFilterSet):
    """The overview's tenant filter."""


class CatalogFilter(ReadModelFilterSet):
    """The catalog's: a tenant and a tag (the functions whose jobs carried it)."""

    tag = _tag()


class JobFilter(ReadModelFilterSet):
    state = django_filters.MultipleChoiceFilter(
        label="State",
        choices=[(s.value, s.value) for s in JobState],
        widget=forms.CheckboxSelectMultiple,
    )
    queue = django_filters.CharFilter(label="Queue", help_text="exact name")
    created_after, created_before = _created_range()
    target = django_filters.CharFilter(
        label="Target starts with",
        help_text="exact letter case, e.g. shop.jobs: or shop.jobs:send_receipt",
        max_length=500,
    )
    if TARGET_SEARCH:
        target_contains = django_filters.CharFilter(
            label="Target contains",
            help_text="any letter case; reads every job unless indexed (see the docs)",
            max_length=500,
        )
    tag = _tag()

    def query(self, *, cursor: str | None, limit: int) -> JobQuery:
        values = self.values
        extra: dict[str, Any] = {}
        if values.get("target"):
            extra["target_prefix"] = values["target"]
        if TARGET_SEARCH and values.get("target_contains"):
            extra["target_contains"] = values["target_contains"]
        if values.get("tag"):
            extra["tag"] = values["tag"]
        return JobQuery(
            states=frozenset(JobState(s) for s in values.get("state") or ()),
            queue=values.get("queue") or None,
            tenant=self.tenant_filter(),
            created_after=values.get("created_after"),
            created_before=values.get("created_before"),
            cursor=cursor,
            limit=limit,
            **extra,
        )


class InstanceFilter(ReadModelFilterSet):
    state = django_filters.MultipleChoiceFilter(
        label="State",
        choices=[(s.value, s.value) for s in InstanceState],
        widget=forms.CheckboxSelectMultiple,
    )
    definition = django_filters.CharFilter(label="Definition id")
    version = IntegerFilter(label="Version", help_text="with a definition id", min_value=1)
    created_after, created_before = _created_range()

    def query(self, *, cursor: str | None, limit: int) -> InstanceQuery:
        values = self.values
        version = values.get("version")
        return InstanceQuery(
            states=frozenset(InstanceState(s) for s in values.get("state") or ()),
            definition_id=values.get("definition") or None,
            definition_version=int(version) if version is not None else None,
            tenant=self.tenant_filter(),
            created_after=values.get("created_after"),
            created_before=values.get("created_before"),
            cursor=cursor,
            limit=limit,
        )


class RecurringFilter(ReadModelFilterSet):
    queue = django_filters.CharFilter(label="Queue", help_text="exact name")

    def query(self, *, cursor: str | None, limit: int) -> RecurringQuery:
        return RecurringQuery(
            queue=self.values.get("queue") or None,
            tenant=self.tenant_filter(),
            cursor=cursor,
            limit=limit,
        )


class PagingForm(forms.Form):
    """The opaque cursor and page size; the storage clamps the size and rejects a bad
    cursor (a 400, never a silent restart)."""

    cursor = forms.CharField(required=False, max_length=2000, strip=False)
    limit = forms.IntegerField(required=False)

    def page(self, default: int) -> tuple[str | None, int]:
        cursor = self.cleaned_data.get("cursor") or None
        limit = self.cleaned_data.get("limit")
        return cursor, limit if limit is not None else default
