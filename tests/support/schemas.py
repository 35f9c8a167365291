"""Every answer the e2e tests see, checked against the official SDKs' pydantic types (issue 32,
item 4): not against EZAT's own expectations, which field-by-field assertions encode and which
miss what a strict client (generated Go/Java/.NET clients, zod) rejects.

How: `watch()` wraps the transports of httpx (the tests' raw `httpx.post`/`httpx.stream`) and
of httpx2 (the openai and anthropic SDKs' HTTP client). Each answer from an inference path is
validated once its body has been read (answers of the gateway only, see `_applies`): a JSON body whole (only when read to the end), an SSE
body event by event (only complete events: a test that leaves a stream early is no violation).
Violations are collected, not raised, so a test's own assertions run as they would; the e2e
conftest fails the test at teardown when any was collected.

The SDK types are validated with `model_validate` (openai's and anthropic's BaseModels check
Literals and required fields there; the SDKs themselves only `construct` without checking).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anthropic.types as at
import httpx
import httpx2
import openai.types as ot
import openai.types.chat as oc
import openai.types.responses as rt
import orjson
from pydantic import TypeAdapter, ValidationError

Check = Callable[[Any], None]

_RESPONSE_EVENT = TypeAdapter(rt.ResponseStreamEvent)
_ANTHROPIC_EVENT = TypeAdapter(at.RawMessageStreamEvent)


def _model(cls: Any) -> Check:
    return cls.model_validate


def _openai_error(body: Any) -> None:
    ot.ErrorObject.model_validate(body["error"])


def _chat_chunk(data: Any) -> None:
    if isinstance(data, dict) and "error" in data:  # a mid-stream error (openai-python raises)
        _openai_error(data)
    else:
        oc.ChatCompletionChunk.model_validate(data)


def _responses_event(data: Any) -> None:
    _RESPONSE_EVENT.validate_python(data)


def _anthropic_event(data: Any) -> None:
    kind = data.get("type") if isinstance(data, dict) else None
    if kind == "ping":
        assert data == {"type": "ping"}, data
    elif kind == "error":
        _anthropic_error(data)
    else:
        _ANTHROPIC_EVENT.validate_python(data)


def _anthropic_error(body: Any) -> None:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("type") == "request_too_large":
        # The one departure the API itself makes: Anthropic answers an over-size body with a
        # 413 `request_too_large`, which the SDK's ErrorObject union does not list
        # (reference/protocol.md §1, errors table). EZAT answers as the API does; the rest of
        # the envelope is still checked.
        body = {**body, "error": {**error, "type": "invalid_request_error"}}
    at.ErrorResponse.model_validate(body)


def _openai_models(body: Any) -> None:
    assert body["object"] == "list", body
    for model in body["data"]:
        ot.Model.model_validate(model)


def _anthropic_models(body: Any) -> None:
    assert isinstance(body["has_more"], bool), body
    for model in body["data"]:
        at.ModelInfo.model_validate(model)


# (path pattern, check of a 2xx JSON body, check of each SSE data payload, check of an error)
_ROUTES: list[tuple[re.Pattern[str], Check, Check | None, Check]] = [
    (
        re.compile(r"/openai/v1/chat/completions/?$"),
        _model(oc.ChatCompletion),
        _chat_chunk,
        _openai_error,
    ),
    (
        re.compile(r"/openai/v1/responses/input_tokens/?$"),
        _model(rt.InputTokenCountResponse),
        None,
        _openai_error,
    ),
    (re.compile(r"/openai/v1/responses/?$"), _model(rt.Response), _responses_event, _openai_error),
    (re.compile(r"/openai/v1/models/?$"), _openai_models, None, _openai_error),
    (re.compile(r"/openai/v1/models/.+"), _model(ot.Model), None, _openai_error),
    (
        re.compile(r"/v1/messages/count_tokens/?$"),
        _model(at.MessageTokensCount),
        None,
        _anthropic_error,
    ),
    (
        re.compile(r"/v1/messages/?$"),
        _model(at.Message),
        _anthropic_event,
        _anthropic_error,
    ),
    (re.compile(r"/v1/models/?$"), _anthropic_models, None, _anthropic_error),
    (re.compile(r"/v1/models/.+"), _model(at.ModelInfo), None, _anthropic_error),
]


def _route(path: str) -> tuple[Check, Check | None, Check] | None:
    for pattern, body, event, error in _ROUTES:
        if pattern.match(path):
            return body, event, error
    return None


class Watch:
    """The violations seen while watching."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self.checked = 0

    def _fail(self, where: str, error: Exception | str, payload: Any) -> None:
        text = str(error).replace("\n", " ")[:600]
        self.violations.append(f"{where}: {text} in {str(payload)[:300]}")

    def check(self, where: str, check: Check, payload: Any) -> None:
        self.checked += 1
        try:
            check(payload)
        except (ValidationError, AssertionError, KeyError, TypeError) as exc:
            self._fail(where, exc, payload)

    def body(self, request: Any, status: int, headers: Any, raw: bytes) -> None:
        route = _route(request.url.path)
        if route is None or request.method == "DELETE":
            return
        body_check, event_check, error_check = route
        where = f"{request.method} {request.url.path} -> {status}"
        if "text/event-stream" in headers.get("content-type", ""):
            if event_check is not None:
                for data in _sse_data(raw):
                    self.check(where, event_check, data)
            return
        if not raw or headers.get("content-encoding"):
            return
        try:
            payload = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            self._fail(where, f"not JSON ({exc})", raw[:200])
            return
        if 200 <= status < 300:
            self.check(where, body_check, payload)
        elif status >= 400:
            self.check(where, error_check, payload)


