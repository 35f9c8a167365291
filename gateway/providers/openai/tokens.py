"""count_tokens for a Messages body on an OpenAI-compatible model, computed locally (issue 30
item 4): no upstream call, so it stays free and fast. Claude Code calls it to decide when to
compact; counting too low makes it compact too late (providers.md §5.6, copilot-api#134).

The body is first translated by request.py, so what is counted is what would be sent.

GPT models (names gpt-*, o1*, o3*, o4*, chatgpt-*, after any `provider/` prefix) use OpenAI's
tokenizer: o200k_base, except gpt-4 / gpt-4-turbo / gpt-3.5 which use cl100k_base (tiktoken's
model table). The tokenizer is the PyPI package `bpe-openai` (Rust, the vocabularies embedded:
tiktoken downloads its BPE files at run time, which a gateway cannot rely on). It gives
tiktoken's ids on the references of OpenAI's cookbook "How to count tokens with tiktoken"
(github.com/openai/openai-cookbook, examples/How_to_count_tokens_with_tiktoken.ipynb):
"tiktoken is great!" -> [83, 8251, 2488, 382, 2212, 0], "antidisestablishmentarianism" ->
[493, 129901, 376, 160388, 21203, 2367], "hello world" -> [24912, 2375] (tiktoken's own test);
tests/gateway/providers/test_openai_provider_tokens.py checks these. The message overhead is the
cookbook's `num_tokens_from_messages`: 3 per message, the tokens of every string field (role,
content, name; +1 for a name), 3 to prime the reply; it matches the API's 124 prompt tokens on
the cookbook's example for gpt-4o. Tools follow the cookbook's `num_tokens_for_tools` for
gpt-4o (7 per function, 3 + 3 per property, enums -3 + 3 per item, 12 at the end; the API
counted 101 on its example); nested schemas, which the cookbook does not cover, add the tokens
of their JSON. Tool calls in the history count their name and arguments plus 3 (an estimate:
OpenAI does not document it); tool_call ids are not counted.

Other models (vLLM, Ollama, …: each has its own tokenizer, which the gateway does not have):
ceil(UTF-8 bytes / 3.5) of the same strings plus the same per-message overhead. 3.5 bytes per
token is on the low side of what BPE tokenizers give for English and code (about 4), so the
count errs high, which is the safe side for compaction.

Images and PDFs, for every model: media_tokens.py (OpenAI's image rule; a PDF page as a letter
page's image plus a per-page text allowance).
"""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Any

import orjson

from .media_tokens import image_size, image_tokens, pdf_tokens
from .request import ChatTarget, to_chat

__all__ = ["count_input_tokens", "encoding_name"]

BYTES_PER_TOKEN = 3.5
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
TOKENS_PER_TOOL_CALL = 3
# num_tokens_for_tools, gpt-4o values (the cookbook)
FUNC_INIT, PROP_INIT, PROP_KEY, ENUM_INIT, ENUM_ITEM, FUNC_END = 7, 3, 3, -3, 3, 12

_GPT = re.compile(r"(gpt-|o1|o3|o4|chatgpt-)")
_CL100K = re.compile(r"(gpt-4(-turbo|-32k|-\d{4})?(-|$)(?!o)|gpt-3\.5)")


def encoding_name(model: str) -> str | None:
    """The tiktoken encoding of a GPT model name, None for other models."""
    name = model.rsplit("/", 1)[-1].lower()
    if not _GPT.match(name):
        return None
    return "cl100k_base" if _CL100K.match(name) else "o200k_base"


@cache
def _encoding(name: str) -> Any:
    # Imported here: a worker that never counts for a GPT model never loads the vocabularies.
    import bpe_openai

    return bpe_openai.get_encoding(name)


class _Counter:
    __slots__ = ("_encode",)

    def __init__(self, model: str) -> None:
        name = encoding_name(model)
        if name is None:
            self._encode = _estimate
        else:
            encoding = _encoding(name)
            # encode_ordinary: "<|endoftext|>" in a prompt is text, not a special token.
            self._encode = lambda text: len(encoding.encode_ordinary(text))

    def text(self, value: object) -> int:
        return self._encode(value) if isinstance(value, str) and value else 0

    def message(self, message: dict[str, Any]) -> int:
        total = TOKENS_PER_MESSAGE
        for key, value in message.items():
            if key == "content":
                total += self.content(value)
            elif key == "tool_calls":
                for call in value:
                    function = call["function"]
                    total += TOKENS_PER_TOOL_CALL + self.text(function["name"])
                    total += self.text(function["arguments"])
            elif key in ("role", "name"):
                total += self.text(value) + (TOKENS_PER_NAME if key == "name" else 0)
        return total

    def content(self, content: object) -> int:
        if isinstance(content, str):
            return self.text(content)
        total = 0
        for part in content if isinstance(content, list) else ():
            if part["type"] == "text":
                total += self.text(part["text"])
            elif part["type"] == "image_url":
                total += image_tokens(image_size(part["image_url"]["url"]))
            elif part["type"] == "file":
                total += pdf_tokens(part["file"].get("file_data"))
        return total

    def tools(self, tools: list[dict[str, Any]]) -> int:
        if not tools:
            return 0
        total = FUNC_END
        for tool in tools:
            function = tool["function"]
            description = str(function.get("description") or "").removesuffix(".")
            total += FUNC_INIT + self.text(f"{function['name']}:{description}")
            properties = function["parameters"].get("properties")
            if isinstance(properties, dict) and properties:
                total += PROP_INIT
                for key, prop in properties.items():
                    total += PROP_KEY + self.property(key, prop)
        return total

    def property(self, key: str, prop: object) -> int:
        if not isinstance(prop, dict):
            return self.text(key)
        total = 0
        enum = prop.get("enum")
        if isinstance(enum, list):
            total += ENUM_INIT
            for item in enum:
                total += ENUM_ITEM + self.text(item if isinstance(item, str) else str(item))
        kind = prop.get("type")
        kind = kind if isinstance(kind, str) else orjson.dumps(kind).decode() if kind else ""
        description = str(prop.get("description") or "").removesuffix(".")
        total += self.text(f"{key}:{kind}:{description}")
        rest = {k: v for k, v in prop.items() if k not in ("type", "description", "enum")}
        if rest:  # nested objects, items, anyOf…: beyond the cookbook, counted as their JSON
            total += self.text(orjson.dumps(rest).decode())
        return total


def _estimate(text: str) -> int:
    return math.ceil(len(text.encode()) / BYTES_PER_TOKEN)


def count_input_tokens(body: dict[str, Any], model: str) -> int:
    """The prompt tokens of a Messages body on `model`. Raises request.UntranslatableRequest
    for a body the model could not be sent (the same 400 the request itself would get)."""
    chat = to_chat(body, ChatTarget()).body
    counter = _Counter(model)
    total = REPLY_PRIMING + sum(counter.message(m) for m in chat["messages"])
    return total + counter.tools(chat.get("tools") or [])
