"""Gemini's thought signatures on its OpenAI-compatible endpoint, for the simulator's
`gemini-3-sim` model.

Google's thought-signatures guide (https://ai.google.dev/gemini-api/docs/thought-signatures):
"Gemini 3 returns thought signatures for all model responses (responses from the API) with a
function call", and "When using Gemini 3 models, you must pass back thought signatures during
function calling, otherwise you will get a validation error (4xx status code)"; the validation is
strict on the current turn, and with parallel calls only the first call carries one. On the
OpenAI-compatible endpoint the signature rides on the tool call as
`extra_content.google.thought_signature` (continuedev/continue#8865, crmne/ruby_llm#588, and the
error reports in shared/reference/providers.md §2.3), and a replayed history that Gemini did not
produce may carry the documented placeholder `skip_thought_signature_validator`.

Here: the first tool call of each answer carries a signature the simulator can check (the
base64 of a digest of the call's id, so a signature moved to another call fails). A request
whose current turn (the messages after the last user message) has an assistant message whose
first tool call lacks a good signature is refused with Gemini's 400.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

from simulator.openai_errors import OpenAIError

SKIP = "skip_thought_signature_validator"
_MISSING = (
    "Function call is missing a thought_signature in functionCall parts. This is required for "
    "tools to work correctly, and missing thought_signature may lead to degraded model "
    "performance. Additional data, function call `default_api:{name}` , position {position}. "
    "please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)


def signature_for(call_id: str) -> str:
    digest = hashlib.sha256(b"gemini-3-sim thought:" + call_id.encode()).digest()
    return base64.b64encode(digest + b"\x00\xfe\xff").decode()  # '+' and '/' appear in it


def extra_content(call_id: str) -> dict[str, Any]:
    return {"google": {"thought_signature": signature_for(call_id)}}


def sent_signature(call: Mapping[str, Any]) -> object:
    extra = call.get("extra_content")
    google = extra.get("google") if isinstance(extra, Mapping) else None
    return google.get("thought_signature") if isinstance(google, Mapping) else None


def check_signatures(messages: list[Any]) -> OpenAIError | None:
    """Gemini's refusal of a current turn whose function calls lost their signatures."""
    last_user = max((n for n, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    for n, message in enumerate(messages[last_user + 1 :], start=last_user + 1):
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if not calls:
            continue
        first = calls[0]
        signature = sent_signature(first)
        if signature == SKIP or signature == signature_for(str(first.get("id"))):
            continue
        name = first.get("function", {}).get("name", "")
        if signature is None:
            message_text = _MISSING.format(name=name, position=n + 1)
        else:
            message_text = "Corrupted thought signature."
        return OpenAIError(400, message_text, None, None)
    return None
