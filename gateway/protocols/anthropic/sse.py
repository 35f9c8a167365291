"""Server-Sent Events: parsing the upstream's stream and framing ours. Pure.

Every event is parsed once (orjson) and passed on as the raw bytes it arrived in, so pass-through
costs one parse per event and no re-serialisation — except `message_start`, whose `model` is
rewritten to the name the caller sent.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

PING_EVENT = b'event: ping\ndata: {"type": "ping"}\n\n'


@dataclass(slots=True)
class SSEEvent:
    name: str
    data: bytes
    raw: bytes  # the whole block including its blank-line terminator

    def json(self) -> dict:
        """The data, parsed (an event without data is an empty object)."""
        return orjson.loads(self.data) if self.data else {}


class SSEParser:
    """Incremental splitter of a byte stream into events (LF, CRLF or CR line ends)."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes, limit: int | None = None) -> list[SSEEvent]:
        """The events completed by `chunk`; with `limit`, at most that many, the others kept
        for the next call (`feed(b"")` returns them)."""
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buffer = self._buffer + chunk if self._buffer else chunk
        # One split per read instead of a find loop: a paced provider sends one event per read,
        # and this is the hot path of every streamed token (bench/README.md, open streams).
        # With a limit the split stops early: a first read that holds a whole answer costs
        # ~100 µs to split, and the first token should not wait for that (gateway/exchange.py).
        blocks = buffer.split(b"\n\n", limit) if limit else buffer.split(b"\n\n")
        self._buffer = blocks.pop()  # the rest not split (b"" when the read ended an event)
        events: list[SSEEvent] = []
        for block in blocks:
            # The provider's shape, `event: NAME\ndata: JSON`, without the general line loop.
            if block[:7] == b"event: ":
                cut = block.find(b"\n", 7)
                if (
                    cut > 0
                    and block[cut : cut + 7] == b"\ndata: "
                    and block.find(b"\n", cut + 7) < 0
                ):
                    name = block[7:cut].decode()
                    events.append(SSEEvent(name, block[cut + 7 :], block + b"\n\n"))
                    continue
            event = _parse_block(block)
            if event is not None:
                events.append(event)
        return events

    @property
    def pending(self) -> bytes:
        return self._buffer


def _parse_block(block: bytes) -> SSEEvent | None:
    name = ""
    data_lines: list[bytes] = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            data_lines.append(line[6:] if line[5:6] == b" " else line[5:])
        elif line.startswith(b"event:"):
            name = (line[7:] if line[6:7] == b" " else line[6:]).decode()
        # comments (":") and id/retry lines are ignored
    if not data_lines and not name:
        return None
    data = data_lines[0] if len(data_lines) == 1 else b"\n".join(data_lines)
    return SSEEvent(name=name, data=data, raw=block + b"\n\n")


def frame(name: str, payload: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def error_event(error_type: str, message: str, request_id: str | None = None) -> bytes:
    payload: dict[str, object] = {
        "type": "error",
        "error": {"type": error_type, "message": message},
    }
    if request_id:
        payload["request_id"] = request_id
    return frame("error", payload)


CONTENT_EVENTS = frozenset({"content_block_start", "content_block_delta", "content_block_stop"})
