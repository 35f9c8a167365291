"""Dashboard pages for usage, the request log and the balance. Thin: parse, select, render.

Tenancy is enforced by `accounts.web.org_view`; every selector here takes `membership.org`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from accounts.models import ApiKey, Membership
from accounts.web import org_view, page
from billing import cache_selectors as cache
from billing import dashboard_selectors as sel
from billing import request_log_selectors as log
from billing import usage_health_selectors as health
from billing.key_spend import KeySpend, key_spend
from billing.models import RequestLog

PERIODS = ((7, "7 days"), (30, "30 days"), (90, "90 days"))
HOURLY_PERIODS = ((24, "24 hours"),)  # by the hour
MAX_PERIOD_DAYS = 366
REQUESTS_PER_PAGE = 50
LEDGER_PER_PAGE = 50


class UsageFilterForm(forms.Form):
    hours = forms.TypedChoiceField(choices=HOURLY_PERIODS, coerce=int, required=False)
    days = forms.TypedChoiceField(choices=PERIODS, coerce=int, required=False)
    start = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    split = forms.ChoiceField(choices=(("model", "by model"), ("key", "by key")), required=False)
    key = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    model = forms.CharField(max_length=128, required=False)

    def __init__(self, *args: Any, keys: list[ApiKey], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Only this org's keys are choices: a foreign key id is a validation error, not a filter.
        self.fields["key"].choices = [("", "any key")] + [  # type: ignore[attr-defined]
            (k.pk, f"{k.name or 'unnamed'} ({k.prefix}…)") for k in keys
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("start"), data.get("end")
        if start and end:
            if end < start:
                raise forms.ValidationError("The end date is before the start date.")
            if (end - start).days + 1 > MAX_PERIOD_DAYS:
                raise forms.ValidationError(f"Choose at most {MAX_PERIOD_DAYS} days.")
        return data

    def chosen_period(self) -> sel.Period:
        data = self.cleaned_data if self.is_valid() else {}
        start, end = data.get("start"), data.get("end")
        if start and end:
            return sel.Period(first=start, last=end)
        if data.get("hours"):
            return sel.Period.last_hours(data["hours"])
        return sel.Period.last_days(data.get("days") or 30)

    def chosen_filters(self) -> sel.UsageFilters:
        data = self.cleaned_data if self.is_valid() else {}
        return sel.UsageFilters.of(data.get("key"), data.get("model") or "")

    def query(self, **changes: Any) -> str:
        """This page's query string with `changes` (the period links keep split and filters)."""
        data = self.cleaned_data if self.is_valid() else {}
        params = {
            "split": data.get("split") or "model",
            "key": data.get("key") or "",
            "model": data.get("model") or "",
            **changes,
        }
        return urlencode({k: v for k, v in params.items() if v not in ("", None)})

    def chosen_split(self) -> str:
        data = self.cleaned_data if self.is_valid() else {}
        return data.get("split") or "model"


