"""The models the OpenAI-compatible front serves (simulator/openai_front.py).

`gpt-sim` stands for a GPT reasoning model (reasoning counted, never shown), `gpt-sim-mini` for a
non-reasoning one (reasoning_effort refused), `qwen-sim` for a vLLM-served model that shows its
reasoning (`reasoning_content`), `gemini-3-sim` for Gemini 3 on its OpenAI-compatible endpoint
(thought signatures on its tool calls, required back: simulator/openai_signatures.py). Limits
are round numbers of the same order as the real ones.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OpenAIModel:
    """A model the front serves: whether it reasons, and whether its reasoning is visible."""

    id: str
    owned_by: str
    reasoning: bool
    # "reasoning_content" (vLLM/DeepSeek style, shown) or None (OpenAI: counted, never shown).
    visible_reasoning: bool
    max_output_tokens: int
    context_window: int
    created: int = 1_790_000_000
    thought_signatures: bool = False  # Gemini 3's, on tool calls (openai_signatures.py)


MODELS: dict[str, OpenAIModel] = {
    m.id: m
    for m in (
        OpenAIModel("gpt-sim", "openai", True, False, 128_000, 400_000),
        OpenAIModel("gpt-sim-mini", "openai", False, False, 16_384, 128_000),
        OpenAIModel("qwen-sim", "vllm", True, True, 32_768, 131_072),
        OpenAIModel(
            "gemini-3-sim", "google", True, False, 65_536, 1_048_576, thought_signatures=True
        ),
    )
}
