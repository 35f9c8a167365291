"""An OpenAI-compatible provider's chat.completion.chunk stream -> Anthropic stream events.

The same idea as gateway/providers/bedrock/eventstream.py's decoder: bytes in, `SSEEvent`s out,
so the exchange sees Anthropic events whatever the provider. Input is the provider's SSE
(`data: {chunk}` … `data: [DONE]`, comments ignored, any line ending, split anywhere across
reads); output is Anthropic's order (protocol.md): `message_start`, then per content block
`content_block_start` / `content_block_delta`… / `content_block_stop` (one block open at a time,
indexes 0, 1, 2…), then `message_delta` (stop reason and usage) and `message_stop`.

- Text -> a `text` block. Reasoning (`reasoning_content` or `reasoning`, providers.md §2.4) ->
  a `thinking` block when the client asked for thinking, closed by a `signature_delta` carrying
  the gateway's own signature (mapping.GATEWAY_SIGNATURE_PREFIX + a digest of the text), so
  Claude Code keeps and replays the block and EZAT can recognise it; otherwise it is dropped
  (still counted as output: it is billed as output, §2.1).
- Tool calls -> `tool_use` blocks, one per tool-call `index` in order, the provider's id kept,
  the name mapped back through `tool_names` (§3.1: `id`/`name` come once, first; `arguments`
  are fragments). A call whose name has not arrived yet is held until it does. The block opens
  at once; its argument fragments are collected and sent as ONE `input_json_delta` when the
  block closes, once they are known to be a JSON object (providers.md §7 item 11: vLLM's tool
  parsers can emit broken JSON, and the Anthropic SDKs parse every `partial_json` as it comes,
  so one bad fragment would break the client's stream). Arguments that are not a JSON object
  are sent as `{"_invalid_arguments": "<the text>"}`, as reply.py does; empty ones send no
  delta (the input stays `{}`).
- The provider sends usage in a chunk of its own (`choices: []`) after the finish reason, only
  because request.py always asks for `include_usage` (§1.3). So `message_delta` waits for it,
  and is sent when it arrives or at `[DONE]`. A server that sends no usage gets the estimate
  of mapping.estimated_usage, and `usage_reported` stays False.
- A chunk `{"error": …}` -> an Anthropic `error` event, and the stream is over.
- Unreadable JSON raises `ChatStreamError`, a ConnectionError (an OSError, which the exchange
  already treats as a broken upstream), as eventstream.py's FramingError does.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.protocols.anthropic.sse import SSEEvent, SSEParser

from .errors import redact
from .mapping import (
    GATEWAY_SIGNATURE_PREFIX,
    anthropic_usage,
    arguments_json,
    error_type,
    estimated_usage,
    new_digest,
    reasoning_of,
    signature,
    stop_reason,
)
from .signatures import signature_of, tool_use_id

__all__ = ["GATEWAY_SIGNATURE_PREFIX", "ChatStreamDecoder", "ChatStreamError"]

_DONE = b"[DONE]"
_TEXT, _THINKING, _TOOL = "text", "thinking", "tool_use"


class ChatStreamError(ConnectionError):
    """The provider's stream cannot be read (bad JSON, a chunk that is not an object, tool
    calls interleaved, or an end with no chunk at all)."""


def _event(name: str, data: bytes) -> SSEEvent:
    return SSEEvent(name, data, b"event: " + name.encode() + b"\ndata: " + data + b"\n\n")


def _delta_prefix(index: int, kind: str, field: str) -> bytes:
    return b'{"type":"content_block_delta","index":%d,"delta":{"type":"%s","%s":' % (
        index,
        kind.encode(),
        field.encode(),
    )


class ChatStreamDecoder:
    """Decode one provider stream for one Messages request."""

    __slots__ = (
        "_args",
        "_closed_tools",
        "_cr",
        "_delta",
        "_digest",
        "_ended",
        "_finish",
        "_index",
        "_input_estimate",
        "_message_id",
        "_model",
        "_open",
        "_parser",
        "_pending",
        "_refused",
        "_saw_tools",
        "_started",
        "_thinking",
        "_tool_id",
        "_tool_index",
        "_tool_names",
        "_usage",
        "output_chars",
        "usage_reported",
    )

    def __init__(
        self, *, model: str, tool_names: dict[str, str], thinking: bool, input_estimate: int
    ) -> None:
        self._parser = SSEParser()
        self._model = model
        self._tool_names = tool_names
        self._thinking = thinking
        self._input_estimate = input_estimate
        self._cr = False  # the last read ended in "\r": it may be half of a "\r\n"
        self._started = False
        self._ended = False
        self._message_id = ""
        self._index = -1  # of the last block opened
        self._open: str | None = None  # the kind of the open block
        self._delta = b""  # the open block's delta prefix (text and thinking)
        self._tool_index: int | None = None  # the open tool block's tool-call index
        self._tool_id: object = None  # and the id the provider gave it
        self._args: list[str] = []  # the open tool block's argument fragments, sent at its end
        self._closed_tools: set[int] = set()
        self._pending: dict[str, Any] | None = None  # a tool call whose name has not come
        self._digest: Any = None
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._saw_tools = False
        self._refused = False
        self.output_chars = 0  # text, reasoning and arguments received
        self.usage_reported = False

    # -- input ---------------------------------------------------------------------------------

    def feed(self, chunk: bytes, limit: int | None = None) -> list[SSEEvent]:
        """The Anthropic events completed by `chunk`. `limit` is ignored: all are returned."""
        # A "\r\n" split across two reads would be read as two line ends (SSEParser maps each
        # read's "\r" to "\n"): the "\n" that completes the previous read's "\r" is dropped.
        if self._cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        if chunk:
            self._cr = chunk[-1:] == b"\r"
        events: list[SSEEvent] = []
        for sse in self._parser.feed(chunk):
            data = sse.data.strip()
            if not data:
                continue
            if data == _DONE:
                self._done(events)
                continue
            if self._ended:
                continue  # nothing after the end counts (a late usage chunk, a repeat)
            try:
                parsed = orjson.loads(data)
            except orjson.JSONDecodeError:
                raise ChatStreamError("the provider sent a stream chunk that is not JSON") from None
            if not isinstance(parsed, dict):
                raise ChatStreamError("the provider sent a stream chunk that is not an object")
            error = parsed.get("error")
            if error:
                self._error(error, events)
            else:
                self._chunk(parsed, events)
        return events

    def close(self) -> list[SSEEvent]:
        """For a stream whose connection ended without `[DONE]`: the closing events when the
        finish reason had come (some servers stop there), else ChatStreamError."""
        events: list[SSEEvent] = []
        if not self._ended:
            if self._finish is None:
                raise ChatStreamError("the provider's stream ended before its finish reason")
            self._end(events)
        return events

    @property
    def ended(self) -> bool:
        return self._ended

    # -- chunks --------------------------------------------------------------------------------

    def _chunk(self, chunk: dict[str, Any], events: list[SSEEvent]) -> None:
        if not self._started:
            self._start(chunk, events)
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # n > 1 is not asked for; only the first choice is an answer
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta_in(delta, events)
            finish = choice.get("finish_reason")
            if finish:
                self._finish = str(finish)
                self._flush_pending(events)
                self._close(events)
        usage = chunk.get("usage")
        if isinstance(usage, dict) and usage:
            self._usage = usage
        if self._finish is not None and self._usage is not None:
            self._end(events)

    def _start(self, chunk: dict[str, Any], events: list[SSEEvent]) -> None:
        self._started = True
        provider_id = chunk.get("id")
        if isinstance(provider_id, str) and provider_id:
            self._message_id = "msg_" + provider_id
        else:
            # No id from the provider: one derived from the chunk, so the same input gives the
            # same output (no randomness in a translator).
            digest = new_digest()
            digest.update(orjson.dumps(chunk, option=orjson.OPT_SORT_KEYS))
            self._message_id = "msg_" + digest.hexdigest()
        message = {
            "id": self._message_id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self._input_estimate, "output_tokens": 0},
        }
        events.append(
            _event("message_start", orjson.dumps({"type": "message_start", "message": message}))
        )

    def _delta_in(self, delta: dict[str, Any], events: list[SSEEvent]) -> None:
        reasoning = reasoning_of(delta)
        if reasoning:
            self.output_chars += len(reasoning)
            if self._thinking:
                self._text_like(_THINKING, reasoning, events)
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.output_chars += len(content)
            self._text_like(_TEXT, content, events)
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._refused = True
            self.output_chars += len(refusal)
            self._text_like(_TEXT, refusal, events)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if isinstance(call, dict):
                    self._tool_delta(call, events)

    def _text_like(self, kind: str, text: str, events: list[SSEEvent]) -> None:
        if self._open != kind:
            self._flush_pending(events)
            self._close(events)
            self._index += 1
            self._open = kind
            if kind == _THINKING:
                block: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
                self._delta = _delta_prefix(self._index, "thinking_delta", "thinking")
                self._digest = new_digest()
            else:
                block = {"type": "text", "text": ""}
                self._delta = _delta_prefix(self._index, "text_delta", "text")
            self._block_start(block, events)
        if kind == _THINKING:
            self._digest.update(text.encode())
        events.append(_event("content_block_delta", self._delta + orjson.dumps(text) + b"}}"))

    def _tool_delta(self, call: dict[str, Any], events: list[SSEEvent]) -> None:
        self._saw_tools = True
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        name = function.get("name")
        arguments = function.get("arguments")
        arguments = arguments if isinstance(arguments, str) else ""
        self.output_chars += len(arguments)
        index = call.get("index")
        if type(index) is not int:
            index = self._implied_index(call.get("id"))
        if self._open == _TOOL and index == self._tool_index:
            if arguments:
                self._args.append(arguments)
            return
        if index in self._closed_tools:
            raise ChatStreamError(
                f"the provider interleaved tool call {index} with another one; "
                "Anthropic tool_use blocks cannot be reopened"
            )
        pending = self._pending
        if pending is not None and pending["index"] == index:
            pending["id"] = pending["id"] or call.get("id")
            pending["sig"] = pending["sig"] or signature_of(call)
            pending["args"].append(arguments)
            if isinstance(name, str) and name:
                pending["name"] = name
                self._flush_pending(events)
            return
        self._flush_pending(events)
        pending = {
            "index": index,
            "id": call.get("id"),
            "sig": signature_of(call),
            "name": name,
            "args": [arguments],
        }
        self._pending = pending
        if isinstance(name, str) and name:
            self._flush_pending(events)

    def _implied_index(self, call_id: object) -> int:
        """For servers that leave `index` out: a new id starts a new call, else the current."""
        pending = self._pending
        current = pending["index"] if pending else self._tool_index
        current_id = pending["id"] if pending else self._tool_id
        if current is not None and (not call_id or call_id == current_id):
            return current
        used = [*self._closed_tools, *([current] if current is not None else [])]
        return max(used, default=-1) + 1

    def _flush_pending(self, events: list[SSEEvent]) -> None:
        """Open the held tool call's block (with whatever name it has by now)."""
        pending = self._pending
        if pending is None:
            return
        self._pending = None
        self._close(events)
        self._index += 1
        self._open = _TOOL
        self._tool_index = pending["index"]
        call_id = pending["id"]
        self._tool_id = call_id
        if not isinstance(call_id, str) or not call_id:
            call_id = f"toolu_{self._message_id[4:]}_{pending['index']}"
        name = pending["name"] if isinstance(pending["name"], str) else ""
        self._delta = _delta_prefix(self._index, "input_json_delta", "partial_json")
        block = {
            "type": "tool_use",
            "id": tool_use_id(call_id, pending["sig"]),  # with Gemini's signature: signatures.py
            "name": self._tool_names.get(name, name),
            "input": {},
        }
        self._block_start(block, events)
        self._args = pending["args"]

    def _block_start(self, block: dict[str, Any], events: list[SSEEvent]) -> None:
        payload = {"type": "content_block_start", "index": self._index, "content_block": block}
        events.append(_event("content_block_start", orjson.dumps(payload)))

    def _close(self, events: list[SSEEvent]) -> None:
        kind = self._open
        if kind is None:
            return
        if kind == _THINKING:
            delta = {"type": "signature_delta", "signature": signature(self._digest)}
            payload = {"type": "content_block_delta", "index": self._index, "delta": delta}
            events.append(_event("content_block_delta", orjson.dumps(payload)))
        elif kind == _TOOL and self._tool_index is not None:
            self._closed_tools.add(self._tool_index)
            self._tool_index = self._tool_id = None
            text = arguments_json("".join(self._args))
            self._args = []
            if text:
                fragment = orjson.dumps(text)
                events.append(_event("content_block_delta", self._delta + fragment + b"}}"))
        self._open = None
        stop = {"type": "content_block_stop", "index": self._index}
        events.append(_event("content_block_stop", orjson.dumps(stop)))

    # -- the end -------------------------------------------------------------------------------

    def _end(self, events: list[SSEEvent]) -> None:
        if self._ended:
            return
        self._flush_pending(events)
        self._close(events)
        if self._usage is not None:
            usage = anthropic_usage(self._usage)
            self.usage_reported = True
        else:
            usage = estimated_usage(self._input_estimate, self.output_chars)
        if self._refused and self._finish == "stop":
            stop = "refusal"
        else:
            stop = stop_reason(self._finish, tool_calls=self._saw_tools)
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": usage,
        }
        events.append(_event("message_delta", orjson.dumps(delta)))
        events.append(_event("message_stop", b'{"type":"message_stop"}'))
        self._ended = True

    def _done(self, events: list[SSEEvent]) -> None:
        if self._ended:
            return
        if not self._started:
            raise ChatStreamError("the provider's stream ended without a single chunk")
        self._end(events)

    def _error(self, error: object, events: list[SSEEvent]) -> None:
        error = error if isinstance(error, dict) else {"message": str(error)}
        message = error.get("message")
        text = redact(message) if isinstance(message, str) and message else "provider error"
        payload = {"type": "error", "error": {"type": error_type(error), "message": text}}
        events.append(_event("error", orjson.dumps(payload)))
        self._ended = True
