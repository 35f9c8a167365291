"""Deterministic token estimates.

Nothing here tries to match a real tokenizer. What matters for tests is that the numbers are
cheap, stable, and additive: the input of a request is split into the same *segments* that the
prompt cache uses (tools, then system blocks, then message blocks), so "tokens of a prefix" and
"tokens of the whole request" come from one function and always agree with count_tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simulator.media import document_block_tokens, image_block_tokens

# Keys whose string values are structure rather than prompt text. Skipping `cache_control`
# matters most: adding a breakpoint must not change a request's token count.
_SKIP_KEYS = frozenset({"type", "cache_control", "signature", "role", "media_type"})


def tokens_for_text(text: str) -> int:
    """Output-side estimate: at least one token per non-empty piece, ~4 characters a token."""
    return max(1, -(-len(text) // 4))


@dataclass(slots=True)
class Segment:
    """One cacheable unit of the prompt: a tool, a system block or a message block."""

    obj: Any
    chars: int
    media_tokens: int
    cache_control: Mapping[str, Any] | None


def _media_tokens(block: Mapping[str, Any], model: str) -> int | None:
    """Token cost of an image / PDF block (by its pixels and pages, simulator/media.py), or
    None if the block is not media."""
    btype = block.get("type")
    if btype == "image":
        return image_block_tokens(block, model)
    if btype == "document":
        return document_block_tokens(block)
    return None


def measure(obj: Any, model: str = "") -> tuple[int, int]:
    """Characters of prompt text and media tokens inside a JSON value (iterative walk)."""
    chars = 0
    media = 0
    stack: list[Any] = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, Mapping):
            cost = _media_tokens(item, model)
            if cost is not None:
                # Base64 payloads would dominate a character count; media is priced flat.
                media += cost
                continue
            for key, value in item.items():
                if key not in _SKIP_KEYS:
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    return chars, media


def _segment(obj: Any, model: str) -> Segment:
    chars, media = measure(obj, model)
    cc = obj.get("cache_control") if isinstance(obj, Mapping) else None
    return Segment(obj, chars, media, cc if isinstance(cc, Mapping) else None)


def split_segments(body: Mapping[str, Any]) -> list[Segment]:
    """Prompt segments in cache-prefix order: tools -> system -> messages."""
    segments: list[Segment] = []
    model = str(body.get("model") or "")
    tools = body.get("tools")
    if isinstance(tools, list):
        segments.extend(_segment(tool, model) for tool in tools)
    system = body.get("system")
    if isinstance(system, str):
        if system:
            segments.append(_segment(system, model))
    elif isinstance(system, list):
        segments.extend(_segment(block, model) for block in system)
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if not isinstance(message, Mapping):
                continue
            content = message.get("content")
            if isinstance(content, list):
                segments.extend(_segment(block, model) for block in content)
            elif isinstance(content, str):
                segments.append(_segment(content, model))
    return segments


def prefix_tokens(chars: int, media: int) -> int:
    return -(-chars // 4) + media


def total_tokens(segments: list[Segment]) -> int:
    chars = sum(s.chars for s in segments)
    media = sum(s.media_tokens for s in segments)
    return max(1, prefix_tokens(chars, media))


def estimate_input_tokens(body: Mapping[str, Any]) -> int:
    return total_tokens(split_segments(body))
