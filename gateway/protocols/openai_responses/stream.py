"""Anthropic Messages stream events -> OpenAI Responses SSE events (`event:` + `data:`).

The order follows real OpenAI recordings (platforms-and-responses.md §4.4): `response.created`,
`response.in_progress`, then per output item `output_item.added`, its parts and deltas, their
`.done` events and `output_item.done`; the stream ends with `response.completed` (or
`.incomplete`) carrying the whole output and usage, or `error` + `response.failed`. Every event
has a `sequence_number` (0, 1, 2, ...). openai-python's `responses.stream()` needs
`response.created` first, `content_part.added` before text deltas and the full output in
`response.completed` (§4.6); keep-alives are SSE comments, which every client skips. A call
to a custom tool is a `custom_tool_call` item whose text is decoded from the upstream JSON of its
one-string object as it streams (`response.custom_tool_call_input.delta`, then `.done`).

Hot path: one `feed` per upstream event. Delta events are built from per-item prefixes rendered
once, so a delta costs one small dumps of its text.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson

from gateway.protocols.anthropic.usage import absorb_usage

from .custom_input import CustomInputDecoder
from .outbound import (
    client_output,
    custom_tool_call_item,
    error_code,
    function_call_item,
    item_id,
    message_item,
    reasoning_item,
    response_object,
    responses_usage,
    status_of,
    tool_call_item,
)
from .tools import CUSTOM_INPUT
from .types import Rendering

__all__ = ["ResponsesStreamTranslator"]

_dumps = orjson.dumps  # a global, not an attribute lookup, on the per-delta path


class _Item:
    """One output item being streamed."""

    __slots__ = ("block", "decoder", "delta_prefix", "id", "index", "kind", "opened", "pieces")

    def __init__(self, kind: str, item: str, index: int, block: dict[str, Any]) -> None:
        self.kind = kind
        self.id = item
        self.index = index
        self.block = block  # thinking: {type, thinking pieces joined at stop, signature}
        self.pieces: list[str] = []  # text, thinking or argument fragments
        self.opened = False  # a reasoning summary part was opened
        self.delta_prefix = b""
        self.decoder: CustomInputDecoder | None = None  # a custom tool call's text so far


class ResponsesStreamTranslator:
    PING: ClassVar[bytes] = b": ping\n\n"

    __slots__ = (
        "_blocks",
        "_created_at",
        "_echo",
        "_include_encrypted",
        "_model_name",
        "_request_id",
        "_seal",
        "_seq",
        "_summary",
        "_text_index",
        "_text_pieces",
        "_text_prefix",
        "_tools",
        "finished",
        "items",
        "started",
        "stop_reason",
        "usage",
    )

    def __init__(self, rendering: Rendering) -> None:
        # Copied out of `rendering`: read on every event, one attribute lookup each.
        r = rendering
        self._request_id = r.request_id
        self._tools = r.tools or {}  # how calls to namespaced and custom tools are returned
        self._model_name = r.model_name
        self._created_at = r.created_at
        self._echo = r.echo
        self._seal = r.seal
        self._summary = r.summary
        self._include_encrypted = r.include_encrypted
        self._seq = 0
        self._blocks: dict[int, _Item] = {}  # Anthropic block index -> item
        self.items: list[dict[str, Any]] = []  # finished output items (reasoning sealed)
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.started = False
        self.finished = False
        # The open text block (what the fast path in feed serves): its Anthropic index (None:
        # none open), its text pieces and its delta events' bytes up to the sequence number.
        self._text_index: int | None = None
        self._text_pieces: list[str] = []
        self._text_prefix = b""

    # -- framing ------------------------------------------------------------------------------

    def _event(self, kind: str, payload: dict[str, Any]) -> bytes:
        """`event: kind` + the payload after `type` and `sequence_number`: the bytes of
        dumps({"type": kind, "sequence_number": n, **payload}) without building that dict
        (payloads are never empty and never hold those two keys)."""
        seq = self._seq
        self._seq = seq + 1
        name = kind.encode()
        return b'event: %b\ndata: {"type":"%b","sequence_number":%d,%b\n\n' % (
            name,
            name,
            seq,
            _dumps(payload)[1:],
        )

    def _delta(self, item: _Item, delta: str) -> bytes:
        seq = self._seq
        self._seq += 1
        return b'%b%d,"delta":%b}\n\n' % (item.delta_prefix, seq, _dumps(delta))

    def _response(self, status: str, **extra: Any) -> dict[str, Any]:
        return response_object(
            request_id=self._request_id,
            created_at=self._created_at,
            model_name=self._model_name,
            echo=self._echo,
            status=status,
            output=extra.pop("output", []),
            usage=extra.pop("usage", None),
            **extra,
        )

    # -- public API -----------------------------------------------------------------------------

    def feed(self, event: dict[str, Any]) -> bytes:
        """Translate one parsed upstream event into zero or more complete SSE events."""
        kind = event.get("type")
        if kind == "content_block_delta":
            # Fast path for the bulk of a stream, a text delta of the open message: the same
            # output as _on_delta with a third of its work (no item lookup, no kind checks).
            # Anything it does not take, _on_delta handles with the general checks.
            delta = event.get("delta")
            index = event.get("index")
            if index == self._text_index and type(index) is int and type(delta) is dict:
                text = delta.get("text")
                if type(text) is str and text and delta.get("type") == "text_delta":
                    self._text_pieces.append(text)
                    seq = self._seq
                    self._seq = seq + 1
                    return b'%b%d,"delta":%b}\n\n' % (self._text_prefix, seq, _dumps(text))
            return self._on_delta(event)
        if kind == "content_block_start":
            return self._begin() + self._on_start(event)
        if kind == "content_block_stop":
            return self._on_stop(event)
        if kind == "message_start":
            absorb_usage(self.usage, event)
            return self._begin()
        if kind == "message_delta":
            stop_reason = absorb_usage(self.usage, event)
            if isinstance(stop_reason, str):
                self.stop_reason = stop_reason
            return b""
        if kind == "message_stop":
            self.finished = True
        return b""  # ping, error (the handler reports it) and event types added later

    def final_event(self) -> bytes:
        """`response.completed` (or `.incomplete`) with the whole output and usage; sent after
        the usage record is written."""
        out = self._begin()
        status, incomplete = status_of(self.stop_reason)
        response = self._response(
            status,
            output=client_output(self.items, self._include_encrypted),
            usage=responses_usage(self.usage),
            incomplete_details=incomplete,
        )
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return out + self._event(kind, {"response": response})

    def failure(self, message: str, code: str | None, status: int = 500) -> bytes:
        """A failure after the stream started: `error`, then `response.failed`. Both carry a
        code of the schema's enum (see `error_code`)."""
        out = self._begin()
        code = error_code(status, code)
        out += self._event("error", {"code": code, "message": message, "param": None})
        response = self._response(
            "failed",
            output=client_output(self.items, self._include_encrypted),
            error={"code": code, "message": message},
        )
        return out + self._event("response.failed", {"response": response})

    def response_snapshot(self, status: str) -> dict[str, Any]:
        """The response object with the output so far (what a stored response keeps)."""
        kind, incomplete = status_of(self.stop_reason)
        return self._response(
            status or kind,
            output=client_output(self.items, self._include_encrypted),
            usage=responses_usage(self.usage),
            incomplete_details=incomplete,
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def _begin(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        # Both events carry the same response: serialized once, spliced into both (the bytes
        # _event would give: type, sequence_number, response).
        response = _dumps(self._response("in_progress"))
        seq = self._seq
        self._seq = seq + 2
        return (
            b'event: response.created\ndata: {"type":"response.created","sequence_number":%d,'
            b'"response":%b}\n\nevent: response.in_progress\ndata: {"type":"response.in_progress",'
            b'"sequence_number":%d,"response":%b}\n\n'
        ) % (seq, response, seq + 1, response)

    def _item(self, event: dict[str, Any]) -> _Item | None:
        index = event.get("index")
        return self._blocks.get(index) if type(index) is int else None

    def _added(self, item: _Item, payload: dict[str, Any]) -> bytes:
        return self._event(
            "response.output_item.added", {"output_index": item.index, "item": payload}
        )

    def _on_start(self, event: dict[str, Any]) -> bytes:
        block = event.get("content_block")
        index = event.get("index")
        if not isinstance(block, dict) or type(index) is not int:
            return b""
        if index == self._text_index:
            self._text_index = None  # a new block at the open text block's index replaces it
        kind = block.get("type")
        position = len(self.items) + sum(1 for i in self._blocks.values() if i.index >= 0)
        if kind in ("thinking", "redacted_thinking"):
            item = _Item(
                "reasoning", item_id("reasoning", self._request_id, position), position, {}
            )
            item.block = dict(block)
            text = block.get("thinking")
            if isinstance(text, str) and text:
                item.pieces.append(text)
            self._blocks[index] = item
            payload = reasoning_item({"type": "redacted_thinking"}, item.id, None, False)
            payload["status"] = "in_progress"
            return self._added(item, payload)
        if kind == "text":
            item = _Item("message", item_id("message", self._request_id, position), position, {})
            item.delta_prefix = (
                b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
                b'"item_id":"'
                + item.id.encode()
                + b'","output_index":'
                + str(position).encode()
                + b',"content_index":0,"logprobs":[],"sequence_number":'
            )
            self._blocks[index] = item
            payload = message_item(item.id, "", "in_progress")
            payload["content"] = []
            out = self._added(item, payload)
            out += self._event(
                "response.content_part.added",
                {
                    "item_id": item.id,
                    "output_index": position,
                    "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                },
            )
            text = block.get("text")
            if isinstance(text, str) and text:
                item.pieces.append(text)
                out += self._delta(item, text)
            self._text_index = index
            self._text_pieces = item.pieces
            self._text_prefix = item.delta_prefix
            return out
        if kind == "tool_use":
            upstream_name = str(block.get("name") or "")
            known = self._tools.get(upstream_name)
            call_id = str(block.get("id") or "")
            if known is not None and known.custom:
                # Its input arrives as the JSON of {"input": "..."}: its text is decoded as the
                # JSON streams (custom_input.py).
                ctc = item_id("custom_tool_call", self._request_id, position)
                item = _Item("custom_tool_call", ctc, position, dict(block))
                item.decoder = CustomInputDecoder()
                self._blocks[index] = item
                payload = custom_tool_call_item(
                    ctc, call_id, known.name, "", "in_progress", known.namespace
                )
                return self._added(item, payload)
            fc = item_id("function_call", self._request_id, position)
            item = _Item("function_call", fc, position, dict(block))
            item.delta_prefix = (
                b"event: response.function_call_arguments.delta\ndata: "
                b'{"type":"response.function_call_arguments.delta","item_id":"'
                + fc.encode()
                + b'","output_index":'
                + str(position).encode()
                + b',"sequence_number":'
            )
            self._blocks[index] = item
            payload = function_call_item(
                fc,
                call_id,
                known.name if known is not None else upstream_name,
                "",
                "in_progress",
                known.namespace if known is not None else None,
            )
            payload["arguments"] = ""
            return self._added(item, payload)
        return b""  # server tool blocks and later block types have no Responses item here

    def _on_delta(self, event: dict[str, Any]) -> bytes:
        item = self._item(event)
        delta = event.get("delta")
        if item is None or not isinstance(delta, dict):
            return b""
        kind = delta.get("type")
        if kind == "text_delta" and item.kind == "message":
            text = delta.get("text")
            if not isinstance(text, str) or not text:
                return b""
            item.pieces.append(text)
            return self._delta(item, text)
        if kind == "input_json_delta" and item.kind in ("function_call", "custom_tool_call"):
            fragment = delta.get("partial_json")
            if not isinstance(fragment, str) or not fragment:
                return b""  # Anthropic's first fragment is often ""
            item.pieces.append(fragment)
            if item.decoder is None:
                return self._delta(item, fragment)
            text = item.decoder.feed(fragment)
            if not text:
                return b""
            return self._event(
                "response.custom_tool_call_input.delta",
                {"item_id": item.id, "output_index": item.index, "delta": text},
            )
        if kind == "thinking_delta" and item.kind == "reasoning":
            text = delta.get("thinking")
            if not isinstance(text, str) or not text:
                return b""
            item.pieces.append(text)
            if not self._summary:
                return b""
            out = b""
            if not item.opened:
                item.opened = True
                out = self._event(
                    "response.reasoning_summary_part.added",
                    {
                        "item_id": item.id,
                        "output_index": item.index,
                        "summary_index": 0,
                        "part": {"type": "summary_text", "text": ""},
                    },
                )
            return out + self._event(
                "response.reasoning_summary_text.delta",
                {"item_id": item.id, "output_index": item.index, "summary_index": 0, "delta": text},
            )
        if kind == "signature_delta" and item.kind == "reasoning":
            signature = delta.get("signature")
            if isinstance(signature, str):
                item.block["signature"] = signature  # replaces: it signs the whole block
        return b""

    def _on_stop(self, event: dict[str, Any]) -> bytes:
        item = self._item(event)
        if item is None or item.index < 0:
            return b""
        if self._text_index == event.get("index"):
            self._text_index = None
        position = item.index
        done: dict[str, Any]
        out = b""
        common = {"item_id": item.id, "output_index": item.index}
        if item.kind == "message":
            text = "".join(item.pieces)
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            out += self._event(
                "response.output_text.done",
                {**common, "content_index": 0, "text": text, "logprobs": []},
            )
            out += self._event(
                "response.content_part.done", {**common, "content_index": 0, "part": part}
            )
            done = message_item(item.id, text)
        elif item.kind == "function_call":
            arguments = "".join(item.pieces)
            if not arguments:
                # Input given whole in content_block_start (proxies), or an argument-less call.
                tool_input = item.block.get("input")
                arguments = orjson.dumps(tool_input if tool_input else {}).decode()
                out += self._delta(item, arguments)
            upstream_name = str(item.block.get("name") or "")
            known = self._tools.get(upstream_name)
            name = known.name if known is not None else upstream_name
            out += self._event(
                "response.function_call_arguments.done",
                {**common, "arguments": arguments, "name": name},
            )
            done = function_call_item(
                item.id,
                str(item.block.get("id") or ""),
                name,
                arguments,
                namespace=known.namespace if known is not None else None,
            )
        elif item.kind == "custom_tool_call":
            done = tool_call_item(
                str(item.block.get("name") or ""),
                str(item.block.get("id") or ""),
                _custom_arguments(item),
                self._request_id,
                position,
                self._tools,
            )
            text = done["input"]
            # What the streamed deltas have not carried yet (all of it when the input was not
            # of the streamable shape); the .done event has the whole text in any case.
            sent = item.decoder.text if item.decoder is not None else ""
            rest = text[len(sent) :] if text.startswith(sent) else ""
            if rest:
                out += self._event(
                    "response.custom_tool_call_input.delta", {**common, "delta": rest}
                )
            out += self._event("response.custom_tool_call_input.done", {**common, "input": text})
        else:
            block = item.block
            if block.get("type") == "thinking":
                block["thinking"] = "".join(item.pieces)
            done = reasoning_item(block, item.id, self._seal, self._summary)
            if item.opened:
                text = block.get("thinking") or ""
                out += self._event(
                    "response.reasoning_summary_text.done",
                    {**common, "summary_index": 0, "text": text},
                )
                out += self._event(
                    "response.reasoning_summary_part.done",
                    {**common, "summary_index": 0, "part": {"type": "summary_text", "text": text}},
                )
        self.items.append(done)
        item.index = -1  # finished: no longer counted as open
        shown = client_output([done], self._include_encrypted)[0]
        return out + self._event(
            "response.output_item.done", {"output_index": position, "item": shown}
        )


def _custom_arguments(item: _Item) -> object:
    """A custom tool call's upstream input: its streamed JSON, or the input given whole in
    content_block_start; unparsable JSON is passed on as the text itself."""
    if not item.pieces:
        return item.block.get("input") or {}
    raw = "".join(item.pieces)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {CUSTOM_INPUT: raw}
