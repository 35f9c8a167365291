"""A custom tool call's text, decoded as its JSON streams in (part of the stream translator).

Upstream, a custom tool has one string property (`{"input": "..."}`, tools.py), and its input
arrives as `input_json_delta` fragments of that JSON. `response.custom_tool_call_input.delta`
carries the text itself, so the string's characters are decoded as they arrive: escapes cut by a
fragment boundary wait for the next fragment. A body of another shape (other keys first, not an
object) streams nothing here; the whole text is then sent when the block ends.
"""

from __future__ import annotations

import re

__all__ = ["CustomInputDecoder"]

_START = re.compile(r'\s*\{\s*"input"\s*:\s*"')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class CustomInputDecoder:
    __slots__ = ("_at", "_buffer", "_done", "_started", "text")

    def __init__(self) -> None:
        self._buffer = ""  # the JSON received so far
        self._at = 0  # the next undecoded position in _buffer
        self._started = False  # the string's opening quote was found
        self._done = False  # its closing quote (or a shape it cannot stream) was found
        self.text = ""  # the characters decoded so far

    def feed(self, fragment: str) -> str:
        """The characters of the string this fragment completes ("" if none yet)."""
        self._buffer += fragment
        if self._done:
            return ""
        if not self._started:
            found = _START.match(self._buffer)
            if found is None:
                # Not yet decidable (a short prefix), or another shape: stop streaming then.
                if len(self._buffer) > 64 or not _could_start(self._buffer):
                    self._done = True
                return ""
            self._started = True
            self._at = found.end()
        out: list[str] = []
        buffer, at = self._buffer, self._at
        while at < len(buffer):
            char = buffer[at]
            if char == '"':
                self._done = True
                break
            if char != "\\":
                out.append(char)
                at += 1
                continue
            try:
                decoded, width = _escape(buffer, at)
            except ValueError:  # a malformed \u escape: the text is sent whole at the end
                self._done = True
                break
            if width == 0:
                break  # cut by the fragment boundary: wait for the rest
            out.append(decoded)
            at += width
        self._at = at
        piece = "".join(out)
        self.text += piece
        return piece


def _could_start(buffer: str) -> bool:
    """Whether `buffer` may still grow into `{"input": "`."""
    compact = re.sub(r"\s+", "", buffer)
    return '{"input":"'.startswith(compact)


def _escape(buffer: str, at: int) -> tuple[str, int]:
    """(the character, its width) of the escape at `at`; width 0 when it is not complete."""
    if at + 1 >= len(buffer):
        return "", 0
    kind = buffer[at + 1]
    if kind != "u":
        return _ESCAPES.get(kind, kind), 2
    if at + 6 > len(buffer):
        return "", 0
    code = int(buffer[at + 2 : at + 6], 16)
    if 0xD800 <= code < 0xDC00:  # a high surrogate: its low half follows as \uXXXX
        if at + 12 > len(buffer):
            return "", 0
        if buffer[at + 6 : at + 8] == "\\u":
            low = int(buffer[at + 8 : at + 12], 16)
            if 0xDC00 <= low < 0xE000:
                return chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)), 12
    return chr(code), 6
