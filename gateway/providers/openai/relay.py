"""Chat Completions relayed as they are: the body forwarded, the provider's chunks passed on.

A Chat Completions client calling an OpenAI-kind model is not translated (two lossy hops would
drop fields: logprobs, n, audio, annotations, anything a provider adds). The exchange still has
to see the stream in the internal dialect (gateway/dialect.py) to commit, fail over, bill and
log, so `RelayDecoder` names each provider chunk by what it means in Anthropic's vocabulary and
keeps the chunk's own bytes as the event's `raw`, which is what the client gets:

| provider chunk                         | event (data, for the exchange)      | raw        |
|----------------------------------------|-------------------------------------|------------|
| the first chunk                        | message_start (input estimate)      | the chunk  |
| a choices delta (content, tool calls)  | content_block_delta (its text)      | the chunk  |
| `"usage": {...}` (include_usage)       | message_delta (usage, stop reason)  | the chunk* |
| `{"error": {...}}`                     | error                               | the chunk  |
| `[DONE]`                               | message_stop                        | `[DONE]`   |

(*) a chunk holding both a delta and the usage gives two events, the usage one with empty raw.

The hot path: the chunks after the first text chunk that differ from it only in their text (a
provider repeats the id, model and fingerprint in each) are not parsed, and those of one read
become one content_block_delta holding their bytes and their texts joined (`_template_of`).
That made the relay's reading cheaper than the Claude path's (bench/README.md, "OpenAI-kind
paths beside the Claude path"; `python -m bench.instr_relay`). Pure: no Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.protocols.anthropic.sse import SSEEvent
from gateway.providers.openai.mapping import anthropic_usage, error_type, reasoning_of

DONE = b"data: [DONE]\n\n"


class RelayStreamError(ConnectionError):
    """The provider sent a chunk that is not JSON: the stream is broken, like a cut one."""


@dataclass(frozen=True, slots=True)
class RelayState:
    """What the relay of one call needs to know: the prompt estimate for a stream cut before
    its usage arrives."""

    input_estimate: int


class RelayEvent(SSEEvent):
    """An event whose data is already a dict: the exchange reads it without a serialise and a
    second parse per chunk (bench/README.md measured both on the relay's hot path)."""

    __slots__ = ("parsed",)

    def __init__(self, name: str, data: bytes, raw: bytes, parsed: Any = None) -> None:
        # One call instead of the dataclass's and an attribute set (one event per read or
        # chunk); `RelayEvent(name, b"", raw)` then `.parsed = ...` works as before.
        self.name = name
        self.data = data
        self.raw = raw
        self.parsed = parsed

    def json(self) -> dict[str, Any]:
        return self.parsed


NO_TEMPLATE = (b"", b"", b"")


class RelayDecoder:
    """Written for the hot path (one call per streamed chunk). The first text chunk is parsed
    and taken as the stream's template (`_template_of`); the chunks after it that differ from
    it only in their text are read without a parse, and those of one read go out as one event
    (their bytes as they came, their texts joined): a provider repeats the id, model and
    fingerprint in every chunk, so only the text changes (bench/README.md, "OpenAI-kind paths
    beside the Claude path")."""

    __slots__ = ("_buffer", "_estimate", "_finish", "_started", "_template")

    def __init__(self, input_estimate: int) -> None:
        self._buffer = b""
        self._estimate = input_estimate
        self._started = False
        self._finish: str | None = None
        # (before the text, after it, after it with the block's end): see `_template_of`.
        self._template = NO_TEMPLATE

    def feed(self, chunk: bytes, limit: int | None = None) -> list[SSEEvent]:
        prefix, suffix, ending = self._template
        if prefix and not self._buffer and chunk.startswith(prefix) and chunk.endswith(ending):
            # A read of one plain chunk (a paced provider's every token): no split either.
            # `_plain_text` inlined for ASCII (other text takes the general path below): this
            # is the per-token path of every paced stream.
            end = len(chunk) - len(ending)
            middle = chunk[len(prefix) : end]
            if end >= len(prefix) and middle.isascii() and b'"' not in middle:
                text = middle.decode()
                if b"\\" not in middle and text.isprintable():
                    delta = {"delta": {"type": "text_delta", "text": text}}
                    return [RelayEvent("content_block_delta", b"", chunk, delta)]
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        blocks = (self._buffer + chunk if self._buffer else chunk).split(b"\n\n")
        self._buffer = blocks.pop()
        events: list[SSEEvent] = []
        # A run of plain chunks: their bytes and texts, one event when it ends.
        run: list[bytes] = []
        texts: list[str] = []
        for block in blocks:
            if prefix and block.startswith(prefix) and block.endswith(suffix):
                text = _plain_text(block, len(prefix), len(suffix))
                if text is not None:
                    run.append(block)
                    texts.append(text)
                    continue
            if run:
                events.append(_run_event(run, texts))
                run, texts = [], []
            if block[:6] == b"data: " and b"\n" not in block:
                # The shape every provider sends, one data line: it may set the template.
                self._chunk(block[6:], events, one_line=True)
                prefix, suffix, ending = self._template
                continue
            data = b"".join(
                line[6:] if line[5:6] == b" " else line[5:]
                for line in block.split(b"\n")
                if line.startswith(b"data:")
            )
            if data:
                self._chunk(data, events)
        if run:
            events.append(_run_event(run, texts))
        return events

    def _chunk(self, data: bytes, events: list[SSEEvent], one_line: bool = False) -> None:
        if data == b"[DONE]":
            events.append(RelayEvent("message_stop", b"", DONE, {"type": "message_stop"}))
            return
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise RelayStreamError("the provider sent a chunk that is not JSON") from None
        if type(parsed) is not dict:
            raise RelayStreamError("the provider sent a chunk that is not a JSON object")
        raw = b"data: " + data + b"\n\n"
        error = parsed.get("error")
        if error is not None and isinstance(error, dict):
            message = str(error.get("message") or "the provider reported an error")
            body = {"type": "error", "error": {"type": error_type(error), "message": message}}
            events.append(RelayEvent("error", b"", raw, body))
            return
        choices = parsed.get("choices")
        text: str | None = None
        if choices and type(choices) is list:
            text = self._choices_text(choices)
        if not self._started:
            self._started = True
            usage = {"input_tokens": self._estimate, "output_tokens": 0}
            events.append(RelayEvent("message_start", b"", raw, {"message": {"usage": usage}}))
            raw = b""  # the chunk goes out once, with its message_start
            if not text:
                # A role-only first chunk is not content yet: the exchange may still fail
                # over until a token comes (nothing reached the client).
                text = None
        if text is not None:
            delta_body = {"delta": {"type": "text_delta", "text": text}}
            events.append(RelayEvent("content_block_delta", b"", raw, delta_body))
            if raw and one_line and self._template is NO_TEMPLATE:
                self._template = _template_of(data, parsed, text)
            raw = b""
        usage = parsed.get("usage")
        if usage is not None and isinstance(usage, dict):
            body = {"usage": anthropic_usage(usage), "delta": {"stop_reason": self._finish}}
            events.append(RelayEvent("message_delta", b"", raw, body))
        elif raw:
            # A chunk with neither choices nor usage (a provider's own keep-alive object): it
            # still goes to the client, counted as nothing.
            events.append(RelayEvent("content_block_delta", b"", raw, {"delta": {}}))

    def _choices_text(self, choices: list[Any]) -> str:
        """The text the choices' deltas produced (for estimating the output of a stream cut
        before its usage); remembers their finish reason."""
        text = ""
        for choice in choices:
            if type(choice) is not dict:
                continue
            finish = choice.get("finish_reason")
            if finish is not None and isinstance(finish, str):
                self._finish = finish
            delta = choice.get("delta")
            if not delta or type(delta) is not dict:
                continue
            content = delta.get("content")
            if content and type(content) is str:
                text += content
                if len(delta) <= 2:  # content and role at most: nothing else produced
                    continue
            text += _other_text(delta)
        return text


_CONTENT = b'"delta":{"content":"'


def _template_of(data: bytes, parsed: dict[str, Any], text: str) -> tuple[bytes, bytes, bytes]:
    """The chunk's bytes before and after its text, if it is a plain text chunk: one choice
    whose delta holds the content (and at most a role), no finish reason, no usage, the text
    written without escapes. Then a block `prefix + T + suffix`, T free of quotes, backslashes
    and control characters, is valid JSON that parses to this chunk with T as its content, so
    the slow path would give the same event with T as its text: the fast path skips the parse
    (tests/gateway/providers/test_openai_relay_decoder.py checks the two agree on generated
    chunks)."""
    choices = parsed["choices"]
    if len(choices) != 1 or parsed.get("usage") is not None:
        return NO_TEMPLATE
    choice = choices[0]
    delta = choice.get("delta") if type(choice) is dict else None
    if type(delta) is not dict or choice.get("finish_reason") is not None:
        return NO_TEMPLATE
    if len(delta) > 2 or delta.get("content") != text:
        return NO_TEMPLATE
    if len(delta) == 2 and "role" not in delta:
        return NO_TEMPLATE
    start = data.find(_CONTENT)
    if start < 0 or data.find(_CONTENT, start + 1) >= 0:
        return NO_TEMPLATE
    start += len(_CONTENT)
    end = data.find(b'"', start)
    if data[start:end] != text.encode() or _plain_text(data, start, len(data) - end) is None:
        return NO_TEMPLATE
    return (b"data: " + data[:start], data[end:], data[end:] + b"\n\n")


def _plain_text(block: bytes, before: int, after: int) -> str | None:
    """The text between a template's two halves (`before` and `after` bytes long, both checked
    by the caller), if the block is the template's chunk with it as its content: a JSON
    string's body needing no unescaping (no quote, no backslash, no control character;
    `isprintable` also refuses a few valid ones, which then take the full parse)."""
    end = len(block) - after
    if end < before:
        return None  # the halves overlap: not the template's shape
    middle = block[before:end]
    if b'"' in middle or b"\\" in middle:
        return None
    try:
        text = middle.decode()
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() else None


def _run_event(run: list[bytes], texts: list[str]) -> SSEEvent:
    """Consecutive plain text chunks as one event: their texts and their bytes as they came."""
    text = texts[0] if len(texts) == 1 else "".join(texts)
    return RelayEvent("content_block_delta", b"", b"\n\n".join(run) + b"\n\n", _text_delta(text))


def _text_delta(text: str) -> dict[str, Any]:
    return {"delta": {"type": "text_delta", "text": text}}


def _other_text(delta: dict[str, Any]) -> str:
    """What a delta produced besides its content: reasoning and tool-call arguments."""
    parts = [reasoning_of(delta)]
    for call in delta.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and isinstance(function.get("arguments"), str):
            parts.append(function["arguments"])
    return "".join(parts)


def rename_model(raw: bytes, server: bytes, client: bytes) -> bytes:
    """One chunk with the provider's model name (`server`, JSON-encoded) replaced by the one
    the client sent; `ModelRename` does a whole stream's reads with its tokens built once."""
    if server == client:
        return raw
    raw = raw.replace(b'"model":' + server, b'"model":' + client)
    if b'"model": ' in raw:
        raw = raw.replace(b'"model": ' + server, b'"model": ' + client)
    return raw


class ModelRename:
    """The provider's model name replaced by the one the client sent, in a stream's bytes.
    Providers write `"model":"x"` (OpenAI, vLLM) or `"model": "x"`; both are covered, nothing
    is parsed. The tokens are built once per stream; one call renames a whole read (the name
    never spans two chunks: each ends with a blank line)."""

    __slots__ = ("_pairs",)

    def __init__(self, server: str, client: str) -> None:
        old, new = orjson.dumps(server), orjson.dumps(client)
        self._pairs: tuple[tuple[bytes, bytes], ...] = (
            ()
            if old == new
            else (
                (b'"model":' + old, b'"model":' + new),
                (b'"model": ' + old, b'"model": ' + new),
            )
        )

    def __call__(self, raw: bytes) -> bytes:
        for old, new in self._pairs:
            raw = raw.replace(old, new)
        return raw
