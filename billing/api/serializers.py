"""Query-parameter and response serializers for usage, the request log, balance and ledger."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from accounts import keys
from accounts.api.serializers import DateOrDateTimeField, UsdField, validate_range
from billing.api.selectors import GROUP_BY_CHOICES
from billing.models import LedgerEntry, RequestLog
from billing.selectors import itemised_cost
from catalog.pricing import PRICE_KINDS


class RangeQuerySerializer(serializers.Serializer):
    since = DateOrDateTimeField(
        required=False, allow_null=True, help_text="Inclusive; ISO 8601 date or datetime (UTC)."
    )
    until = DateOrDateTimeField(
        end_of_day=True,
        required=False,
        allow_null=True,
        help_text="Exclusive datetime, or a date whose whole day is included.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return validate_range(attrs)


class UsageQuerySerializer(RangeQuerySerializer):
    group_by = serializers.ChoiceField(
        choices=GROUP_BY_CHOICES, required=False, allow_null=True, help_text="Default: day."
    )
    key_id = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        help_text="Only this key's usage (with group_by=day: its spend per day; its cap is on "
        "GET …/keys/{key_id}).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        attrs["group_by"] = attrs.get("group_by") or "day"
        return attrs


_KEY_ID = re.compile(r"^\d{1,18}$")


class RequestLogQuerySerializer(RangeQuerySerializer):
    key = serializers.CharField(
        required=False,
        allow_null=True,
        max_length=100,
        help_text="A key id, or a key prefix as listed (ezat_sk_xxxxxx).",
    )
    model = serializers.CharField(
        required=False, allow_null=True, max_length=128, help_text="Model id or alias sent."
    )
    status = serializers.ChoiceField(
        choices=RequestLog.Status.values, required=False, allow_null=True
    )
    http_status = serializers.IntegerField(
        required=False, allow_null=True, min_value=100, max_value=599, help_text="e.g. 429"
    )
    request_id = serializers.CharField(
        required=False,
        allow_null=True,
        max_length=160,
        help_text="The full request id, or a prefix of at least 8 characters.",
    )

    def validate_key(self, value: str | None) -> dict[str, Any] | None:
        if value is None:
            return None
        if _KEY_ID.match(value):
            return {"key_id": int(value)}
        if value.startswith(keys.PREFIX) and len(value) <= keys.DISPLAY_LENGTH:
            return {"key_prefix": value}
        if value.startswith(keys.PREFIX):
            # Looks like a full secret: refuse it so secrets don't end up in access logs by habit.
            raise serializers.ValidationError("pass the key's id or prefix, never its secret")
        raise serializers.ValidationError("expected a key id or a key prefix (ezat_sk_…)")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        key = attrs.pop("key", None) or {}
        return {**{k: v for k, v in attrs.items() if v is not None}, **key}


class LedgerQuerySerializer(RangeQuerySerializer):
    kind = serializers.ChoiceField(choices=LedgerEntry.Kind.values, required=False, allow_null=True)


# --- Responses --------------------------------------------------------------------------------


class TokensSerializer(serializers.Serializer):
    """Token counts by kind. `reasoning` is part of `output`, not billed on top of it."""

    input = serializers.IntegerField(source="input_tokens", read_only=True)
    output = serializers.IntegerField(source="output_tokens", read_only=True)
    cache_read = serializers.IntegerField(source="cache_read_tokens", read_only=True)
    cache_write_5m = serializers.IntegerField(source="cache_write_5m_tokens", read_only=True)
    cache_write_1h = serializers.IntegerField(source="cache_write_1h_tokens", read_only=True)
    reasoning = serializers.IntegerField(source="reasoning_tokens", read_only=True)


class UsageTotalsSerializer(serializers.Serializer):
    requests = serializers.IntegerField(read_only=True)
    tokens = TokensSerializer(source="*", read_only=True)
    cost_usd = UsdField(source="cost_nano")


class UsageRowSerializer(UsageTotalsSerializer):
    group = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The UTC day (YYYY-MM-DD), the model id, or the key id; null for usage of "
        "deleted keys.",
    )
    key_id = serializers.IntegerField(read_only=True, allow_null=True, required=False)
    key_prefix = serializers.CharField(read_only=True, allow_null=True, required=False)
    key_name = serializers.CharField(read_only=True, allow_null=True, required=False)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        if "key_id" not in instance:  # only rows grouped by key describe a key
            for name in ("key_id", "key_prefix", "key_name"):
                data.pop(name, None)
        return data


class UsageSummarySerializer(serializers.Serializer):
    group_by = serializers.ChoiceField(choices=GROUP_BY_CHOICES, read_only=True)
    since = serializers.DateTimeField(read_only=True, allow_null=True)
    until = serializers.DateTimeField(read_only=True, allow_null=True)
    totals = UsageTotalsSerializer(read_only=True)
    rows = UsageRowSerializer(many=True, read_only=True)


class CostItemSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=list(PRICE_KINDS), read_only=True)
    tokens = serializers.IntegerField(read_only=True)
    usd_per_mtok = serializers.CharField(
        read_only=True, help_text='The price applied, USD per million tokens ("0.125").'
    )
    usd = serializers.CharField(
        read_only=True, help_text="tokens × price, exact (up to 12 decimals), before rounding."
    )


class ItemisedCostSerializer(serializers.Serializer):
    price_version = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="The catalog price version that billed it."
    )
    up_to_prompt_tokens = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="Upper bound of the price tier applied; null for the last (unbounded) tier.",
    )
    prompt_tokens = serializers.IntegerField(
        read_only=True, help_text="Input + cache-read + cache-write tokens: selects the tier."
    )
    items = CostItemSerializer(many=True, read_only=True)
    total_usd = UsdField(source="total_nano", help_text="Σ items rounded once, half up.")


class LedgerEntrySerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    time = serializers.DateTimeField(source="created_at", read_only=True)
    kind = serializers.ChoiceField(choices=LedgerEntry.Kind.values, read_only=True)
    amount_usd = UsdField(source="amount_nano", help_text="Signed: credits +, usage −.")
    reference = serializers.CharField(read_only=True)
    memo = serializers.CharField(read_only=True)


class BalanceSerializer(serializers.Serializer):
    balance_usd = UsdField(
        source="balance_nano", help_text="Ledger balance minus usage not yet reconciled."
    )
    ledger_balance_usd = UsdField(source="ledger_balance_nano")
    unreconciled_usage_usd = UsdField(source="unreconciled_usage_nano")
    month_to_date_spend_usd = UsdField(
        source="month_to_date_spend_nano", help_text="Usage since month_start (UTC)."
    )
    month_start = serializers.DateTimeField(read_only=True)
    as_of = serializers.DateTimeField(read_only=True)


# --- The request log (every authenticated request) -------------------------------------------


class RequestLogEntrySerializer(serializers.Serializer):
    """One request as its caller saw it: answered, refused or failed."""

    time = serializers.DateTimeField(source="created_at", read_only=True, help_text="Ended.")
    started_at = serializers.DateTimeField(read_only=True)
    request_id = serializers.CharField(read_only=True)
    status = serializers.ChoiceField(
        choices=RequestLog.Status.values,
        read_only=True,
        help_text="ok, client_disconnected or error.",
    )
    http_status = serializers.IntegerField(read_only=True)
    error_type = serializers.CharField(read_only=True, help_text="Blank unless status is error.")
    error_message = serializers.CharField(read_only=True, help_text="As the client saw it.")
    api = serializers.CharField(
        read_only=True, help_text="messages, chat, responses, count_tokens or input_tokens"
    )
    stream = serializers.BooleanField(read_only=True)
    model_name = serializers.CharField(read_only=True, help_text="As the caller sent it.")
    model = serializers.CharField(
        source="model_id", read_only=True, help_text="Canonical id of the model that answered."
    )
    requested_model = serializers.CharField(read_only=True, help_text="Canonical id asked for.")
    key_id = serializers.IntegerField(source="api_key_id", read_only=True, allow_null=True)
    key_prefix = serializers.CharField(source="api_key.prefix", read_only=True, allow_null=True)
    deployment = serializers.CharField(read_only=True)
    ttft_ms = serializers.IntegerField(read_only=True, allow_null=True)
    latency_ms = serializers.IntegerField(read_only=True)
    attempts = serializers.ListField(
        child=serializers.DictField(),
        read_only=True,
        help_text="Each upstream attempt: deployment, outcome, status, ttfb_ms (time to headers).",
    )
    finish_reason = serializers.CharField(read_only=True)
    tokens = TokensSerializer(source="*", read_only=True)
    cost_usd = UsdField(source="cost_nano", help_text="0 when not billed.")
    cost = serializers.SerializerMethodField(help_text="The cost, itemised; null when unbilled.")
    output_exact = serializers.BooleanField(
        read_only=True, help_text="False when output tokens were estimated (e.g. a disconnect)."
    )
    count = serializers.IntegerField(
        read_only=True, help_text="> 1: refusals of one key and reason in one second, collapsed."
    )

    @extend_schema_field(ItemisedCostSerializer(allow_null=True))
    def get_cost(self, row: RequestLog) -> dict[str, Any] | None:
        usage = (self.context.get("usage") or {}).get(row.request_id)
        return ItemisedCostSerializer(itemised_cost(usage)).data if usage is not None else None


class LedgerRefSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    reference = serializers.CharField(read_only=True)
    amount_usd = UsdField(source="amount_nano")
    time = serializers.DateTimeField(source="created_at", read_only=True)


class ReceiptSerializer(serializers.Serializer):
    billed = serializers.BooleanField(read_only=True)
    cost_usd = UsdField(source="cost_nano")
    cost = ItemisedCostSerializer(source="itemised", read_only=True, allow_null=True)
    hold_usd = UsdField(source="hold_nano", help_text="The worst case held at admission.")
    released_usd = UsdField(source="released_nano", help_text="Given back at settlement.")
    ledger_entry = LedgerRefSerializer(
        read_only=True, allow_null=True, help_text="The debit that charged it; null until then."
    )
    recorded_at = serializers.DateTimeField(read_only=True, allow_null=True)
    reconciled_at = serializers.DateTimeField(read_only=True, allow_null=True)


class TimelineStepSerializer(serializers.Serializer):
    step = serializers.CharField(read_only=True)
    at = serializers.DateTimeField(read_only=True, allow_null=True)
    ms = serializers.IntegerField(read_only=True, allow_null=True, help_text="From receipt.")
    detail = serializers.CharField(read_only=True)


class RequestDetailSerializer(RequestLogEntrySerializer):
    output_tokens_per_second = serializers.FloatField(read_only=True, allow_null=True)
    receipt = ReceiptSerializer(read_only=True)
    timeline = TimelineStepSerializer(many=True, read_only=True)


class CacheQuerySerializer(RangeQuerySerializer):
    group_by = serializers.ChoiceField(
        choices=["model", "key"], required=False, allow_null=True, help_text="Default: model."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        attrs["group_by"] = attrs.get("group_by") or "model"
        return attrs


class CacheFiguresSerializer(serializers.Serializer):
    group = serializers.CharField(
        read_only=True, allow_null=True, help_text="Canonical model id, or key id (null: deleted)."
    )
    label = serializers.CharField(read_only=True)
    input_tokens = serializers.IntegerField(
        read_only=True, help_text="All input: uncached + cache read + cache write."
    )
    cache_read_tokens = serializers.IntegerField(read_only=True)
    hit_rate = serializers.DecimalField(
        max_digits=7,
        decimal_places=4,
        read_only=True,
        allow_null=True,
        help_text="cache_read_tokens ÷ input_tokens; null without input.",
    )
    saved_usd = UsdField(
        source="saved_nano",
        help_text="The cache-read tokens at the input price, minus what they cost.",
    )


class CacheReportSerializer(serializers.Serializer):
    group_by = serializers.CharField(read_only=True)
    rows = CacheFiguresSerializer(many=True, read_only=True)
    total = CacheFiguresSerializer(read_only=True)
