"""OpenAI Chat Completions <-> Anthropic Messages translators (pure, see docs/design.md)."""

from __future__ import annotations

from .inbound import attach_thinking, disable_thinking, translate_request
from .outbound import map_usage, thinking_blocks_by_tool_id, translate_response
from .stream import ChatStreamTranslator
from .types import (
    EFFORT_LEVELS,
    ImageRef,
    InvalidRequest,
    ModelCaps,
    TranslatedRequest,
)

__all__ = [
    "EFFORT_LEVELS",
    "ChatStreamTranslator",
    "ImageRef",
    "InvalidRequest",
    "ModelCaps",
    "TranslatedRequest",
    "attach_thinking",
    "disable_thinking",
    "map_usage",
    "thinking_blocks_by_tool_id",
    "translate_request",
    "translate_response",
]
