"""What the real API enforces per model, for the models the simulator knows.

The simulator stands in for the provider, so these facts are kept here, apart from the catalog:
a catalog that disagrees with the provider (a max_tokens ceiling set too low, a forced tool choice
let through) then shows up as a refusal in tests, as it would in production. Models it does not
know (test ids such as "routed-ab") get only the checks common to every model.

Sources (checked 2026-12-01):
- limits: each model's page, e.g. https://platform.claude.com/docs/en/models/opus-5-5/overview;
- forced tool use, thinking that cannot be turned off, between_tools, sampling parameters:
  https://platform.claude.com/docs/en/models/opus-5-5/whats-new-opus-5-5,
  https://platform.claude.com/docs/en/models/sonnet-5-5/whats-new-sonnet-5-5,
  https://platform.claude.com/docs/en/models/sonnet-5-5/migration-guide (Sonnet 5.5 refuses
  thinking budgets, sampling parameters, forced tool choice and thinking "disabled"),
  https://platform.claude.com/docs/en/models/haiku-5-5/migration-guide;
- mid-conversation `role: "system"` messages, accepted from Claude Opus 4.8 on, right after a
  user turn; earlier models answer "role 'system' is not supported on this model":
  https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelRules:
    max_output_tokens: int
    forced_tool_choice: bool = True
    # The thinking type that turns thinking off ("disabled"), another one (Sonnet 5.5:
    # "between_tools"), or None where thinking cannot be turned off.
    thinking_off: str | None = "disabled"
    sampling: bool = True  # False: non-default temperature / top_p / top_k → 400
    system_messages: bool = True  # mid-conversation role "system" messages


MODELS: dict[str, ModelRules] = {
    "claude-opus-5-5": ModelRules(
        128_000, forced_tool_choice=False, thinking_off=None, sampling=False
    ),
    "claude-sonnet-5-5": ModelRules(
        128_000, forced_tool_choice=False, thinking_off="between_tools", sampling=False
    ),
    "claude-haiku-5-5": ModelRules(128_000, sampling=False),
    "claude-opus-5": ModelRules(128_000, sampling=False),
    "claude-sonnet-5": ModelRules(128_000, sampling=False),
    "claude-opus-4-6": ModelRules(128_000, system_messages=False),
    "claude-sonnet-4-6": ModelRules(128_000, system_messages=False),
    "claude-haiku-4-5": ModelRules(64_000, system_messages=False),
    "claude-haiku-4-5-20251001": ModelRules(64_000, system_messages=False),
}

# Every model accepts these thinking types; a model's `thinking_off` adds its own.
THINKING_TYPES = ("enabled", "adaptive")


def rules_for(model: str) -> ModelRules | None:
    return MODELS.get(model)
