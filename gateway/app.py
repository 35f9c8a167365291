"""The gateway's ASGI application for `/v1/…` and `/openai/v1/…` (see ezat/asgi.py for why)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import psycopg
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError as DjangoDatabaseError
from django.utils.module_loading import import_string

from core.logging import request_id_var
from gateway import durability, outcome
from gateway.checkpoints import checkpoints
from gateway.errors import GatewayError, database_unavailable
from gateway.handlers import chat, messages, models, responses
from gateway.handlers.common import ANTHROPIC, OPENAI, authenticate
from gateway.http import ApiRequest, Receive, Scope, Send
from gateway.metrics import SIDE_EFFECT_FAILURES
from gateway.runtime import pin_mmap_threshold, tune_garbage_collector
from gateway.upstream import client

logger = logging.getLogger(__name__)

# Django wraps the driver's errors; psycopg's own come from the async usage connection.
DB_ERRORS = (DjangoDatabaseError, psycopg.Error)

Handler = Callable[[ApiRequest, Send], Awaitable[int]]
_LOOKUP_PREFIXES = (models.ANTHROPIC_PREFIX, models.OPENAI_PREFIX)


class GatewayApp:
    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Handler] = {
            ("POST", "/v1/messages"): messages.create_message,
            ("POST", "/v1/messages/count_tokens"): messages.count_tokens,
            ("GET", "/v1/models"): models.anthropic_models,
            ("GET", "/openai/v1/models"): models.openai_models,
            ("POST", "/openai/v1/chat/completions"): chat.create_chat_completion,
            ("POST", "/openai/v1/responses"): responses.create_response,
            ("POST", "/openai/v1/responses/input_tokens"): responses.input_tokens,
        }
        # /openai/v1/responses/{id} and /openai/v1/responses/{id}/cancel
        self.response_routes: dict[str, Handler] = {
            "GET": responses.get_response,
            "DELETE": responses.delete_response,
        }
        # /v1/models/{id} (Anthropic's shape) and /openai/v1/models/{id} (OpenAI's)
        self.lookups: dict[bool, Handler] = {
            False: models.anthropic_model_lookup,
            True: models.openai_model_lookup,
        }

    def resolve(self, method: str, path: str) -> tuple[Handler | None, bool]:
        """(handler, whether the path exists for some method)."""
        handler = self.routes.get((method, path))
        if handler is not None:
            return handler, True
        if any(p == path for (_, p) in self.routes):
            return None, True
        if path.startswith(_LOOKUP_PREFIXES):
            # GET /v1/models/{id}: ids hold a "/", so the rest of the decoded path is the id.
            lookup = self.lookups[path.startswith("/openai/")]
            return (lookup if method == "GET" else None), True
        if path.startswith(responses.PREFIX):
            rest = path[len(responses.PREFIX) :]
            if rest and "/" not in rest:
                return self.response_routes.get(method), True
            response_id, _, action = rest.partition("/")
            if response_id and action == "cancel":
                return (responses.cancel_response if method == "POST" else None), True
        return None, False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = ApiRequest(scope, receive)
        # Every log line of this request (limits, routing, billing) carries its id.
        request_id_var.set(request.request_id)
        path = scope["path"].rstrip("/") or "/"
        handler, known = self.resolve(scope["method"], path)
        fmt = OPENAI if path.startswith("/openai/") else ANTHROPIC
        if handler is None:
            started = time.perf_counter()
            try:
                # The key is checked before the path: a wrong key is a 401 on every path, known
                # or not, on both APIs (a path is not a secret, but the answer must not depend
                # on whether the caller guessed a real one before its key is known to be good).
                await authenticate(request, fmt)
            except GatewayError as err:
                status = await fmt.send_error(send, request, err)
                outcome.finish(request, http_status=status, error=err, started=started)
                request.close()
                return
            err = (
                GatewayError(405, f"method {scope['method']} not allowed on {path}")
                if known
                else GatewayError(404, f"no such endpoint: {path}", type_="not_found_error")
            )
            status = await fmt.send_error(send, request, err)
            outcome.finish(request, http_status=status, error=err, started=started)
            request.close()
            return
        try:
            await handler(request, send)
        except DB_ERRORS:
            # Whatever on the request's path read or wrote the database (a key lookup, a money
            # seed, a stored response) and found it down: a 503 the SDKs retry, not a 500.
            logger.warning("database unavailable on an API path", exc_info=True)
            SIDE_EFFECT_FAILURES.labels("database_unavailable").inc()
            try:
                await fmt.send_error(send, request, database_unavailable("this request"))
            except RuntimeError:
                pass  # the response had already started; the connection is closed instead
        except Exception:
            # A 500 is a bug: log it with the request id; answer in the caller's format.
            logger.exception("unhandled error")
            try:
                await fmt.send_error(
                    send, request, GatewayError(500, "internal error", type_="api_error")
                )
            except RuntimeError:
                pass  # the response had already started; the connection is closed instead
        finally:
            request.close()

    async def refuse_draining(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A new API request while this node shuts down (core/draining.py): a 503 in the
        caller's format that both SDKs retry, on a connection closed after it."""
        request = ApiRequest(scope, receive)
        fmt = OPENAI if scope["path"].startswith("/openai/") else ANTHROPIC
        err = GatewayError(
            503,
            "this gateway node is shutting down; retry (another node will answer)",
            type_="overloaded_error",
            headers={"x-should-retry": "true", "retry-after": "1", "connection": "close"},
        )
        try:
            await fmt.send_error(send, request, err)
        finally:
            request.close()

    async def lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        background: asyncio.Task[None] | None = None
        durable: asyncio.Task[None] | None = None
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                tune_garbage_collector()
                pin_mmap_threshold()
                if settings.CELERY_TASK_ALWAYS_EAGER:
                    # Embedded default: no broker, no beat. The gateway reconciles itself.
                    background = asyncio.get_running_loop().create_task(_reconcile_forever())
                # Spool replay and the sweep of dead processes' streams: now, then periodically.
                durable = asyncio.get_running_loop().create_task(durability.run_forever())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if background is not None:
                    background.cancel()
                if durable is not None:
                    durable.cancel()
                from billing.recorder import writer

                # Usage records are awaited by their requests (all finished by now, see
                # ezat/serve.py); the request-log rows queued or held behind them (and held
                # refusals) are written here, bounded so a dead database cannot hang the exit.
                try:
                    async with asyncio.timeout(5):
                        await writer.drain_log()
                except TimeoutError:
                    logger.warning("request log rows not written at shutdown (timeout)")
                await durability.close_usage_log(5)
                await checkpoints.aclose()
                await client.close()
                await asyncio.get_running_loop().run_in_executor(None, writer.close)
                await send({"type": "lifespan.shutdown.complete"})
                return


