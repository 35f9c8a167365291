"""This process's shutdown state, read on every request (so: two plain module globals, no lock —
everything that touches them runs on the event loop thread, or is a signal handler setting a
flag between two bytecodes).

On SIGTERM (ezat/serve.py) the node starts draining: `/readyz` answers 503 at once so the load
balancer takes it out of rotation, new requests are refused with a retryable 503 and
`connection: close` (HAProxy's `retry-on 503` sends them to another node; both SDKs retry a 503
too), and requests already running — streams included — go on until they finish or the grace
period (EZAT_SHUTDOWN_GRACE_SECONDS) is over. Then the server closes its socket, the lifespan
shutdown flushes the usage writer and the request-log queue, and the process exits.
"""

from __future__ import annotations

import time

# Requests (any path) being served right now by this process.
inflight = 0
# time.monotonic() when draining started; None while serving normally.
draining_since: float | None = None

# Served while draining: liveness, the metrics scrape and the readiness answer itself.
PASSTHROUGH_PATHS = frozenset({"/healthz", "/metrics"})


def begin() -> None:
    """Start draining (idempotent: a second SIGTERM does not restart the grace period)."""
    global draining_since
    if draining_since is None:
        draining_since = time.monotonic()


def is_draining() -> bool:
    return draining_since is not None


def reset() -> None:
    """Serve normally again (tests of the in-process state only)."""
    global draining_since, inflight
    draining_since = None
    inflight = 0
