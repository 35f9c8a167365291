"""Anthropic Messages stream events -> OpenAI chat.completion.chunk SSE bytes.

Hot path: one `feed` per upstream event. Everything constant about a chunk (id, created, model,
the choice envelope) is rendered to bytes once in __init__; per event only the delta is dumped.

Rules that keep openai-python's stream helper happy (protocol.md 2.7): it CONCATENATES repeated
string fields, so `role`, a tool call's `id` and `function.name` are sent exactly once; tool-call
indexes count tool calls only (0, 1, 2, ...), never Anthropic block indexes; keep-alives are SSE
comments, never data lines; no `id:` SSE fields are ever sent.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson

from gateway.protocols.anthropic.usage import absorb_usage

from .outbound import finish_reason, map_usage

__all__ = ["ChatStreamTranslator"]

_TEXT = -1  # block kinds in _blocks; tool_use blocks store their tool-call index (>= 0)
_THINKING = -2


class ChatStreamTranslator:
    """Translate one Anthropic event stream for one chat.completions request."""

    DONE: ClassVar[bytes] = b"data: [DONE]\n\n"
    PING: ClassVar[bytes] = b": ping\n\n"

    __slots__ = (
        "_blocks",
        "_finish_sent",
        "_include_usage",
        "_pending_input",
        "_prefix",
        "_role_chunk",
        "_suffix",
        "_tail",
        "_thinking",
        "_tool_count",
        "_tool_ids",
        "_usage_prefix",
        "finished",
        "output_chars",
        "started",
        "stop_reason",
        "usage",
    )

    def __init__(
        self, *, request_id: str, model_name: str, created: int, include_usage: bool
    ) -> None:
        head = orjson.dumps(
            {
                "id": "chatcmpl-" + request_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model_name,
            }
        )[:-1]  # drop the closing brace: choices follow
        self._prefix = b"data: " + head + b',"choices":[{"index":0,"delta":'
        # With include_usage every chunk before the usage chunk carries `"usage": null`
        # (OpenAI does; the openai-openapi `CreateChatCompletionStreamResponse` and strict
        # clients generated from it expect the key on every chunk of such a stream).
        self._tail = b',"usage":null}\n\n' if include_usage else b"}\n\n"
        self._suffix = b',"logprobs":null,"finish_reason":null}]' + self._tail
        self._usage_prefix = b"data: " + head + b',"choices":[],"usage":'
        self._role_chunk = self._prefix + b'{"role":"assistant","content":""}' + self._suffix
        self._include_usage = include_usage
        # Anthropic block index -> _TEXT, _THINKING or the tool-call index.
        self._blocks: dict[int, int] = {}
        self._tool_count = 0
        self._tool_ids: list[str] = []
        # tool-call index -> input given whole in content_block_start (sent at block stop if no
        # input_json_delta arrives; Anthropic itself always streams it, but proxies may not).
        self._pending_input: dict[int, Any] = {}
        # Thinking blocks in order: [type, text pieces | data, signature]; pieces are joined
        # lazily so long thinking does not cost quadratic string concatenation.
        self._thinking: list[list[Any]] = []
        self._finish_sent = False
        self.usage: dict[str, Any] = {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        }
        self.stop_reason: str | None = None
        self.finished = False
        self.started = False
        self.output_chars = 0

    # -- public API -------------------------------------------------------------------------

    def feed(self, event: dict[str, Any]) -> bytes:
        """Translate one parsed upstream event into zero or more complete SSE blocks."""
        kind = event.get("type")
        if kind == "content_block_delta":
            return self._delta(event)
        if kind == "content_block_start":
            return self._block_start(event)
        if kind == "content_block_stop":
            return self._block_stop(event)
        if kind == "message_start":
            absorb_usage(self.usage, event)
            return self._begin()
        if kind == "message_delta":
            stop_reason = absorb_usage(self.usage, event)
            if stop_reason is None:
                return b""
            self.stop_reason = stop_reason
            return self._finish()
        if kind == "message_stop":
            self.finished = True
            return self._finish()
        # ping: the gateway sends its own `: ping` comments; error: the gateway calls
        # error_chunk; anything else is a new event type, which clients must ignore.
        return b""

    def usage_chunk(self) -> bytes:
        """The final `choices: []` chunk carrying usage, if the client asked for it."""
        if not self._include_usage:
            return b""
        return self._usage_prefix + orjson.dumps(map_usage(self.usage)) + b"}\n\n"

    def error_chunk(self, message: str, type_: str, code: str | None) -> bytes:
        """A mid-stream error; openai-python raises APIError on a data line with `error`."""
        error = {"message": message, "type": type_, "param": None, "code": code}
        return b"data: " + orjson.dumps({"error": error}) + b"\n\n"

    @property
    def thinking_blocks_by_tool_id(self) -> dict[str, list[dict[str, Any]]]:
        """Thinking of this reply keyed by each of its tool call ids (see outbound)."""
        if not self._thinking or not self._tool_ids:
            return {}
        blocks: list[dict[str, Any]] = []
        for kind, content, signature in self._thinking:
            if kind == "thinking":
                blocks.append({"type": kind, "thinking": "".join(content), "signature": signature})
            else:
                blocks.append({"type": kind, "data": content})
        return {tool_id: list(blocks) for tool_id in self._tool_ids}

    # -- event handlers ---------------------------------------------------------------------

    def _begin(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        return self._role_chunk

    def _chunk(self, delta: dict[str, Any]) -> bytes:
        out = self._prefix + orjson.dumps(delta) + self._suffix
        # A stream without message_start still owes the client its role chunk first.
        return out if self.started else self._begin() + out

    def _delta(self, event: dict[str, Any]) -> bytes:
        delta = event.get("delta")
        if not isinstance(delta, dict):
            return b""
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if not text or not isinstance(text, str):
                return b""
            self.output_chars += len(text)
            return self._chunk({"content": text})
        if kind == "input_json_delta":
            fragment = delta.get("partial_json")
            index = self._block_kind(event)
            if index is None or index < 0 or not fragment or not isinstance(fragment, str):
                return b""  # Anthropic's first fragment is often ""; nothing to send
            self._pending_input.pop(index, None)
            self.output_chars += len(fragment)
            return self._chunk(
                {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}
            )
        if kind == "thinking_delta" or kind == "signature_delta":
            entry = self._thinking_entry(event)
            if entry is not None:
                if kind == "thinking_delta":
                    text = delta.get("thinking")
                    if isinstance(text, str):
                        entry[1].append(text)
                        self.output_chars += len(text)
                else:
                    # A signature replaces, never appends (it signs the whole block).
                    signature = delta.get("signature")
                    if isinstance(signature, str):
                        entry[2] = signature
        return b""  # citations_delta and unknown deltas have no chat equivalent

    def _block_kind(self, event: dict[str, Any]) -> int | None:
        index = event.get("index")
        return self._blocks.get(index) if type(index) is int else None

    def _thinking_entry(self, event: dict[str, Any]) -> list[Any] | None:
        if self._block_kind(event) != _THINKING or not self._thinking:
            return None
        return self._thinking[-1]

    def _block_start(self, event: dict[str, Any]) -> bytes:
        block = event.get("content_block")
        index = event.get("index")
        if not isinstance(block, dict) or not isinstance(index, int):
            return b""
        kind = block.get("type")
        if kind == "text":
            self._blocks[index] = _TEXT
            text = block.get("text")
            if text and isinstance(text, str):
                self.output_chars += len(text)
                return self._chunk({"content": text})
            return self._begin()
        if kind == "tool_use":
            tool_index = self._tool_count
            self._tool_count += 1
            self._blocks[index] = tool_index
            tool_id = block.get("id")
            if isinstance(tool_id, str):
                self._tool_ids.append(tool_id)
            if block.get("input"):
                self._pending_input[tool_index] = block["input"]
            call = {
                "index": tool_index,
                "id": tool_id,
                "type": "function",
                "function": {"name": block.get("name"), "arguments": ""},
            }
            return self._chunk({"tool_calls": [call]})
        if kind == "thinking":
            self._blocks[index] = _THINKING
            text = block.get("thinking")
            pieces = [text] if isinstance(text, str) and text else []
            self.output_chars += len(text) if pieces else 0
            self._thinking.append(["thinking", pieces, block.get("signature") or ""])
        elif kind == "redacted_thinking":
            # Arrives whole in the start event; there is no delta type for it.
            self._thinking.append(["redacted_thinking", block.get("data") or "", None])
        return b""

    def _block_stop(self, event: dict[str, Any]) -> bytes:
        index = self._block_kind(event)
        if index is None or index < 0 or index not in self._pending_input:
            return b""
        arguments = orjson.dumps(self._pending_input.pop(index)).decode()
        self.output_chars += len(arguments)
        return self._chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})

    def _finish(self) -> bytes:
        # One finish chunk per stream even if several message_delta events arrive; a stream
        # that ends without a stop_reason still finishes (as "stop").
        if self._finish_sent:
            return b""
        self._finish_sent = True
        out = (
            self._prefix
            + b'{},"logprobs":null,"finish_reason":"'
            + finish_reason(self.stop_reason).encode()
            + b'"}]'
            + self._tail
        )
        return out if self.started else self._begin() + out