class RequestFilterForm(forms.Form):
    key = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    model = forms.CharField(max_length=128, required=False)
    status = forms.ChoiceField(
        choices=[("", "any status"), *RequestLog.Status.choices], required=False
    )
    request_id = forms.CharField(max_length=160, required=False, label="Request id")
    since = forms.DateField(
        required=False, label="From", widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        required=False, label="To", widget=forms.DateInput(attrs={"type": "date"})
    )
    sort = forms.ChoiceField(
        required=False,
        choices=[
            ("-time", "newest first"),
            ("time", "oldest first"),
            ("-cost", "highest cost"),
            ("cost", "lowest cost"),
            ("-latency", "slowest"),
            ("latency", "fastest"),
        ],
    )

    def __init__(self, *args: Any, keys: list[ApiKey], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Only this org's keys are choices: a foreign key id is a validation error, not a filter.
        self.fields["key"].choices = [("", "any key")] + [  # type: ignore[attr-defined]
            (k.pk, f"{k.name or 'unnamed'} ({k.prefix}…)") for k in keys
        ]

    def filters(self) -> sel.RequestFilters:
        if not self.is_valid():
            return sel.RequestFilters()
        data = self.cleaned_data
        return sel.RequestFilters(
            key_id=data.get("key"),
            model=data.get("model") or "",
            status=data.get("status") or "",
            request_id=(data.get("request_id") or "").strip(),
            since=data.get("since"),
            until=data.get("until"),
            sort=data.get("sort") or sel.DEFAULT_SORT,
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and until < since:
            raise forms.ValidationError("The end date is before the start date.")
        return data


@require_GET
@org_view()
def home(request: HttpRequest, membership: Membership) -> HttpResponse:
    org = membership.org
    period = sel.Period.last_days(14)
    money = sel.balances(org)
    context = page(
        request,
        membership,
        balance_nano=money.ledger_nano,
        available_nano=money.available_nano,
        pending_nano=money.unreconciled_nano,
        held_nano=money.held_nano,  # open holds of requests in flight (None: unavailable)
        month_spend_nano=sel.month_to_date_spend_nano(org),
        requests_24h=sel.requests_since(org, timezone.now() - timedelta(hours=24)),
        active_keys=ApiKey.objects.filter(org=org, revoked_at__isnull=True).count(),
        report=sel.usage_report(org, period, "model"),
        recent=[_display(r) for r in sel.recent_requests(org, 10)],
        ws_path=f"/ws/requests/?org={org.pk}",
    )
    return render(request, "dashboard/home.html", context)


@require_GET
@org_view()
def usage(request: HttpRequest, membership: Membership) -> HttpResponse:
    org = membership.org
    keys = list(ApiKey.objects.filter(org=org).defer("key_hash").order_by("-created_at"))
    form = UsageFilterForm(request.GET or None, keys=keys)
    period = form.chosen_period()
    filters = form.chosen_filters()
    report = sel.usage_report(org, period, form.chosen_split(), filters)
    custom = bool(form.is_valid() and form.cleaned_data.get("start"))
    period_links = [
        (label, form.query(hours=value), not custom and period.hours == value)
        for value, label in HOURLY_PERIODS
    ] + [
        (
            label,
            form.query(days=value),
            not custom and not period.hourly and len(period.days) == value,
        )
        for value, label in PERIODS
    ]
    context = page(
        request,
        membership,
        form=form,
        report=report,
        filters=filters,
        spend_today_nano=sel.spend_since(org, sel.today_start(), filters),
        cache_rates=sel.cache_hit_rates(org, period, filters),
        cache_tables=[
            cache.prompt_cache(
                filters.apply(cache.org_records(org, period.start, period.end)), org, group
            )
            for group in cache.GROUPS
        ],
        health_tables=[
            ("model", health.health(org, period, "model", filters), "health-by-model"),
            ("key", health.health(org, period, "key", filters), "health-by-key"),
        ],
        period_links=period_links,
        key_spend=_key_spend(org, filters, period),
    )
    return render(request, "dashboard/usage.html", context)


def _key_spend(org: Any, filters: sel.UsageFilters, period: sel.Period) -> KeySpend | None:
    """One key's spend per day beside its cap, when the page is narrowed to a key (by day)."""
    if not filters.key_id or period.hourly:
        return None
    key = ApiKey.objects.filter(org=org, pk=filters.key_id).defer("key_hash").first()
    return None if key is None else key_spend(key, period.buckets)


def _display(record: RequestLog) -> dict[str, Any]:
    """The shared row plus what only the server-rendered page shows (tooltips, datetime)."""
    row = sel.request_row(record)
    row["created"] = record.created_at
    row["attempts_detail"] = sel.attempts_summary(record.attempts)
    row["key_name"] = record.api_key.name if record.api_key else ""
    return row


@require_GET
@org_view()
def requests_log(request: HttpRequest, membership: Membership) -> HttpResponse:
    org = membership.org
    keys = list(ApiKey.objects.filter(org=org).defer("key_hash").order_by("-created_at"))
    form = RequestFilterForm(request.GET or None, keys=keys)
    filters = form.filters()
    paginator = Paginator(sel.request_log(org, filters), REQUESTS_PER_PAGE)
    page_obj = paginator.get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("org", None)
    context = page(
        request,
        membership,
        form=form,
        filters=filters,
        page_obj=page_obj,
        rows=[_display(r) for r in page_obj.object_list],
        query=query.urlencode(),
        # Live rows are only prepended on the first page: deeper pages are history.
        live=page_obj.number == 1 and not filters.request_id and filters.newest_first,
        sort_links=_sort_links(request, filters.sort),
        ws_path=f"/ws/requests/?org={org.pk}",
        requests_url=reverse("dashboard:requests"),
        csv_url=_csv_url(org.pk, filters),
    )
    return render(request, "dashboard/requests.html", context)


def _sort_links(request: HttpRequest, current: str) -> dict[str, dict[str, str]]:
    """Per sortable column: the URL that sorts by it (clicking the sorted column flips it; the
    first click sorts the way people usually want: newest, costliest, slowest) and its
    aria-sort. The other filters stay in the URL."""
    links: dict[str, dict[str, str]] = {}
    for name in sel.SORT_FIELDS:
        active = current.lstrip("-") == name
        descending = current.startswith("-")
        target = (name if descending else f"-{name}") if active else f"-{name}"
        query = request.GET.copy()
        query.pop("page", None)
        query["sort"] = target
        links[name] = {
            "url": f"?{query.urlencode()}",
            "aria": ("descending" if descending else "ascending") if active else "none",
            "arrow": ("↓" if descending else "↑") if active else "",
        }
    return links


def _csv_url(org_id: int, filters: sel.RequestFilters) -> str:
    """The management API's streamed export of the same filtered log (session auth works)."""
    params = {
        "key": filters.key_id or "",
        "model": filters.model,
        "status": filters.status,
        "request_id": filters.request_id,
        "since": filters.since.isoformat() if filters.since else "",
        "until": filters.until.isoformat() if filters.until else "",
    }
    query = urlencode({k: v for k, v in params.items() if v})
    return reverse("api-requests-csv", args=[org_id]) + (f"?{query}" if query else "")


@require_GET
@org_view()
def balance(request: HttpRequest, membership: Membership) -> HttpResponse:
    org = membership.org
    paginator = Paginator(sel.ledger_entries(org), LEDGER_PER_PAGE)
    page_obj = paginator.get_page(request.GET.get("page"))
    money = sel.balances(org)
    context = page(
        request,
        membership,
        balance_nano=money.ledger_nano,
        available_nano=money.available_nano,
        month_spend_nano=sel.month_to_date_spend_nano(org),
        pending_nano=money.unreconciled_nano,
        held_nano=money.held_nano,  # open holds of requests in flight (None: unavailable)
        totals=sel.ledger_totals(org),
        page_obj=page_obj,
    )
    return render(request, "dashboard/balance.html", context)


def request_detail_context(org: Any, request_id: str) -> dict[str, Any]:
    """One request's page: the row, its timeline, receipt and speed (dashboard and admin).
    Raises Http404 for an id the org does not have (another org's id included)."""
    row = log.find_request(org, request_id)
    if row is None:
        raise Http404("no such request")
    rec = log.receipt(org, row)
    return {
        "row": row,
        "display": _display(row),
        "receipt": rec,
        "timeline": log.timeline(row, rec),
        "tokens_per_second": log.output_tokens_per_second(row),
        "tokens": [
            ("input", row.input_tokens),
            ("cache read", row.cache_read_tokens),
            ("cache write 5m", row.cache_write_5m_tokens),
            ("cache write 1h", row.cache_write_1h_tokens),
            ("output", row.output_tokens),
            ("reasoning (part of output)", row.reasoning_tokens),
        ],
    }


@require_GET
@org_view()
def request_detail(request: HttpRequest, membership: Membership, request_id: str) -> HttpResponse:
    context = page(
        request,
        membership,
        requests_url=reverse("dashboard:requests"),
        **request_detail_context(membership.org, request_id),
    )
    return render(request, "dashboard/request_detail.html", context)
