"""Serializers for the management API, and the field types every part of it shares.

Money: out as USD decimal strings in their shortest exact form ("12.5", "0.000000001": nano-USD
precision, never a float, never exponent notation); in as a decimal (string or number) with at
most 9 decimals, turned into nano-USD.
Dates in query strings: ISO 8601 date or datetime, UTC unless an offset is given.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from accounts.models import ApiKey, ManagementKey
from core import money
from core.money import usd_to_nano

USD_DECIMALS = 9
# Far below the BigInteger ceiling (≈ 9.2e9 USD in nano), far above any sane cap.
MAX_USD = Decimal(1_000_000_000)
MAX_RPM = 2_147_483_647  # PositiveIntegerField's ceiling on every database
MAX_CONCURRENCY = MAX_RPM

USD_SCHEMA = {
    "type": "string",
    "format": "decimal",
    "pattern": r"^-?\d+(\.\d{1,9})?$",
    "example": "12.5",
    "description": (
        'USD as the shortest exact plain decimal string ("10", "0.125", "0.000000001"):'
        " nano-USD precision, never exponent notation."
    ),
}


def format_usd(nano: int) -> str:
    return money.usd_from_nano(nano)


@extend_schema_field(USD_SCHEMA)
class UsdField(serializers.Field):
    """Read-only: an integer nano-USD attribute rendered as a USD decimal string."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["read_only"] = True
        super().__init__(**kwargs)

    def to_representation(self, value: int) -> str:
        return format_usd(value)


class UsdInputField(serializers.DecimalField):
    """A non-negative USD amount with at most 9 decimals; validated data is nano-USD (int)."""

    default_error_messages = {
        **serializers.DecimalField.default_error_messages,
        "min_value": "must be ≥ 0",
        "max_value": "must be ≤ {max_value}",
        "max_decimal_places": "must have at most {max_decimal_places} decimal places",
    }

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", Decimal(0))
        kwargs.setdefault("max_value", MAX_USD)
        super().__init__(max_digits=None, decimal_places=USD_DECIMALS, **kwargs)

    def to_internal_value(self, data: Any) -> Decimal:
        if isinstance(data, bool):  # bool is an int: `true` must not mean one dollar
            self.fail("invalid")
        # A string is read as plain digits only (core/money.py): "1e3" is refused, not taken as
        # 1000. A JSON number arrives parsed (its text is gone): its exact decimal value is used.
        if isinstance(data, float):
            if not math.isfinite(data):
                self.fail("invalid")
            data = money.plain(Decimal(repr(data)))
        try:
            number = money.parse_amount(str(data))
        except money.MoneyInputError as exc:
            raise serializers.ValidationError(str(exc), code="invalid") from None
        if number.is_finite() and number < 0:
            self.fail("min_value", min_value=0)
        if number.is_finite() and number > MAX_USD:
            self.fail("max_value", max_value=MAX_USD)
        return super().to_internal_value(data)

    def run_validation(self, data: Any = serializers.empty) -> int | None:
        # Converted after the validators ran: they compare against USD bounds, not nano.
        value = super().run_validation(data)
        return None if value is None else usd_to_nano(value)

    def to_representation(self, value: int) -> str:  # type: ignore[override]
        return format_usd(value)


@extend_schema_field(
    {
        "type": "string",
        "example": "2025-01-31",
        "description": "ISO 8601 date or datetime; UTC unless an offset is given.",
    }
)
class DateOrDateTimeField(serializers.Field):
    """A bound of a time range from a query string.

    A bare date means the start of that day, or with `end_of_day` the start of the next one,
    so `since=2025-01-01&until=2025-01-31` covers all of January (`until` is exclusive).
    """

    default_error_messages = {
        "invalid": "expected an ISO 8601 date (2025-01-31) or datetime (2025-01-31T12:00:00Z)"
    }

    def __init__(self, *, end_of_day: bool = False, **kwargs: Any) -> None:
        self.end_of_day = end_of_day
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> datetime:
        text = str(data).strip()
        try:
            # Dates first: parse_datetime (fromisoformat) would take "2025-01-31" as midnight.
            day = parse_date(text) if _DATE_ONLY.fullmatch(text) else None
            moment = None if day else parse_datetime(text) or parse_datetime(_restore_plus(text))
        except ValueError:  # well-formed but impossible, e.g. month 13
            self.fail("invalid")
        if moment is None and day is None:
            self.fail("invalid")
        try:
            if moment is None:
                moment = datetime.combine(
                    day + timedelta(days=1) if self.end_of_day else day, time.min, tzinfo=UTC
                )
            # In UTC now: the database query converts anyway, and year 1/9999 edges overflow.
            return moment.replace(tzinfo=moment.tzinfo or UTC).astimezone(UTC)
        except OverflowError:
            self.fail("invalid")

    def to_representation(self, value: datetime | date) -> str:
        return value.isoformat()


_DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")


def _restore_plus(text: str) -> str:
    # An unencoded `+00:00` in a query string arrives as ` 00:00`.
    head, sep, tail = text.rpartition(" ")
    return f"{head}+{tail}" if sep and "T" in head and tail[:2].isdigit() else text


def validate_range(attrs: dict[str, Any]) -> dict[str, Any]:
    since, until = attrs.get("since"), attrs.get("until")
    if since is not None and until is not None and since >= until:
        raise serializers.ValidationError({"until": ["must be after since"]})
    return attrs


class StrictInputSerializer(serializers.Serializer):
    """Refuses fields it doesn't know: a typo like `spend_cap` must not be silently ignored."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, Mapping):
            writable = {name for name, field in self.fields.items() if not field.read_only}
            unknown = sorted(str(name) for name in data if name not in writable)
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)


# --- Organisations --------------------------------------------------------------------------


class OrgSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(read_only=True)
    role = serializers.ChoiceField(
        choices=["owner", "member"], read_only=True, help_text="The caller's role here."
    )
    created_at = serializers.DateTimeField(read_only=True)


# --- Inference keys ---------------------------------------------------------------------------

KEY_STATUSES = ["active", "revoked"]
API_KEY_STATUSES = ["active", "disabled", "expired", "revoked"]
CAP_PERIODS = ["month", "day", "total"]


def _status(key: ApiKey | ManagementKey) -> str:
    return "active" if key.revoked_at is None else "revoked"


class ApiKeyQuerySerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=KEY_STATUSES,
        required=False,
        allow_null=True,
        help_text="Only keys in this state (active = not revoked: disabled and expired keys "
        "are active keys that are refused until enabled or extended).",
    )


class ApiKeySerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(read_only=True)
    prefix = serializers.CharField(read_only=True, help_text="First characters of the key.")
    status = serializers.SerializerMethodField()
    rpm_limit = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="Requests per minute; null = the default."
    )
    max_concurrency = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="Requests in flight; null = the default."
    )
    spend_cap_usd = UsdField(
        source="spend_cap_nano",
        allow_null=True,
        help_text="Spend cap per `spend_cap_period`; null = none.",
    )
    spend_cap_period = serializers.ChoiceField(
        choices=CAP_PERIODS,
        read_only=True,
        help_text="What the cap counts: month (UTC calendar month), day (UTC day) or total.",
    )
    month_to_date_spend_usd = UsdField(source="month_spend_nano")
    period_spend_usd = UsdField(
        source="period_spend_nano",
        help_text="Spend in the current period of the cap (this UTC month, this UTC day, or "
        "all time): what the cap is compared with.",
    )
    allowed_models = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="Canonical model ids the key may call; empty = every model.",
    )
    allowed_ips = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="CIDRs the key may be used from; empty = anywhere.",
    )
    expires_at = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="Refused from this instant; null = never."
    )
    disabled = serializers.SerializerMethodField()
    disabled_at = serializers.DateTimeField(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(read_only=True)
    last_used_at = serializers.DateTimeField(read_only=True, allow_null=True)
    revoked_at = serializers.DateTimeField(read_only=True, allow_null=True)

    @extend_schema_field(
        serializers.ChoiceField(
            choices=API_KEY_STATUSES,
            help_text="revoked › disabled › expired › active: the first that applies.",
        )
    )
    def get_status(self, key: ApiKey) -> str:
        return key.state

    @extend_schema_field(serializers.BooleanField())
    def get_disabled(self, key: ApiKey) -> bool:
        return key.disabled_at is not None


class ApiKeyCreatedSerializer(ApiKeySerializer):
    secret = serializers.CharField(
        read_only=True, help_text="The full key. Shown only in this response; store it now."
    )


def _name_field(**kwargs: Any) -> serializers.CharField:
    return serializers.CharField(max_length=100, allow_blank=True, required=False, **kwargs)


def _rpm_field(**kwargs: Any) -> serializers.IntegerField:
    return serializers.IntegerField(
        min_value=1,
        max_value=MAX_RPM,
        allow_null=True,
        required=False,
        error_messages={"min_value": "must be ≥ 1", "max_value": "must be ≤ {max_value}"},
        help_text="Requests per minute; null = the default.",
        **kwargs,
    )


def _concurrency_field(**kwargs: Any) -> serializers.IntegerField:
    return serializers.IntegerField(
        min_value=1,
        max_value=MAX_CONCURRENCY,
        allow_null=True,
        required=False,
        error_messages={"min_value": "must be ≥ 1", "max_value": "must be ≤ {max_value}"},
        help_text="Requests in flight at once; null = the default.",
        **kwargs,
    )


def _cap_field(**kwargs: Any) -> UsdInputField:
    return UsdInputField(
        allow_null=True,
        required=False,
        help_text="Spend cap in USD per `spend_cap_period`; null = none.",
        **kwargs,
    )


def _period_field(**kwargs: Any) -> serializers.ChoiceField:
    return serializers.ChoiceField(
        choices=CAP_PERIODS,
        required=False,
        help_text="What the spend cap counts: month (UTC calendar month, the default), day "
        "(UTC day) or total; it resets on the period's boundary in UTC.",
        **kwargs,
    )


def _allowed_field(**kwargs: Any) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(max_length=200),
        allow_empty=True,
        allow_null=True,
        required=False,
        max_length=100,
        help_text="Model ids or aliases the key may call (stored as canonical ids); a request "
        "for another model gets 403 permission_error. Empty or null = every model.",
        **kwargs,
    )


def _ips_field(**kwargs: Any) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(max_length=64),
        allow_empty=True,
        allow_null=True,
        required=False,
        max_length=100,
        help_text="CIDRs (or single addresses) the key may be used from, e.g. "
        '["203.0.113.0/24", "2001:db8::/32"]; a request from elsewhere gets 403 '
        "(permission_error / permission_denied) naming its address. Empty or null = anywhere.",
        **kwargs,
    )


def _expiry_field(**kwargs: Any) -> serializers.DateTimeField:
    return serializers.DateTimeField(
        allow_null=True,
        required=False,
        help_text="ISO 8601 instant with a time zone, in the future; from then on the key gets "
        "401 saying it expired. null = never.",
        **kwargs,
    )


class ApiKeyCreateSerializer(StrictInputSerializer):
    name = _name_field(default="")
    rpm_limit = _rpm_field(default=None)
    max_concurrency = _concurrency_field(default=None)
    spend_cap_usd = _cap_field(default=None)
    spend_cap_period = _period_field(default="month")
    allowed_models = _allowed_field(default=None)
    allowed_ips = _ips_field(default=None)
    expires_at = _expiry_field(default=None)


class ApiKeyUpdateSerializer(StrictInputSerializer):
    """PATCH: absent fields keep their value; null clears a limit, the allow-list or the
    expiry."""

    name = _name_field()
    rpm_limit = _rpm_field()
    max_concurrency = _concurrency_field()
    spend_cap_usd = _cap_field()
    spend_cap_period = _period_field()
    allowed_models = _allowed_field()
    allowed_ips = _ips_field()
    expires_at = _expiry_field()
    disabled = serializers.BooleanField(
        required=False, help_text="true disables the key (401 until enabled again); false enables."
    )


# --- Management keys --------------------------------------------------------------------------


class ManagementKeySerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(read_only=True)
    prefix = serializers.CharField(read_only=True)
    status = serializers.SerializerMethodField()
    created_by = serializers.CharField(
        source="created_by.get_username", read_only=True, allow_null=True
    )
    created_at = serializers.DateTimeField(read_only=True)
    last_used_at = serializers.DateTimeField(read_only=True, allow_null=True)
    revoked_at = serializers.DateTimeField(read_only=True, allow_null=True)

    @extend_schema_field(serializers.ChoiceField(choices=KEY_STATUSES))
    def get_status(self, key: ManagementKey) -> str:
        return _status(key)


class ManagementKeyCreatedSerializer(ManagementKeySerializer):
    secret = serializers.CharField(
        read_only=True, help_text="The full management key. Shown only in this response."
    )


class ManagementKeyCreateSerializer(StrictInputSerializer):
    name = serializers.CharField(max_length=100, allow_blank=True, required=False, default="")
