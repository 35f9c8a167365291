"""Model behaviour the provider documents, as rules every API shares. Pure: no Django, no I/O.

Chat Completions (gateway/protocols/openai), the Responses API and the Messages pass-through
all ask the same two questions of the catalog's capability flags, so the answers live here:

- Reasoning effort: an OpenAI `reasoning_effort` becomes the model's nearest supported level.
  On a model whose thinking cannot be turned off (`thinkingCanBeDisabled: false`, e.g. Claude
  Opus 5.5: "Thinking can't be disabled",
  https://platform.claude.com/docs/en/models/opus-5-5/whats-new-opus-5-5), "none" is just the
  lowest position of the scale, so the same nearest-level rule gives the lowest level.
- Forced tool use: on a model whose page says forced tool use returns an error
  (`forcedToolChoice: false`: Claude Opus 5.5, Claude Sonnet 5.5,
  https://platform.claude.com/docs/en/models/sonnet-5-5/whats-new-sonnet-5-5), a forced choice
  is refused by the gateway with a 400 that names the model and says to use `auto`, instead of
  an upstream error after a routed, rate-counted attempt.
"""

from __future__ import annotations

from collections.abc import Sequence

# OpenAI's `reasoning_effort` scale (openai-python v3), lowest to highest. The position of a
# level is what "nearest supported level" is measured against.
EFFORT_SCALE: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")

NO_THINKING = "none"


class ModelRuleViolation(Exception):
    """A request the model is documented to refuse. `param` is the offending field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def supported_levels(levels: Sequence[str]) -> tuple[str, ...]:
    """The model's effort levels that are on the scale, lowest first (never "none")."""
    return tuple(lvl for lvl in EFFORT_SCALE if lvl != NO_THINKING and lvl in levels)


def nearest_effort(wanted: str, levels: Sequence[str], *, thinking_can_be_disabled: bool) -> str:
    """The effort to send for `wanted` (a value of EFFORT_SCALE): a supported level, or "none"
    for no thinking. Nearest by position on the scale; on a tie the lower level wins (cheaper,
    and never more than asked). "none" stays "none" only where thinking can be turned off."""
    if wanted not in EFFORT_SCALE:
        raise ValueError(f"not an effort level: {wanted!r}")
    supported = supported_levels(levels)
    if not supported or (wanted == NO_THINKING and thinking_can_be_disabled):
        return NO_THINKING
    position = EFFORT_SCALE.index(wanted)
    return min(
        supported,
        key=lambda lvl: (abs(EFFORT_SCALE.index(lvl) - position), EFFORT_SCALE.index(lvl)),
    )


def check_forced_tool_choice(
    *, forced: bool, model_id: str, allowed: bool, param: str, auto: str, forced_forms: str
) -> None:
    """Refuse a forced tool choice on a model that does not take one.

    `auto` and `forced_forms` are the caller's API's spelling (Chat: `"auto"` and
    `"required" or a named function`; Messages: `{"type": "auto"}` and `"any" or "tool"`).
    """
    if forced and not allowed:
        raise ModelRuleViolation(
            f"{param}: {model_id} does not support forced tool use ({forced_forms}); the "
            f"provider refuses it. Use {auto} and ask for the tool in the prompt instead.",
            param,
        )


def check_thinking_disabled(*, disabled: bool, model_id: str, allowed: bool, param: str) -> None:
    """Refuse turning thinking off on a model whose thinking cannot be turned off."""
    if disabled and not allowed:
        raise ModelRuleViolation(
            f"{param}: the thinking of {model_id} cannot be turned off; leave thinking out (or "
            'send {"type": "adaptive"}) and lower output_config.effort to think less.',
            param,
        )
