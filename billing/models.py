"""Usage records (one per billable request) and the append-only ledger."""

from __future__ import annotations

from django.db import models

from accounts.models import ApiKey, Organization

# The API label of a usage record or request-log row (gateway/outcome.py and the handlers'
# Exchange(api=…)). It was 16, and `responses_input_tokens` (22) made PostgreSQL refuse the row,
# and with it every other row of its batch (issue 31).
API_MAX_LENGTH = 32


class AppendOnlyError(Exception):
    """Ledger rows are facts; corrections are new rows, never edits."""


class LedgerEntry(models.Model):
    class Kind(models.TextChoices):
        CREDIT = "credit", "Credit"
        USAGE = "usage", "Usage debit"
        ADJUSTMENT = "adjustment", "Adjustment"

    org = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="ledger_entries")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    # Signed: credits are positive, usage debits negative. Nano-USD (1e-9 USD).
    amount_nano = models.BigIntegerField()
    # Makes every write idempotent: a retried grant or reconciliation collides here.
    reference = models.CharField(max_length=200, unique=True)
    memo = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    created_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "ledger entries"

    def __str__(self) -> str:
        return f"{self.kind} {self.amount_nano} ({self.reference})"

    def save(self, *args: object, **kwargs: object) -> None:
        if self.pk is not None:
            raise AppendOnlyError("ledger entries cannot be changed")
        super().save(*args, **kwargs)

    def delete(self, *args: object, **kwargs: object) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("ledger entries cannot be deleted")


