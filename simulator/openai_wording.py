"""OpenAI's wording of request errors ("Unknown parameter: 'foo'.", "Invalid value: 'image'.
Supported values are: ...", "Missing required parameter: 'messages[0].role'."), each naming the
offending field in `param`, shared by the simulated Chat Completions and Responses fronts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator.openai_errors import OpenAIError

__all__ = ["bad_value", "check_keys", "invalid_type", "missing", "unknown"]


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def invalid_type(param: str, expected: str, value: Any) -> OpenAIError:
    return OpenAIError(
        400,
        f"Invalid type for '{param}': expected {expected}, but got {_article(value)} instead.",
        param,
        "invalid_type",
    )


def _article(value: Any) -> str:
    name = _type_name(value)
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def missing(param: str) -> OpenAIError:
    return OpenAIError(
        400, f"Missing required parameter: '{param}'.", param, "missing_required_parameter"
    )


def unknown(param: str) -> OpenAIError:
    return OpenAIError(400, f"Unknown parameter: '{param}'.", param, "unknown_parameter")


def bad_value(param: str, value: Any, allowed: tuple[str, ...]) -> OpenAIError:
    quoted = [f"'{v}'" for v in allowed]
    listing = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + f", and {quoted[-1]}"
    return OpenAIError(
        400,
        f"Invalid value: '{value}'. Supported values are: {listing}.",
        param,
        "invalid_value",
    )


def check_keys(obj: Mapping[str, Any], allowed: set[str], where: str) -> OpenAIError | None:
    # cache_control first: it is the Anthropic leftover a gateway most often forwards.
    extra = sorted(set(obj) - allowed, key=lambda k: (k != "cache_control", k))
    return unknown(f"{where}.{extra[0]}") if extra else None
