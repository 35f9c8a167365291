"""Which models can serve a request: the rules of a fallback chain. Pure: no Django, no I/O.

A fallback is taken only to a model that can answer the same request (issue 20, the peer
page's "Smart Routing"): every capability the request uses, a context window that fits its
prompt, and an output limit that fits its `max_tokens`. What a request uses is read from its
Messages body (the caller's on /v1/messages, the translation on the OpenAI APIs), so one set of
rules serves all three APIs:

- images and PDFs (the media tally of the request), tools, structured output
  (`output_config.format`), sampling parameters the requested model honours (`temperature`,
  `top_p`, `top_k`), a forced `tool_choice` (refused by some models);
- on /v1/messages, which passes the body through: `thinking` turned off (refused by some
  models), adaptive thinking, and an `output_config.effort` (mapped to the nearest level the
  answering model supports, like `reasoning_effort` on the OpenAI APIs; a model with no levels
  cannot take it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.protocols.model_rules import EFFORT_SCALE, nearest_effort

if TYPE_CHECKING:
    from catalog.snapshot import ModelInfo
    from gateway.protocols.media import MediaTally

SAMPLING_FIELDS = ("temperature", "top_p", "top_k")


@dataclass(frozen=True, slots=True)
class RequestNeeds:
    """What a model must offer to answer the request."""

    vision: bool = False
    pdf: bool = False
    tools: bool = False
    structured_output: bool = False
    sampling: bool = False
    forced_tool: bool = False
    # /v1/messages only: the caller's thinking and effort go upstream as sent.
    thinking_off: bool = False
    adaptive_thinking: bool = False
    effort: str | None = None
    # The request's own output limit; None when it was defaulted (each model then uses its own).
    max_tokens: int | None = None


def _output_config(body: Mapping[str, Any]) -> Mapping[str, Any]:
    config = body.get("output_config")
    return config if isinstance(config, Mapping) else {}


def _common(
    body: Mapping[str, Any], media: MediaTally, pending_images: int, honours_sampling: bool
) -> dict[str, Any]:
    choice = body.get("tool_choice")
    return {
        "vision": media.images > 0 or pending_images > 0,
        "pdf": media.pdf_pages > 0 or media.unsized_documents > 0,
        "tools": bool(body.get("tools")),
        "structured_output": _output_config(body).get("format") is not None,
        "sampling": honours_sampling and any(body.get(f) is not None for f in SAMPLING_FIELDS),
        "forced_tool": isinstance(choice, Mapping) and choice.get("type") in ("any", "tool"),
    }


def translated_needs(
    body: Mapping[str, Any],
    media: MediaTally,
    *,
    pending_images: int,
    max_tokens: int | None,
    honours_sampling: bool,
) -> RequestNeeds:
    """Needs of an OpenAI-API request from its translation for the requested model. Effort and
    thinking are not needs here: each fallback's own translation maps them (nearest level)."""
    return RequestNeeds(
        **_common(body, media, pending_images, honours_sampling), max_tokens=max_tokens
    )


def messages_needs(
    body: Mapping[str, Any], media: MediaTally, *, max_tokens: int, honours_sampling: bool
) -> RequestNeeds:
    """Needs of a /v1/messages request (its body goes upstream as sent)."""
    thinking = body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, Mapping) else None
    effort = _output_config(body).get("effort")
    return RequestNeeds(
        **_common(body, media, 0, honours_sampling),
        thinking_off=kind == "disabled",
        adaptive_thinking=kind == "adaptive",
        effort=effort if isinstance(effort, str) else None,
        max_tokens=max_tokens,
    )


def unfit(model: ModelInfo, needs: RequestNeeds, prompt_estimate: int) -> str | None:
    """Why `model` cannot serve a request with these needs, or None when it can."""
    checks = (
        (needs.vision and not model.vision, "does not take images"),
        (needs.pdf and not model.pdf, "does not take PDFs"),
        (needs.tools and not model.tools, "does not support tools"),
        (
            needs.structured_output and not model.structured_outputs,
            "does not support structured outputs",
        ),
        (needs.sampling and not model.sampling, "does not take sampling parameters"),
        (needs.forced_tool and not model.forced_tool_choice, "refuses a forced tool choice"),
        (needs.thinking_off and not model.thinking_can_be_disabled, "cannot turn thinking off"),
        (
            needs.adaptive_thinking and model.thinking not in ("adaptive", "effort"),
            "does not think adaptively",
        ),
        (needs.effort is not None and not model.reasoning_efforts, "takes no reasoning effort"),
    )
    for failed, reason in checks:
        if failed:
            return reason
    if prompt_estimate > model.context_window:
        return (
            f"its context window ({model.context_window:,} tokens) is below the prompt's "
            f"estimate ({prompt_estimate:,} tokens)"
        )
    if needs.max_tokens is not None and needs.max_tokens > model.max_output_tokens:
        return (
            f"its output limit ({model.max_output_tokens:,} tokens) is below max_tokens "
            f"({needs.max_tokens:,})"
        )
    return None


def mapped_effort(model: ModelInfo, effort: str) -> str:
    """A /v1/messages effort for a fallback model: the nearest level it supports (the same
    rule as `reasoning_effort` on the OpenAI APIs); a level off the scale is left as sent."""
    if effort not in EFFORT_SCALE or effort == "none":
        return effort
    return nearest_effort(
        effort, model.reasoning_efforts, thinking_can_be_disabled=model.thinking_can_be_disabled
    )