def _applies(request: Any, response: Any) -> bool:
    """An answer of an EZAT gateway (it always sends x-request-id; the simulator, which tests
    also call directly and script to misbehave, does not) on an inference path."""
    return "x-request-id" in response.headers and _route(request.url.path) is not None


def _sse_data(raw: bytes) -> Iterator[Any]:
    """The JSON `data:` payload of each complete SSE event (a trailing partial one is left)."""
    text = raw.decode("utf-8", "replace").replace("\r\n", "\n")
    complete = text.rsplit("\n\n", 1)[0] if "\n\n" in text else ""
    for block in complete.split("\n\n"):
        data = [line[5:].lstrip(" ") for line in block.split("\n") if line.startswith("data:")]
        if not data or data == ["[DONE]"]:
            continue
        try:
            yield orjson.loads("\n".join(data))
        except orjson.JSONDecodeError:
            yield {"unparsable SSE data": "\n".join(data)[:200]}


class _TeeMixin:
    """A response body stream that keeps what it yields and reports it when closed."""

    def __init__(self, inner: Any, done: Callable[[bytes, bool], None]) -> None:
        self._inner = inner
        self._done = done
        self._parts: list[bytes] = []
        self._complete = False
        self._reported = False

    def _report(self) -> None:
        if not self._reported:
            self._reported = True
            self._done(b"".join(self._parts), self._complete)

    def __iter__(self) -> Iterator[bytes]:
        for part in self._inner:
            self._parts.append(part)
            yield part
        self._complete = True

    def close(self) -> None:
        self._report()
        self._inner.close()

    async def __aiter__(self) -> Any:
        async for part in self._inner:
            self._parts.append(part)
            yield part
        self._complete = True

    async def aclose(self) -> None:
        self._report()
        await self._inner.aclose()


def _reporter(watch: Watch, request: Any, response: Any) -> Any:
    def done(raw: bytes, complete: bool) -> None:
        sse = "text/event-stream" in response.headers.get("content-type", "")
        if complete or sse:  # a JSON body read only in part says nothing
            watch.body(request, response.status_code, response.headers, raw)

    return done


def _patch(module: Any, seen: Watch) -> Callable[[], None]:
    """Wrap one httpx-like module's transports; returns the undo. The streams must be of the
    module's own byte-stream classes: its Response checks them."""
    sync_tee = type("Tee", (_TeeMixin, module.SyncByteStream), {})
    async_tee = type("AsyncTee", (_TeeMixin, module.AsyncByteStream), {})
    sync_send = module.HTTPTransport.handle_request
    async_send = module.AsyncHTTPTransport.handle_async_request

    def handle_request(self: Any, request: Any) -> Any:
        response = sync_send(self, request)
        if _applies(request, response):
            response.stream = sync_tee(response.stream, _reporter(seen, request, response))
        return response

    async def handle_async_request(self: Any, request: Any) -> Any:
        response = await async_send(self, request)
        if _applies(request, response):
            response.stream = async_tee(response.stream, _reporter(seen, request, response))
        return response

    module.HTTPTransport.handle_request = handle_request
    module.AsyncHTTPTransport.handle_async_request = handle_async_request

    def undo() -> None:
        module.HTTPTransport.handle_request = sync_send
        module.AsyncHTTPTransport.handle_async_request = async_send

    return undo


@contextmanager
def watch() -> Iterator[Watch]:
    """Validate every gateway answer read through httpx or httpx2 (the openai and anthropic
    SDKs' fork of it) while inside (see the module doc)."""
    seen = Watch()
    undo = [_patch(module, seen) for module in (httpx, httpx2)]
    try:
        yield seen
    finally:
        for step in reversed(undo):
            step()