class UsageRecord(models.Model):
    """One billable request. Cost is computed once, when written, from the prices it keeps."""

    class Status(models.TextChoices):
        OK = "ok", "Completed"
        CLIENT_DISCONNECTED = "client_disconnected", "Client disconnected"
        # The upstream failed after the first token (an error event, a reset, a broken frame, a
        # timeout): the output produced until then is billed, the client got an error.
        STREAM_FAILED = "stream_failed", "Stream failed (partial)"

    request_id = models.CharField(max_length=160, unique=True)
    # No index of its own: `usage_org_created` (org first) serves every org filter (0008).
    org = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="usage_records", db_index=False
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, on_delete=models.SET_NULL, related_name="usage_records"
    )
    # "messages", "chat", "responses", …: the longest label is 22 (responses_input_tokens); 32
    # leaves room for new APIs (tests/billing/test_request_log_sizes.py checks every label).
    api = models.CharField(max_length=API_MAX_LENGTH)
    stream = models.BooleanField(default=False)
    # The model that answered. Unindexed: it is only filtered within an org's window (0008).
    model_id = models.CharField(max_length=128)
    model_name = models.CharField(max_length=128)  # as the caller sent it
    # The canonical id of the model asked for (ezat/auto for the auto model): differs from
    # model_id when a fallback answered. Blank on records written before fallbacks existed.
    requested_model = models.CharField(max_length=128, blank=True, default="")
    deployment = models.CharField(max_length=100, blank=True)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_5m_tokens = models.BigIntegerField(default=0)
    cache_write_1h_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    cost_nano = models.BigIntegerField()
    # The price tier cost_nano was computed at: {"upToPromptTokens", "input", "output",
    # "cacheRead", "cacheWrite5m", "cacheWrite1h"} (USD per million tokens, plain decimals).
    prices = models.JSONField(help_text="The price tier applied (USD per million tokens)")
    # The catalog PriceVersion it belongs to (no foreign key: usage is a billing fact and must
    # outlive any catalog edit; null for records written before price versions existed).
    price_version = models.BigIntegerField(null=True, blank=True)
    output_exact = models.BooleanField(default=True)
    status = models.CharField(max_length=24, choices=Status.choices, default=Status.OK)
    attempts = models.JSONField(default=list)
    latency_ms = models.PositiveIntegerField(default=0)
    ttft_ms = models.PositiveIntegerField(null=True)
    started_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    ledger_entry = models.ForeignKey(
        LedgerEntry, null=True, blank=True, on_delete=models.PROTECT, related_name="usage_records"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["org", "-created_at"], name="usage_org_created"),
            models.Index(
                fields=["id"],
                name="usage_unreconciled",
                condition=models.Q(ledger_entry__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return self.request_id

    @property
    def cache_write_tokens(self) -> int:
        return self.cache_write_5m_tokens + self.cache_write_1h_tokens


class RequestLog(models.Model):
    """One row per authenticated request, answered, refused or failed: what the caller saw.

    A separate table rather than more usage records, joined to `UsageRecord` by `request_id`:
    usage records are the billing fact (unique request id, never deleted, reconciled into the
    ledger), while this log also holds requests that cost nothing (refusals, upstream failures)
    and is retention-limited (EZAT_REQUEST_LOG_RETENTION_DAYS). Keeping them apart means a
    retention delete can never touch a billed fact, and a flood of refusals never slows the
    reconciler's scans. Tokens and cost are copied here (zero when unbilled) so the log lists and
    exports without a join; the receipt reads the usage record itself.

    Refusals (4xx before any upstream attempt) of one key and reason within one second collapse
    into one row with `count` > 1: a flood of 429s is one row per second, not one per request.
    """

    class Status(models.TextChoices):
        OK = "ok", "Completed"
        CLIENT_DISCONNECTED = "client_disconnected", "Client disconnected"
        ERROR = "error", "Error"

    request_id = models.CharField(max_length=160)
    # No index of its own: `reqlog_org_created` (org first) serves every org filter (0008).
    org = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="request_logs", db_index=False
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, on_delete=models.SET_NULL, related_name="request_logs"
    )
    # messages, chat, responses, count_tokens, responses_input_tokens, input_tokens, models, other
    api = models.CharField(max_length=API_MAX_LENGTH)
    stream = models.BooleanField(default=False)
    model_name = models.CharField(max_length=128, blank=True)  # as the caller sent it
    model_id = models.CharField(max_length=128, blank=True)  # canonical: the one that answered
    requested_model = models.CharField(max_length=128, blank=True)  # canonical id asked for
    deployment = models.CharField(max_length=100, blank=True)
    status = models.CharField(max_length=24, choices=Status.choices)
    http_status = models.PositiveSmallIntegerField()
    error_type = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)
    finish_reason = models.CharField(max_length=32, blank=True)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_5m_tokens = models.BigIntegerField(default=0)
    cache_write_1h_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    cost_nano = models.BigIntegerField(default=0)
    output_exact = models.BooleanField(default=True)  # False: output estimated (disconnect)
    hold_nano = models.BigIntegerField(default=0)  # the worst case held at admission
    attempts = models.JSONField(default=list)
    admitted_ms = models.PositiveIntegerField(null=True)  # received → admitted
    ttft_ms = models.PositiveIntegerField(null=True)
    latency_ms = models.PositiveIntegerField(default=0)
    count = models.PositiveIntegerField(default=1)  # > 1: collapsed refusals (same second)
    started_at = models.DateTimeField()
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["org", "-created_at"], name="reqlog_org_created"),
            models.Index(fields=["org", "status", "-created_at"], name="reqlog_org_status"),
            # Request-id prefix search (LIKE 'abc%'); equality uses the unique index below.
            models.Index(
                fields=["request_id"],
                name="reqlog_request_prefix",
                opclasses=["varchar_pattern_ops"],
            ),
        ]
        constraints = [
            # Each request is written once: a batch retried after a lost connection inserts
            # nothing twice (the writer's INSERT is ON CONFLICT DO NOTHING). The start time is
            # part of the key because a caller may reuse its own x-request-id for another
            # request, which is a second row, not a duplicate (usage records tell the two apart
            # the same way, billing/recorder.py `_already_stored`). A collapsed refusal row
            # carries the request id and start of the first refusal it counts.
            models.UniqueConstraint(
                fields=["request_id", "started_at"], name="reqlog_request_once"
            ),
        ]

    def __str__(self) -> str:
        return self.request_id

    @property
    def cache_write_tokens(self) -> int:
        return self.cache_write_5m_tokens + self.cache_write_1h_tokens
