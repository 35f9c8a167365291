"""Gemini's thought signatures through the Messages API (pure): Claude Code on Gemini 3 behind its
OpenAI-compatible endpoint.

Google's thought-signatures guide (https://ai.google.dev/gemini-api/docs/thought-signatures):
Gemini 3 returns a thought signature with a response's function call, and "you must pass back
thought signatures during function calling, otherwise you will get a validation error (4xx
status code)". On the OpenAI-compatible endpoint the signature is the tool call's
`extra_content.google.thought_signature` (continuedev/continue#8865 and crmne/ruby_llm#588 read
and send it there; shared/reference/providers.md §2.3). A Messages client has no field for it
and sends back only what a `tool_use` block holds.

So the signature travels inside the block's id, which every client returns verbatim (in the
`tool_use` block it replays and in its `tool_result`'s `tool_use_id`): the provider's call id,
`__sig_`, then the signature in unpadded base64url, so the id keeps to the characters Anthropic
ids use (`[A-Za-z0-9_-]`). LiteLLM carries it the same way (its `__thought__` ids). The
request builder splits the id again: the provider's own id goes out, with the signature as
`extra_content`. Stateless: any gateway process serves the next turn, nothing is stored, and
a signature can only come back to the conversation it was given to.

A history without a signature (a turn answered by another model, or by a provider that gives
none) on a Gemini 3 or later model gets the placeholder the guide names for such histories,
`skip_thought_signature_validator`, on the first call of each assistant turn (where Gemini
validates one; continue#8865 does the same).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from gateway.protocols.openai_responses.items import SIGNED_CALL_ID_MARK

__all__ = [
    "MARK",
    "SKIP_VALIDATOR",
    "outgoing_call",
    "signature_of",
    "split_tool_use_id",
    "tool_use_id",
    "wants_placeholder",
]

MARK = SIGNED_CALL_ID_MARK  # "__sig_"; the Responses API takes such call_ids past 64 characters
SKIP_VALIDATOR = "skip_thought_signature_validator"
_GEMINI = re.compile(r"(?:^|/)gemini-(\d+)")


def signature_of(call: dict[str, Any]) -> str | None:
    """The thought signature on a provider's tool call (or one of its stream deltas)."""
    extra = call.get("extra_content")
    google = extra.get("google") if isinstance(extra, dict) else None
    signature = google.get("thought_signature") if isinstance(google, dict) else None
    return signature if isinstance(signature, str) and signature else None


def tool_use_id(call_id: str, signature: str | None) -> str:
    """The Messages `tool_use` id for a provider's call: its id, with the signature when the
    signature is base64 (a Gemini signature is; anything else cannot ride losslessly)."""
    if signature is None:
        return call_id
    try:
        raw = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        return call_id
    if base64.b64encode(raw).decode() != signature:
        return call_id  # not in canonical form: it would not come back byte for byte
    return call_id + MARK + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def split_tool_use_id(tool_id: str) -> tuple[str, str | None]:
    """The provider's call id and its thought signature (None when the id carries none)."""
    call_id, mark, packed = tool_id.partition(MARK)
    if not mark or not call_id:
        return tool_id, None
    try:
        raw = base64.urlsafe_b64decode(packed + "=" * (-len(packed) % 4))
    except (binascii.Error, ValueError):
        return tool_id, None
    return call_id, base64.b64encode(raw).decode()


def wants_placeholder(model: object) -> bool:
    """Whether the provider's model is Gemini 3 or later, which refuses a current turn whose
    function calls carry no signature."""
    match = _GEMINI.search(model) if isinstance(model, str) else None
    return match is not None and int(match.group(1)) >= 3


def outgoing_call(tool_id: str, first: bool, placeholder: bool) -> tuple[str, dict[str, Any]]:
    """The Chat tool call's id and the `extra_content` to send with it ({} for none): the
    signature the id carries, else the placeholder on a turn's first call where it is wanted."""
    call_id, signature = split_tool_use_id(tool_id)
    if signature is None and first and placeholder:
        signature = SKIP_VALIDATOR
    if signature is None:
        return call_id, {}
    return call_id, {"google": {"thought_signature": signature}}
