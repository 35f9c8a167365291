"""Prometheus metrics for the gateway (exposed by Django at /metrics, see ezat/health.py).

Label sets are bounded: the API (a handful), the canonical model (the catalog), the HTTP status
and its class, the error type (the fixed set of GatewayError types) and deployment names. An org
label is unbounded with many tenants, so per-org series exist only with EZAT_METRICS_ORG_LABELS.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter(
    "ezat_requests_total",
    "API requests by api, canonical model, HTTP status (and class) and error type",
    ["api", "model", "status", "status_class", "error_type"],
)
ORG_REQUESTS = Counter(
    "ezat_org_requests_total",
    "API requests per org and status class (only with EZAT_METRICS_ORG_LABELS)",
    ["org", "status_class"],
)
UNAUTHENTICATED = Counter(
    "ezat_unauthenticated_requests_total", "Requests refused for a missing or wrong key", ["api"]
)
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
TOKENS = Counter(
    "ezat_tokens_total", "Tokens billed, by class and canonical model", ["model", "kind"]
)
COST = Counter("ezat_cost_nano_usd_total", "Cost billed in nano-USD, by canonical model", ["model"])
IN_FLIGHT = Gauge("ezat_requests_in_flight", "API requests being handled now")
OPEN_STREAMS = Gauge("ezat_open_streams", "Streams past their first token, not yet ended")
FIRST_TOKEN_GATE_TIMEOUTS = Counter(
    "ezat_first_token_gate_timeouts_total",
    "Times a stream's later events stopped waiting for other streams' first tokens (MAX_WAIT)",
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
LIMITER_DECISIONS = Counter(
    "ezat_limiter_decisions_total",
    "Admission decisions (admitted, rate_limited, insufficient_funds, capacity, unavailable)",
    ["decision"],
)

_TOKEN_KINDS = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h", "reasoning")


# Label children by their values: `labels()` validates and takes a lock on every call, and the
# hot path asks for ~8 children per request (issue 22's profile). Children are never removed,
# so a child once made is the one `labels()` would return; the label sets are small and bounded
# (APIs, models, statuses, deployments).
_CHILDREN: dict[tuple[object, ...], Any] = {}


def child(metric: Any, *values: str) -> Any:
    """`metric.labels(*values)`, cached."""
    key = (metric, *values)
    found = _CHILDREN.get(key)
    if found is None:
        found = _CHILDREN[key] = metric.labels(*values)
    return found


def observe_request(
    *,
    api: str,
    model: str,
    http_status: int,
    error_type: str,
    seconds: float,
    ttft_ms: int | None,
    org_id: int | None,
) -> None:
    status_class = f"{http_status // 100}xx"
    child(REQUESTS, api, model or "unknown", str(http_status), status_class, error_type).inc()
    child(LATENCY, api).observe(seconds)
    if ttft_ms is not None:
        child(TTFT, api).observe(ttft_ms / 1000)
    if http_status == 401:
        UNAUTHENTICATED.labels(api).inc()
    if org_id is not None:
        from django.conf import settings

        if settings.EZAT_METRICS_ORG_LABELS:
            ORG_REQUESTS.labels(str(org_id), status_class).inc()


def observe_usage(model: str, tokens: object, cost_nano: int) -> None:
    """Tokens by class and cost of one recorded usage record."""
    for kind in _TOKEN_KINDS:
        count = getattr(tokens, kind)
        if count:
            child(TOKENS, model, kind).inc(count)
    if cost_nano:
        child(COST, model).inc(cost_nano)
