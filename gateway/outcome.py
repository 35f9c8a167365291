"""The end of every API request, however it ended: its metrics, its JSON log line, and for an
authenticated request its request-log row (billing/request_log.py).

Called once per request by `guarded` (gateway/handlers/common.py) and by the app for paths no
handler serves. Unauthenticated requests (no key, a wrong key) are counted and logged but belong
to no org, so they get no row. Everything here is in memory: the row goes to the usage writer's
queue without a wait, so a failed request costs no more to record than a successful one.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
from django.conf import settings
from django.utils import timezone

from gateway import metrics
from gateway.errors import GatewayError

if TYPE_CHECKING:
    from accounts.keycache import KeyInfo
    from gateway.exchange import Exchange
    from gateway.http import ApiRequest

logger = logging.getLogger("gateway.request")

# The API of each served path (a path no handler serves is "other").
APIS: dict[str, str] = {
    "/v1/messages": "messages",
    "/v1/messages/count_tokens": "count_tokens",
    "/openai/v1/chat/completions": "chat",
    "/openai/v1/responses": "responses",
    "/openai/v1/responses/input_tokens": "input_tokens",
}
# A body larger than this is not parsed again just to name the model of a refusal.
_MODEL_PEEK_BYTES = 1 << 20


def api_of(path: str) -> str:
    api = APIS.get(path.rstrip("/"))
    if api is not None:
        return api
    if path.startswith("/openai/v1/responses/"):
        return "responses"
    if path.startswith(("/v1/models", "/openai/v1/models")):
        return "models"
    return "other"


def status_class(status: int) -> str:
    return f"{status // 100}xx"


def _model_sent(request: ApiRequest) -> str:
    """The model the caller named, from the raw body (refusals before an exchange existed)."""
    body = request.body
    if not body or len(body) > _MODEL_PEEK_BYTES:
        return ""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    model = parsed.get("model") if isinstance(parsed, dict) else None
    return model[:128] if isinstance(model, str) else ""


def _canonical(name: str) -> str:
    """The canonical id of a model name from the loaded catalog ("" if unknown)."""
    from catalog.snapshot import holder

    snap = holder._snapshot  # the snapshot already loaded: never a load on an error path
    if not name or snap is None:
        return ""
    model = snap.resolve(name)
    return model.id if model is not None else ""


def finish(
    request: ApiRequest,
    *,
    http_status: int,
    exchange: Exchange | None = None,
    error: GatewayError | None = None,
    started: float | None = None,
) -> None:
    """Count, log and (authenticated) queue the request-log row of one finished request."""
    key: KeyInfo | None = request.key
    api = exchange.api if exchange is not None else api_of(request.path)
    if exchange is not None:
        if exchange.http_status is not None:
            http_status = exchange.http_status
        error = exchange.error or error
        model_sent = exchange.sent_name
        model_id = exchange.model.id
        requested = exchange.requested_id
        elapsed = time.perf_counter() - exchange.t0
        t_start = exchange.started_at
    else:
        model_sent = _model_sent(request)
        model_id = requested = _canonical(model_sent)
        elapsed = time.perf_counter() - (started if started is not None else time.perf_counter())
        t_start = None
    if http_status == 499:
        status = "client_disconnected"
    elif http_status >= 400 or error is not None:
        status = "error"
    else:
        status = "ok"
    error_type = error.type if error is not None else ""
    latency_ms = int(elapsed * 1000)
    metrics.observe_request(
        api=api,
        model=model_id,
        http_status=http_status,
        error_type=error_type,
        seconds=elapsed,
        ttft_ms=exchange.ttft_ms if exchange is not None else None,
        org_id=key.org_id if key is not None else None,
    )
    fields = _fields(
        request, key, exchange, api, model_sent, model_id, requested, status, http_status, error
    )
    fields["latency_ms"] = latency_ms
    if logger.isEnabledFor(logging.INFO):
        logger.info("request", extra=_log_extra(fields, key))
    if key is None or not settings.EZAT_REQUEST_LOG:
        return  # unauthenticated: no org's log (or the log is off)
    fields["started_at"] = t_start or _started_at(latency_ms)
    fields["created_at"] = timezone.now()
    from billing.recorder import writer

    # Refused before any upstream attempt: may be folded into a row of the same second.
    refusal = (
        status == "error"
        and 400 <= http_status < 500
        and not any("deployment" in a for a in fields["attempts"])
    )
    if writer.submit_log(fields, refusal=refusal):
        _publish_live(fields, key)


def _publish_live(fields: dict[str, Any], key: KeyInfo) -> None:
    """The dashboard's live request feed gets every row the log gets, errors included
    (coalesced and sent in the background, billing/live.py). A refusal folded into a row of
    the same second is not sent again: the feed shows the row once, its count on reload."""
    from billing.live import feed, row_from_log

    feed.publish(fields["org_id"], row_from_log(fields, key_prefix=key.prefix))


def _started_at(latency_ms: int) -> datetime:
    return datetime.fromtimestamp(time.time() - latency_ms / 1000, tz=UTC)


def _fields(
    request: ApiRequest,
    key: KeyInfo | None,
    exchange: Exchange | None,
    api: str,
    model_sent: str,
    model_id: str,
    requested: str,
    status: str,
    http_status: int,
    error: GatewayError | None,
) -> dict[str, Any]:
    from billing import request_log

    tokens = exchange.tokens if exchange is not None else None
    return {
        "request_id": request.request_id,
        "org_id": key.org_id if key is not None else None,
        "api_key_id": key.id if key is not None else None,
        "api": api,
        "stream": exchange.stream if exchange is not None else False,
        "model_name": model_sent[:128],
        "model_id": model_id[:128],
        "requested_model": requested[:128],
        "deployment": (
            exchange.route.deployment.name if exchange is not None and exchange.route else ""
        ),
        "status": status,
        "http_status": http_status,
        "error_type": (error.type or "")[:64] if error is not None else "",
        "error_message": error.message[: request_log.MAX_MESSAGE] if error is not None else "",
        "finish_reason": (exchange.finish_reason or "")[:32] if exchange is not None else "",
        "input_tokens": tokens.input if tokens else 0,
        "output_tokens": tokens.output if tokens else 0,
        "cache_read_tokens": tokens.cache_read if tokens else 0,
        "cache_write_5m_tokens": tokens.cache_write_5m if tokens else 0,
        "cache_write_1h_tokens": tokens.cache_write_1h if tokens else 0,
        "reasoning_tokens": tokens.reasoning if tokens else 0,
        "cost_nano": exchange.recorded_cost if exchange is not None else 0,
        "output_exact": exchange.output_exact if exchange is not None else True,
        "hold_nano": exchange.hold_nano if exchange is not None else 0,
        "attempts": exchange.attempts if exchange is not None else [],
        "admitted_ms": exchange.admitted_ms if exchange is not None else None,
        "ttft_ms": exchange.ttft_ms if exchange is not None else None,
        "count": 1,
    }


def _log_extra(fields: dict[str, Any], key: KeyInfo | None) -> dict[str, Any]:
    """The request's JSON log line: enough to follow one request without the database."""
    return {
        "org_id": fields["org_id"],
        "key_prefix": key.prefix if key is not None else None,
        "api": fields["api"],
        "model": fields["model_id"] or fields["model_name"],
        "status": fields["status"],
        "http_status": fields["http_status"],
        "error_type": fields["error_type"] or None,
        "latency_ms": fields["latency_ms"],
        "ttft_ms": fields["ttft_ms"],
        "tokens": {
            "input": fields["input_tokens"],
            "output": fields["output_tokens"],
            "cache_read": fields["cache_read_tokens"],
            "cache_write": fields["cache_write_5m_tokens"] + fields["cache_write_1h_tokens"],
        },
        "cost_nano": fields["cost_nano"],
        "attempts": fields["attempts"],
    }


def org_labels_enabled() -> bool:
    return bool(settings.EZAT_METRICS_ORG_LABELS)
