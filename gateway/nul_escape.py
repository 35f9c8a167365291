"""Stored responses keep NUL (U+0000) exactly, though PostgreSQL's jsonb cannot hold it. Pure.

A Responses request whose input or metadata held a NUL got its answer and its id, but the row
was refused by PostgreSQL ("unsupported Unicode escape sequence") and a continuation then found
nothing (issue 31). The alternative, refusing such a request with a 400 up front, would make
`store` (on by default) change which inputs are accepted: a NUL is a valid JSON string
character, the provider takes it, and the same request with `store: false` is answered. So the
value is stored, encoded losslessly, because a continuation must rebuild the exact turn (the
provider's prompt cache matches bytes); a stand-in character would change the conversation.

Encoding, only for a value that holds a NUL (every other value is stored exactly as it was):
in every string (keys too), U+E000 (a private-use character) becomes U+E000 "1" and then NUL
becomes U+E000 "0"; the result is wrapped as `{WRAPPER: value}`. Decoding unwraps and reverses
both in one pass. The wrapper key cannot collide with what is stored: the values are the
gateway's own response and context objects, whose top-level keys it chooses.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

WRAPPER = "ezat_nul_escaped"
_NUL = "\x00"
_MARK = "\ue000"
_ESCAPED = re.compile(_MARK + "([01])")


def holds_nul(value: Any) -> bool:
    # orjson writes NUL as \u0000 (a C pass; walking a 40k-token context in Python costs more).
    try:
        return b"\\u0000" in orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:  # a value orjson does not write (an integer past 64 bits)
        return _walk_finds_nul(value)


def _walk_finds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return _NUL in value
    if isinstance(value, list):
        return any(_walk_finds_nul(v) for v in value)
    if isinstance(value, dict):
        return any(_walk_finds_nul(k) or _walk_finds_nul(v) for k, v in value.items())
    return False


def encode(value: Any) -> Any:
    """`value` as PostgreSQL can store it: unchanged unless it holds a NUL."""
    if not holds_nul(value):
        return value
    return {WRAPPER: _map(value, _escape)}


def decode(value: Any) -> Any:
    """The value `encode` was given."""
    if isinstance(value, dict) and len(value) == 1 and WRAPPER in value:
        return _map(value[WRAPPER], _unescape)
    return value


def _escape(text: str) -> str:
    if _MARK in text:
        text = text.replace(_MARK, _MARK + "1")
    return text.replace(_NUL, _MARK + "0") if _NUL in text else text


def _unescape(text: str) -> str:
    if _MARK not in text:
        return text
    return _ESCAPED.sub(lambda m: _NUL if m.group(1) == "0" else _MARK, text)


def _map(value: Any, convert: Any) -> Any:
    if isinstance(value, str):
        return convert(value)
    if isinstance(value, list):
        return [_map(v, convert) for v in value]
    if isinstance(value, dict):
        return {
            (convert(k) if isinstance(k, str) else k): _map(v, convert) for k, v in value.items()
        }
    return value