def _reconcile_once() -> None:
    from django.db import close_old_connections

    from billing.reconcile import reconcile_all
    from gateway.services import purge_expired_responses

    close_old_connections()
    reconcile_all(max_batches=50)
    # No beat either: expired stored responses go here (an indexed delete, usually of nothing).
    purge_expired_responses(max_batches=5)
    # And the other apps' periodic work that beat would run (alert thresholds, expired
    # Playground keys), named in settings so the gateway imports none of those apps.
    for dotted in settings.EZAT_EMBEDDED_PERIODIC:
        try:
            import_string(dotted)()
        except Exception:  # one job failing must not stop the others; the next round retries
            SIDE_EFFECT_FAILURES.labels("embedded_periodic").inc()
            logger.exception("embedded periodic job failed", extra={"job": dotted})


async def _reconcile_forever() -> None:
    interval = settings.CELERY_BEAT_SCHEDULE["reconcile-usage"]["schedule"]
    # One thread of its own (so one DB session), not the loop's default pool, whose threads
    # would each keep the session of whichever round they happened to run.
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ezat-reconcile")
    while True:
        await asyncio.sleep(interval)
        try:
            await sync_to_async(_reconcile_once, thread_sensitive=False, executor=thread)()
        except Exception:  # the next round retries; reconciliation is idempotent
            SIDE_EFFECT_FAILURES.labels("embedded_reconcile").inc()
            logger.exception("embedded reconciliation failed")
