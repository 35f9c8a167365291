"""The gateway under uvicorn with a graceful shutdown (run by `python -m ezat.serve`).

Plain `uvicorn ezat.asgi:application` closes its listening socket on SIGTERM, so a load
balancer's readiness probe gets "connection refused" rather than an answer, and it waits for
open streams forever (or for its own `--timeout-graceful-shutdown`). Here, on SIGTERM (or the
first Ctrl-C):

1. the node starts draining (core/draining.py): `/readyz` answers 503 at once, new requests
   get a retryable 503 with `connection: close`;
2. requests already running — streams included — go on until none is left or
   EZAT_SHUTDOWN_GRACE_SECONDS (default 30) have passed;
3. uvicorn's own shutdown then closes the socket and the connections, cancelling whatever
   outlived the grace period (after one more second), and the lifespan shutdown flushes the
   usage writer and the request-log queue (gateway/app.py);
4. the process exits. A second Ctrl-C exits at once, as with uvicorn.

The options are the production ones (uvloop, httptools, no access log); N workers run on one
socket, each draining on its own when uvicorn's supervisor passes SIGTERM on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from types import FrameType

import uvicorn
from uvicorn.supervisors.multiprocess import Process as _Process

from core import draining
from core.accept import batched_accept

logger = logging.getLogger("ezat.serve")

# uvicorn's shutdown waits this long for the connections still open once the grace period is
# over (or once the last request finished) before it cancels their tasks.
CLOSE_SECONDS = 1.0


def grace_seconds() -> float:
    from django.conf import settings

    return float(settings.EZAT_SHUTDOWN_GRACE_SECONDS)


class GracefulServer(uvicorn.Server):
    """uvicorn's server with a draining phase between the signal and uvicorn's shutdown, that
    accepts every waiting connection at once (core/accept.py)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        config = self.config
        if sockets is None and config.fd is None and config.uds is None and config.ssl is None:
            # Bound here (as uvicorn's workers are) so that uvicorn hands `create_server` a
            # socket, which batched_accept serves; bind_socket logs the address.
            sockets = [config.bind_socket()]
        with batched_accept(asyncio.get_running_loop()):
            await super().startup(sockets=sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if draining.is_draining() or sig not in (signal.SIGTERM, signal.SIGINT):
            super().handle_exit(sig, frame)  # a second signal: uvicorn's (Ctrl-C twice: now)
            return
        self._captured_signals.append(sig)  # re-raised after shutdown, as uvicorn does
        draining.begin()

    async def on_tick(self, counter: int) -> bool:
        if draining.draining_since is not None and not self.should_exit:
            waited = time.monotonic() - draining.draining_since
            if draining.inflight == 0 or waited >= grace_seconds():
                if draining.inflight:
                    logger.warning(
                        "grace period over with requests still open; closing them",
                        extra={"open_requests": draining.inflight},
                    )
                self.config.timeout_graceful_shutdown = CLOSE_SECONDS
                self.should_exit = True
        return await super().on_tick(counter)


class GracefulProcess(_Process):
    """A worker process of `--workers N`, serving with GracefulServer."""

    @property
    def server(self) -> uvicorn.Server:
        if self._server is None:
            self._server = GracefulServer(config=self.config)
        return self._server


def build_config(host: str, port: int, workers: int) -> uvicorn.Config:
    return uvicorn.Config(
        "ezat.asgi:application",
        host=host,
        port=port,
        workers=workers,
        loop="uvloop",
        http="httptools",
        access_log=False,
        # X-Forwarded-For is read by the gateway itself, only from EZAT_TRUSTED_PROXIES (keys'
        # IP allow-lists): uvicorn's rewrite trusts 127.0.0.1 by default, so any local process
        # could claim any address.
        proxy_headers=False,
        timeout_graceful_shutdown=CLOSE_SECONDS,
    )


def run(host: str, port: int, workers: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ezat.settings")
    config = build_config(host, port, workers)
    if workers > 1:
        from uvicorn.supervisors import multiprocess

        # The supervisor builds its worker processes by this name; each runs a GracefulServer
        # and drains on the SIGTERM the supervisor passes on.
        multiprocess.Process = GracefulProcess  # type: ignore[misc]
        sock = config.bind_socket()
        multiprocess.Multiprocess(config, sockets=[sock]).run()
    else:
        GracefulServer(config).run()
