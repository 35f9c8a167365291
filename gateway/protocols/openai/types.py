"""Shared types of the OpenAI Chat Completions <-> Anthropic Messages translators.

Kept in their own module so inbound, outbound and stream can share them without import cycles;
`inbound` re-exports what its callers pass in and get back (ModelCaps, InvalidRequest,
TranslatedRequest), and the package re-exports them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.protocols.media import CONSERVATIVE_FIGURES, MediaFigures, MediaTally
from gateway.protocols.model_rules import EFFORT_SCALE

# OpenAI's `reasoning_effort` enum (openai-python v3), lowest to highest (the shared scale of
# gateway.protocols.model_rules, where the nearest-level rule lives).
EFFORT_LEVELS: tuple[str, ...] = EFFORT_SCALE


@dataclass(frozen=True, slots=True)
class ModelCaps:
    """What the translator needs to know about the target model (from the catalog)."""

    canonical_id: str
    sampling: bool
    prompt_caching: bool
    vision: bool
    pdf: bool
    tools: bool
    structured_outputs: bool
    reasoning_efforts: tuple[str, ...]  # subset of EFFORT_LEVELS, ordered
    max_output_tokens: int
    media: MediaFigures = CONSERVATIVE_FIGURES  # worst-case image and PDF page tokens
    thinking_can_be_disabled: bool = True  # False: "none" maps to the lowest level
    forced_tool_choice: bool = True  # False: "required" / a named function is refused


class InvalidRequest(Exception):
    """A client error in the chat request; the gateway renders it as an OpenAI error envelope.

    `param` is the JSON path of the offending field (OpenAI's `error.param`); `status` lets the
    same exception carry a 404 or 413 when that is the right answer.
    """

    def __init__(
        self,
        message: str,
        param: str | None = None,
        code: str | None = None,
        status: int = 400,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status

    def __repr__(self) -> str:
        return f"InvalidRequest({self.message!r}, param={self.param!r}, status={self.status})"


@dataclass(slots=True)
class ImageRef:
    """An http(s) image URL the gateway must download and inline (Bedrock/Vertex take base64 only).

    `block` is the very dict inside the translated body, so the caller can replace
    `block["source"]` in place without searching the body again.
    """

    param: str
    url: str
    block: dict[str, Any]


@dataclass(slots=True)
class TranslatedRequest:
    """Result of translating one chat request."""

    body: dict[str, Any]  # Anthropic Messages body without "model"
    stream: bool
    include_usage: bool
    session_hint: str | None
    reasoning_effort: str | None  # effective level (x-ezat-reasoning-effort), None if not sent
    thinking: bool
    images: list[ImageRef] = field(default_factory=list)
    tool_call_ids_needing_thinking: list[str] = field(default_factory=list)
    # Inline media (data URLs) validated and bounded; image URLs are bounded once downloaded.
    media: MediaTally = field(default_factory=MediaTally)
