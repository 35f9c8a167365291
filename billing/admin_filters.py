"""Text-box filters for the usage and request-log change lists (issue 34): by org, model and
key. A list of choices would be a query over every org, model or key on each page load, and
unreadable at a few thousand keys; a box takes an id, a name, a model id or a key prefix."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest


class InputFilter(admin.SimpleListFilter):
    template = "admin/input_filter.html"
    placeholder = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("", "")]  # never listed: the template draws a text box; non-empty shows it

    def choices(self, changelist: Any) -> Any:
        # The other filters' parameters, kept as hidden inputs so one filter does not drop them.
        others = {
            k: v for k, v in changelist.get_filters_params().items() if k != self.parameter_name
        }
        yield {"others": list(others.items()), "value": self.value() or "", "all": not self.value()}

    def condition(self, value: str) -> Q:
        raise NotImplementedError

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = (self.value() or "").strip()
        return queryset.filter(self.condition(value)) if value else queryset


class OrgFilter(InputFilter):
    title = "organization (id or name)"
    parameter_name = "org"

    def condition(self, value: str) -> Q:
        return Q(org_id=int(value)) if value.isdigit() else Q(org__name__iexact=value)


class ModelFilter(InputFilter):
    title = "model (canonical id)"
    parameter_name = "model"

    def condition(self, value: str) -> Q:
        return Q(model_id__iexact=value)


class KeyFilter(InputFilter):
    title = "key (id or prefix)"
    parameter_name = "key"

    def condition(self, value: str) -> Q:
        if value.isdigit():
            return Q(api_key_id=int(value))
        return Q(api_key__prefix=value.rstrip("…").rstrip("."))
