"""Words for an attempt that never got an answer from its provider (issue 33, item 5).

The customer's error says what happened in words; the exception's class and message (a
`gaierror`, a `PlatformAuthError` naming the missing AWS credentials) are the operator's: they go
to the attempt's `reason` in the request log, the operator log and the admin's "last error"
(gateway/walk.py), never into the answer. Pure: no Django, no I/O.
"""

from __future__ import annotations

import socket
import ssl

from gateway.providers import PlatformAuthError

REASON_LIMIT = 300  # the operator's detail, cut: a chain error can quote whole config files


def customer_message(exc: BaseException) -> str:
    """What the caller is told, without Python class names."""
    if isinstance(exc, PlatformAuthError):
        return (
            "the gateway could not authenticate with the provider (a configuration problem on "
            "the gateway's side; its operator has the details)"
        )
    if isinstance(exc, socket.gaierror):
        return "could not reach the provider: its host name does not resolve"
    if isinstance(exc, ConnectionRefusedError):
        return "could not reach the provider: it refused the connection"
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return "could not reach the provider: the secure connection (TLS) failed"
    if isinstance(exc, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return "the connection to the provider was lost"
    if isinstance(exc, ValueError):  # a JSON decode error: the answer was cut or garbled
        return "the provider sent a response that could not be read"
    return "could not reach the provider"


def operator_reason(exc: BaseException) -> str:
    """The class and the message, for the operator's log and the request log."""
    text = str(exc).strip()
    reason = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return reason if len(reason) <= REASON_LIMIT else reason[: REASON_LIMIT - 1] + "…"
