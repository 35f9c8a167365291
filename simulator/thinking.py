"""Thinking-block signatures and the real API's rules for sending them back."""

from __future__ import annotations

import base64
import contextvars
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from typing import Any

THINKING_ON = frozenset({"enabled", "adaptive"})

# Per process, so signatures from another simulator instance are rejected like foreign ones on
# the real API. EZAT_SIM_SECRET pins it when several processes must accept each other's blocks.
_SECRET = os.environ.get("EZAT_SIM_SECRET", "").encode() or secrets.token_bytes(32)

_TOOL_USE_MESSAGE = (
    "messages.{n}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{found}`."
    " When `thinking` is enabled, a final `assistant` message must start with a thinking block"
    " (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you"
    " include thinking blocks from previous turns. To avoid this requirement, disable"
    " `thinking`. Please consult our documentation at"
    " https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)


# The platform front serving the current request (simulator/platforms.py): thinking is
# signed by the platform that produced it, so a block signed on Bedrock is refused by Vertex or
# the Anthropic API, as the real platforms refuse each other's signatures.
SIGNING_PLATFORM: contextvars.ContextVar[str] = contextvars.ContextVar(
    "ezat_sim_signing_platform", default="anthropic"
)


def sign(thinking: str) -> str:
    """Signature of a thinking block as sent to the client (text included)."""
    platform = SIGNING_PLATFORM.get()
    key = _SECRET if platform == "anthropic" else _SECRET + platform.encode()
    digest = hmac.new(key, thinking.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def verify(thinking: str, signature: str) -> bool:
    return hmac.compare_digest(sign(thinking), signature)


def thinking_enabled(body: Mapping[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, Mapping) and thinking.get("type") in THINKING_ON


def check_history(body: Mapping[str, Any]) -> str | None:
    """Error message for bad thinking blocks in the conversation, or None.

    Every thinking block sent back must carry a valid signature (thinking blocks must be returned
    unmodified). With thinking on, the LAST assistant turn, if it used tools, must start with a
    thinking block -- the real API only enforces this for the turn being continued.
    """
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    last_assistant = -1
    for n, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") != "assistant":
            continue
        last_assistant = n
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for m, block in enumerate(content):
            if not isinstance(block, Mapping) or block.get("type") != "thinking":
                continue
            text = block.get("thinking")
            signature = block.get("signature")
            if not (
                isinstance(text, str) and isinstance(signature, str) and verify(text, signature)
            ):
                return f"messages.{n}.content.{m}: Invalid `signature` in `thinking` block"

    if last_assistant < 0 or not thinking_enabled(body):
        return None
    content = messages[last_assistant].get("content")
    if not isinstance(content, list) or not content:
        return None
    has_tool_use = any(isinstance(b, Mapping) and b.get("type") == "tool_use" for b in content)
    first = content[0].get("type") if isinstance(content[0], Mapping) else None
    if has_tool_use and first not in ("thinking", "redacted_thinking"):
        return _TOOL_USE_MESSAGE.format(n=last_assistant, found=first)
    return None
