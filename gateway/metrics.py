"""Prometheus metrics for the gateway (exposed by Django at /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

REQUESTS = Counter("ezat_requests_total", "API requests", ["api", "model", "status"])
LATENCY = Histogram(
    "ezat_request_seconds",
    "Time to the last byte",
    ["api"],
    buckets=(0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 180, 600),
)
TTFT = Histogram(
    "ezat_time_to_first_token_seconds",
    "Time to the first content event (streams)",
    ["api"],
    buckets=(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180),
)
UPSTREAM_ATTEMPTS = Counter(
    "ezat_upstream_attempts_total", "Attempts per deployment and outcome", ["deployment", "outcome"]
)
FAILOVERS = Counter("ezat_failovers_total", "Requests that moved to another deployment")
USAGE_RECORD_FAILURES = Counter(
    "ezat_usage_record_failures_total", "Usage records that could not be written"
)
SIDE_EFFECT_FAILURES = Counter(
    "ezat_side_effect_failures_total", "Best-effort side effects that failed", ["what"]
)
MODEL_FALLBACKS = Counter(
    "ezat_model_fallbacks_total",
    "Times a request moved on to another model of its chain (before its first token)",
    ["requested", "model"],
)
PREFIX_FALLBACKS = Counter(
    "ezat_prefix_fallbacks_total",
    "Displaced conversations by what chose their deployment (session, prefix or none)",
    ["chosen_by"],
)
