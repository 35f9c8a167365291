"""Stored responses on the API path: the batched writer and the async lookups.

Writing never fails an answer. A response is queued, written with every other response queued
meanwhile in one INSERT on the writer's thread (group commit, as for usage records), and the
answer waits at most EZAT_RESPONSE_STORE_WAIT for the commit: a client that continues right
after (`previous_response_id`, `item_reference`), on any replica, then finds it. A failed or
slow write is counted and logged; the answer goes out regardless, and a later continuation
gets a clear 404. Lookups run the ORM in a worker thread; only requests that continue a stored
response make one.
"""

from __future__ import annotations

import asyncio
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from gateway.errors import GatewayError
from gateway.metrics import SIDE_EFFECT_FAILURES
from gateway.protocols.openai_responses.outbound import locate_item

logger = logging.getLogger(__name__)

MAX_BATCH = 200
# Every response id this gateway stores: "resp_" + a request id (gateway/http.py REQUEST_ID_RE,
# or its own req_<hex>). An id of any other shape is not stored here, and is answered as not
# found without a query: `resp_%00` reached PostgreSQL, which cannot take a NUL in text, and
# came back a 503 "database unavailable" that clients retried forever (issue 31).
_STORABLE_ID = re.compile(r"resp_[A-Za-z0-9._:-]{1,128}")


def storable_id(value: str) -> bool:
    return _STORABLE_ID.fullmatch(value) is not None


def _write(batch: list[dict[str, Any]]) -> None:
    from gateway.services import insert_stored_responses

    try:
        insert_stored_responses(batch)
    except Exception:
        connection.close()  # a broken connection is replaced on the next batch
        raise


def _close_thread_connection() -> None:
    connection.close()


class StoredResponseWriter:
    def __init__(self) -> None:
        self._pending: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None

    def save(
        self, *, org_id: int, response_id: str, model_id: str, response: Any, context: Any
    ) -> asyncio.Future[None]:
        """Queue one response; the future completes when it is committed (or failed)."""
        now = timezone.now()
        row = {
            "org_id": org_id,
            "response_id": response_id,
            "model_id": model_id,
            "response": response,
            "context": context,
            "created_at": now,
            "expires_at": now + timedelta(days=settings.EZAT_RESPONSE_RETENTION_DAYS),
        }
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._pending.append((row, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return future

    async def wait(self, future: asyncio.Future[None]) -> bool:
        """Wait (bounded) for a queued response's commit; False if it failed or is late."""
        done, _ = await asyncio.wait((future,), timeout=settings.EZAT_RESPONSE_STORE_WAIT)
        if not done:
            SIDE_EFFECT_FAILURES.labels("response_store_slow").inc()
            logger.warning("stored response not committed in time; answering without waiting")
            return False
        return future.exception() is None  # a failure was counted and logged by _flush

    async def _flush(self) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="response-store")
        loop = asyncio.get_running_loop()
        while self._pending:
            batch = self._pending[:MAX_BATCH]
            del self._pending[:MAX_BATCH]
            try:
                await loop.run_in_executor(self._executor, _write, [row for row, _ in batch])
            except Exception as exc:
                SIDE_EFFECT_FAILURES.labels("response_store").inc()
                logger.exception("storing responses failed", extra={"responses": len(batch)})
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                        future.exception()  # retrieved: nobody else must see it as unhandled
                continue
            for _, future in batch:
                if not future.done():
                    future.set_result(None)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.submit(_close_thread_connection).result()
            self._executor.shutdown(wait=True)
            self._executor = None


writer = StoredResponseWriter()


def _kept_by_provider(response_id: str, pin: Any) -> GatewayError:
    """A relayed response (gateway/handlers/responses_relay.py) holds no conversation here: the
    provider behind its deployment keeps it, and only a relayed request there continues it."""
    where = pin.get("deployment") if isinstance(pin, dict) else None
    return GatewayError(
        400,
        f"previous_response_id: response {response_id!r} is kept by the provider behind "
        f"deployment {where!r}; continue it with a model served there with the Responses API, "
        "or send the conversation as input",
        param="previous_response_id",
    )


# -- lookups ---------------------------------------------------------------------------------------


def _contexts(org_id: int, response_ids: list[str]) -> dict[str, dict[str, Any]]:
    from gateway.selectors import stored_contexts

    close_old_connections()
    return stored_contexts(org_id, response_ids)


def _response(org_id: int, response_id: str) -> dict[str, Any] | None:
    from gateway.selectors import stored_response

    close_old_connections()
    return stored_response(org_id, response_id)


def _delete(org_id: int, response_id: str) -> bool:
    from gateway.services import delete_stored_response

    close_old_connections()
    return delete_stored_response(org_id=org_id, response_id=response_id)


async def contexts(org_id: int, response_ids: list[str]) -> dict[str, dict[str, Any]]:
    response_ids = [r for r in response_ids if storable_id(r)]
    if not response_ids:
        return {}
    return await sync_to_async(_contexts, thread_sensitive=False)(org_id, response_ids)


async def response(org_id: int, response_id: str) -> dict[str, Any] | None:
    if not storable_id(response_id):
        return None
    return await sync_to_async(_response, thread_sensitive=False)(org_id, response_id)


async def delete(org_id: int, response_id: str) -> bool:
    if not storable_id(response_id):
        return False
    return await sync_to_async(_delete, thread_sensitive=False)(org_id, response_id)


async def continuation(
    org_id: int, previous_response_id: str | None, item_ids: list[str]
) -> tuple[list[dict[str, Any]] | None, dict[str, dict[str, Any]]]:
    """(the previous response's context items, referenced items by id) in one lookup.

    The context is None when `previous_response_id` is not stored for this org. Item ids are
    this gateway's own (they name their response and output index); others are not found.
    """
    wanted: dict[str, tuple[str, int]] = {}
    for value in item_ids:
        located = locate_item(value)
        if located is not None:
            wanted[value] = ("resp_" + located[0], located[1])
    ids = {response_id for response_id, _ in wanted.values()}
    if previous_response_id:
        ids.add(previous_response_id)
    if not ids:
        return None, {}
    found = await contexts(org_id, sorted(ids))
    history: list[dict[str, Any]] | None = None
    if previous_response_id and previous_response_id in found:
        ctx = found[previous_response_id]
        if "relayed" in ctx:
            raise _kept_by_provider(previous_response_id, ctx["relayed"])
        history = [*(ctx.get("items") or ()), *(ctx.get("output") or ())]
    referenced: dict[str, dict[str, Any]] = {}
    for value, (response_id, index) in wanted.items():
        output = (found.get(response_id) or {}).get("output") or []
        if index < len(output) and output[index].get("id") == value:
            referenced[value] = output[index]
    return history, referenced
