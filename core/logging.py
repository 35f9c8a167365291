"""JSON log lines: one object per line, with the request id when the gateway knows it.

Timestamps are ISO-8601 UTC with milliseconds and `Z`. The server's own loggers (uvicorn's
error and access lines) go through the same formatter (settings.LOGGING), and expected client
errors (a 403, a 404) are logged without a traceback: a traceback means a bug.
"""

from __future__ import annotations

import logging
import time
from contextvars import ContextVar

import orjson

request_id_var: ContextVar[str | None] = ContextVar("ezat_request_id", default=None)

# Attributes every LogRecord has; anything else was passed through `extra=` and is logged.
_STANDARD_ATTRS = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


def iso_ms(created: float) -> str:
    """2026-12-01T19:05:03.123Z"""
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": iso_ms(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = request_id_var.get()
        if request_id:
            line["request_id"] = request_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class ClientErrorsWithoutTraceback(logging.Filter):
    """Django logs a refused request (PermissionDenied → 403, Http404) with the exception that
    produced it; for a 4xx that is an expected answer, not a bug: keep the line, drop the
    traceback. Only 5xx lines keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and status < 500:
            record.exc_info = None
            record.exc_text = None
            # The request object is not JSON and holds the caller's cookies: path only.
            request = getattr(record, "request", None)
            if request is not None:
                record.request = getattr(request, "path", "")
        return True
