"""Thinking blocks EZAT made itself, from a provider's reasoning text (gateway/providers/openai).

A Messages client that asked for thinking gets an OpenAI-kind model's `reasoning_content` as a
`thinking` block, signed with `GATEWAY_SIGNATURE_PREFIX` + a digest. Claude Code sends such
blocks back on the next turn. No provider may see them: a Chat Completions server takes no
thinking input, and Claude would refuse a signature it did not make. So they are accepted and
dropped here, before routing, whatever model the turn goes to. Pure.
"""

from __future__ import annotations

from typing import Any

GATEWAY_SIGNATURE_PREFIX = "ezat.reasoning.v1."
_MARK = GATEWAY_SIGNATURE_PREFIX.encode()


def may_hold_gateway_thinking(raw: bytes) -> bool:
    """A cheap first look at the body as sent (one bytes search)."""
    return _MARK in raw


def _made_here(block: Any) -> bool:
    if not isinstance(block, dict) or block.get("type") != "thinking":
        return False
    signature = block.get("signature")
    return isinstance(signature, str) and signature.startswith(GATEWAY_SIGNATURE_PREFIX)


def strip_gateway_thinking(body: dict[str, Any]) -> bool:
    """Drop the gateway's own thinking blocks from the assistant turns; whether any was."""
    stripped = False
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(_made_here(b) for b in content):
            kept = [b for b in content if not _made_here(b)]
            # An assistant turn that was only thinking keeps an empty text so it stays a turn.
            message["content"] = kept or [{"type": "text", "text": ""}]
            stripped = True
    return stripped
