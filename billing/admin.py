"""Operator console for usage records and the ledger: both are facts, so both are read-only.

Corrections are new ledger rows (credits via the Organization "Grant credit" action), never
edits; usage records are written once by the gateway with the prices they were billed at.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from billing import org_admin  # noqa: F401  (registers the Organization admin)
from billing.admin_filters import KeyFilter, ModelFilter, OrgFilter
from billing.models import LedgerEntry, RequestLog, UsageRecord
from billing.selectors import itemised_cost
from core import money
from core.templatetags.dashboard import format_usd


class ReadOnlyAdmin(admin.ModelAdmin):
    """View permission only: no add, change or delete, whoever is signed in."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = (
        "request_id",
        "created_at",
        "org",
        "key_prefix",
        "model_id",
        "status",
        "tokens_in_out",
        "cost_usd",
        "reconciled",
    )
    list_filter = (OrgFilter, ModelFilter, KeyFilter, "status", "output_exact", "api", "stream")
    list_select_related = ("org", "api_key")
    # "=" makes request-id search an exact (indexed) lookup.
    search_fields = ("=request_id", "org__name", "model_id")
    date_hierarchy = "created_at"
    show_full_result_count = False  # COUNT(*) over all usage on every page load is wasteful
    readonly_fields = ("cost_usd", "itemised_cost", "key_prefix", "reconciled", "tokens_in_out")
    exclude = ("api_key",)  # shown as key_prefix; the FK widget would list every key

    def get_queryset(self, request: HttpRequest) -> QuerySet[UsageRecord]:
        return super().get_queryset(request).defer("api_key__key_hash")

    @admin.display(description="Cost", ordering="cost_nano")
    def cost_usd(self, obj: UsageRecord) -> str:
        return money.usd_cost(obj.cost_nano)  # a per-request cost: the log's 6 decimals

    @admin.display(description="Itemised cost")
    def itemised_cost(self, obj: UsageRecord) -> str:
        cost = itemised_cost(obj)
        bound = cost["up_to_prompt_tokens"]
        tier = (
            f"tier up to {bound:,} prompt tokens" if bound is not None else "tier: any prompt size"
        )
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (item["kind"], f"{item['tokens']:,}", f"${item['usd_per_mtok']}", item["usd_text"])
                for item in cost["items"]
            ),
        )
        return format_html(
            "<p>Prompt of {} tokens → {}; price version {}.</p>"
            "<table><thead><tr><th>kind</th><th>tokens</th><th>USD per million tokens</th>"
            "<th>Cost</th></tr></thead><tbody>{}</tbody></table>"
            "<p>Total billed (rounded once to the nano-dollar): {}</p>",
            f"{cost['prompt_tokens']:,}",
            tier,
            cost["price_version"] if cost["price_version"] is not None else "(before versions)",
            rows,
            money.usd_cost(cost["total_nano"]),
        )

    @admin.display(description="Tokens in / out")
    def tokens_in_out(self, obj: UsageRecord) -> str:
        # Input includes cache reads and writes; the split is on the record's detail page.
        total_in = obj.input_tokens + obj.cache_read_tokens + obj.cache_write_tokens
        return f"{total_in:,} / {obj.output_tokens:,}"

    @admin.display(description="Key")
    def key_prefix(self, obj: UsageRecord) -> str:
        return f"{obj.api_key.prefix}…" if obj.api_key_id and obj.api_key else "—"

    @admin.display(description="Reconciled", boolean=True)
    def reconciled(self, obj: UsageRecord) -> bool:
        return obj.ledger_entry_id is not None


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "org", "kind", "amount_usd", "memo", "reference", "created_by")
    list_filter = ("kind",)
    list_select_related = ("org",)
    search_fields = ("=reference", "org__name", "memo")
    date_hierarchy = "created_at"
    show_full_result_count = False
    readonly_fields = ("amount_usd",)

    @admin.display(description="Amount", ordering="amount_nano")
    def amount_usd(self, obj: LedgerEntry) -> SafeString:
        # One unbreakable piece: the minus sign never wraps onto a line of its own.
        return format_html('<span class="amount">{}</span>', format_usd(obj.amount_nano, sign=True))


@admin.register(RequestLog)
class RequestLogAdmin(ReadOnlyAdmin):
    """Every authenticated request (answered, refused, failed); its page is the dashboard's
    request page: timeline, tokens, itemised receipt, the error as the client saw it."""

    list_display = (
        "request_id",
        "created_at",
        "org",
        "model_id",
        "status",
        "http_status",
        "error_type",
        "count",
        "cost_usd",
        "latency_ms",
    )
    list_filter = (OrgFilter, ModelFilter, KeyFilter, "status", "http_status", "api", "stream")
    list_select_related = ("org", "api_key")
    search_fields = ("=request_id", "org__name", "model_id")
    date_hierarchy = "created_at"
    show_full_result_count = False
    fields = ("request_page",)
    readonly_fields = ("request_page",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[RequestLog]:
        return super().get_queryset(request).defer("api_key__key_hash")

    @admin.display(description="Cost")
    def cost_usd(self, obj: RequestLog) -> str:
        return money.usd_cost(obj.cost_nano)

    @admin.display(description="Request")
    def request_page(self, obj: RequestLog) -> SafeString:
        from billing.views import request_detail_context

        context = request_detail_context(obj.org, obj.request_id)
        # The template escapes every value; the result is the rendered, escaped page part.
        return mark_safe(render_to_string("dashboard/_request_detail_body.html", context))
