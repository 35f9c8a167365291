"""An OpenAI-compatible provider's error answer -> GatewayError (issue 30 item 9). Pure.

Bodies are `{"error": {"message", "type", "param", "code"}}` on OpenAI, Azure, Ollama and
current vLLM (providers.md §1.5); older vLLM sends the fields at the top level, Gemini's
OpenAI endpoint a list of such objects, and proxies plain text. Statuses:

- 429 stays 429 (the exchange fails over on it before the first token) with the provider's
  wait passed on as `retry-after`: its own `retry-after` / `retry-after-ms`, else the
  `x-ratelimit-reset-{requests,tokens}` duration ("6m0s", "1.5s", "12ms", §1.5) of the limit
  that ran out, rounded up to whole seconds (the header both SDKs read).
- 429 `insufficient_quota` ("You exceeded your current quota, please check your plan and
  billing details": the account's monthly budget is used up, OpenAI's error-code guide,
  https://help.openai.com/en/articles/6891831) is the deployment's bill, not the caller's pace,
  and no retry fixes it (providers.md §7 item 14). It becomes a 503 with code
  `upstream_quota_exhausted` and `x-should-retry: false` (both SDKs obey that header before
  the status, protocol.md §2.8 and §4): the exchange fails over to another deployment (another
  account) and cools this one down for EZAT_QUOTA_COOLDOWN_SECONDS; when none is left the
  caller gets this 503 — the model is unavailable, nothing the caller did or can fix by waiting
  a second. The provider's text (about the operator's plan) is not passed on.
- 5xx -> 529 overloaded_error, which the OpenAI envelope renders as 503 (gateway/errors.py):
  never a 500, and both SDKs retry it.
- 400 (and 422, vLLM's validation status) -> 400 invalid_request_error with the provider's
  message, `context_length_exceeded` included, so the client sees why.
- 404 `model_not_found` -> 404; a 404 without an OpenAI body is a wrong base URL, the
  deployment's fault -> 502.
- 401 / 403 are the deployment's credentials: the caller decides what to do; here they become
  a 502 that never carries the provider's text (it quotes the key).

The provider's message is passed on with anything shaped like a secret replaced (`sk-…`,
`Bearer …`, `AIza…`, long opaque tokens), and cut to 1000 characters.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

from gateway.errors import QUOTA_EXHAUSTED, GatewayError

__all__ = ["parse_duration", "provider_error", "redact", "retry_after"]

MAX_MESSAGE = 1000
_SECRET = re.compile(
    r"(?i:bearer)\s+\S+"
    r"|sk-[A-Za-z0-9_*-]{4,}"
    r"|AIza[A-Za-z0-9_-]{16,}"
    r"|(?i:api[-_ ]?key)\s*[:=]\s*\S+"
    r"|\b(?=[A-Za-z_-]*[0-9])[A-Za-z0-9_-]{32,}"
)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def redact(text: str) -> str:
    return _SECRET.sub("[redacted]", text)[:MAX_MESSAGE]


def parse_duration(value: str) -> float | None:
    """Seconds in a Go-style duration ("6m0s", "1.5s", "12ms", "1h2m3s"), or None."""
    value = value.strip()
    if not value:
        return None
    try:
        return float(value)  # some servers send plain seconds
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _DURATION.finditer(value):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return total if pos == len(value) else None


def retry_after(headers: dict[str, str]) -> str | None:
    """The wait to pass on, in whole seconds (at least 1), or None when the provider gave none."""
    h = {k.lower(): v for k, v in headers.items()}
    own = h.get("retry-after", "").strip()
    if own.isdigit():
        return str(max(1, int(own)))
    if own:
        return own  # an HTTP date: passed on as it is (reading it would need the clock)
    ms = h.get("retry-after-ms", "").strip()
    try:
        if ms:
            return str(max(1, math.ceil(float(ms) / 1000)))
    except ValueError:
        pass
    waits = []
    exhausted = []
    for kind in ("requests", "tokens"):
        seconds = parse_duration(h.get(f"x-ratelimit-reset-{kind}", ""))
        if seconds is None:
            continue
        waits.append(seconds)
        if h.get(f"x-ratelimit-remaining-{kind}", "").strip() == "0":
            exhausted.append(seconds)
    chosen = exhausted or waits
    return str(max(1, math.ceil(max(chosen)))) if chosen else None


def _error_object(payload: bytes) -> dict[str, Any] | None:
    try:
        parsed = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    if isinstance(parsed, list) and parsed:
        parsed = parsed[0]
    if not isinstance(parsed, dict):
        return None
    inner = parsed.get("error")
    if isinstance(inner, dict):
        return inner
    if isinstance(inner, str):
        return {"message": inner}
    return parsed if "message" in parsed else None


def provider_error(status: int, headers: dict[str, str], payload: bytes) -> GatewayError:
    error = _error_object(payload)
    code = str((error or {}).get("code") or "")
    kind = str((error or {}).get("type") or "")
    param = (error or {}).get("param")
    param = param if isinstance(param, str) else None
    if error is not None and isinstance(error.get("message"), str) and error["message"]:
        text = redact(error["message"])
    else:
        snippet = payload[:200].decode(errors="replace").strip()
        text = redact(snippet) if snippet else ""
    said = f": {text}" if text else ""
    if status in (401, 403):
        return GatewayError(
            502,
            f"the provider refused this deployment's credentials (HTTP {status})",
            type_="api_error",
        )
    if status == 429:
        if "insufficient_quota" in (code, kind):
            return GatewayError(
                503,
                "this model is unavailable: the provider account behind it has used up its "
                "quota (the gateway operator's billing with the provider); retrying will not help",
                type_="api_error",
                code=QUOTA_EXHAUSTED,
                headers={"x-should-retry": "false"},
                reason="insufficient_quota",
            )
        wait = retry_after(headers)
        return GatewayError(
            429,
            f"the provider is rate limiting this deployment{said}",
            type_="rate_limit_error",
            code=code or None,
            headers={"retry-after": wait} if wait else None,
        )
    if status >= 500:
        return GatewayError(
            529, f"the provider answered HTTP {status}{said}", type_="overloaded_error"
        )
    if status in (400, 422):
        return GatewayError(
            400,
            text or f"the provider refused the request (HTTP {status})",
            type_="invalid_request_error",
            param=param,
            code=code or None,
        )
    if status == 404:
        if error is None:
            return GatewayError(
                502, "the provider has no such endpoint (check the deployment's base URL)"
            )
        return GatewayError(
            404, text or "model not found", type_="not_found_error", code=code or None
        )
    if status == 413:
        return GatewayError(413, text or "request too large", type_="request_too_large")
    if status == 408:
        return GatewayError(504, f"the provider timed out{said}", type_="timeout_error")
    return GatewayError(502, f"the provider answered HTTP {status}{said}", type_="api_error")
