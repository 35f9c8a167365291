"""OpenAI usage → Anthropic usage (gateway/providers/openai/mapping.py, docs/providers.md's
usage table): cached input comes out of input, reasoning stays inside output."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.providers.openai.mapping import anthropic_usage


def expected(input_: int, cached: int, output: int, thinking: int) -> dict[str, Any]:
    return {
        "input_tokens": input_,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": output,
        "output_tokens_details": {"thinking_tokens": thinking},
    }


@pytest.mark.parametrize(
    ("usage", "want"),
    [
        ({"prompt_tokens": 100, "completion_tokens": 20}, expected(100, 0, 20, 0)),
        (  # OpenAI: cached tokens are part of prompt_tokens
            {
                "prompt_tokens": 100,
                "completion_tokens": 20,
                "prompt_tokens_details": {"cached_tokens": 64},
                "completion_tokens_details": {"reasoning_tokens": 8},
            },
            expected(36, 64, 20, 8),
        ),
        (  # DeepSeek reports its cache hits beside the prompt
            {"prompt_tokens": 100, "completion_tokens": 5, "prompt_cache_hit_tokens": 30},
            expected(70, 30, 5, 0),
        ),
        (  # a server's nonsense never makes input negative or thinking exceed output
            {
                "prompt_tokens": 10,
                "completion_tokens": 3,
                "prompt_tokens_details": {"cached_tokens": 50},
                "completion_tokens_details": {"reasoning_tokens": 9},
            },
            expected(0, 10, 3, 3),
        ),
        (  # nulls, strings, negatives and booleans count as nothing
            {
                "prompt_tokens": "12",
                "completion_tokens": -4,
                "prompt_tokens_details": None,
                "completion_tokens_details": {"reasoning_tokens": True},
            },
            expected(0, 0, 0, 0),
        ),
        ({}, expected(0, 0, 0, 0)),
    ],
)
def test_usage_table(usage: dict[str, Any], want: dict[str, Any]) -> None:
    assert anthropic_usage(usage) == want


counts = st.one_of(st.none(), st.integers(-5, 10**7), st.text(max_size=3), st.booleans())


@given(prompt=counts, cached=counts, output=counts, reasoning=counts)
def test_never_negative_and_sums_to_the_prompt(
    prompt: Any, cached: Any, output: Any, reasoning: Any
) -> None:
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
    got = anthropic_usage(usage)
    valid = type(prompt) is int and prompt > 0
    assert got["input_tokens"] >= 0 and got["cache_read_input_tokens"] >= 0
    assert got["input_tokens"] + got["cache_read_input_tokens"] == (prompt if valid else 0)
    assert 0 <= got["output_tokens_details"]["thinking_tokens"] <= got["output_tokens"]
