"""Deterministic reply content: the same request always gets the same content and usage, so a
streamed and a non-streamed run of one request can be compared field by field."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from simulator.schema import sample
from simulator.thinking import sign, thinking_enabled
from simulator.tokens import tokens_for_text

SNIPPET_CHARS = 60
LONG_ANSWER_WORDS = 200
# Filler vocabulary for "long answer" replies; a string constant keeps the file short.
_LONG_WORDS = (
    "gateway upstream request token stream latency model cache prompt reply router "
    "budget retry header payload client server window context tool result schema "
    "answer signal event message usage limit quota region fallback provider account"
)
_LONG_VOCAB = _LONG_WORDS.split()


@dataclass(slots=True)
class Reply:
    content: list[dict[str, Any]]
    stop_reason: str
    stop_sequence: str | None
    output_tokens: int
    thinking_tokens: int
    stop_details: Any = None
    usage_overrides: Mapping[str, Any] | None = field(default=None)


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [
        b["text"]
        for b in content
        if isinstance(b, Mapping) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    return "\n".join(parts)


def first_tool_result_text(content: Any) -> str | None:
    """Text of the first tool_result block, or None when the turn has no tool results."""
    if not isinstance(content, list):
        return None
    for block in content:
        if isinstance(block, Mapping) and block.get("type") == "tool_result":
            inner = block.get("content")
            return inner if isinstance(inner, str) else text_of(inner)
    return None


def block_tokens(block: Mapping[str, Any]) -> int:
    btype = block.get("type")
    if btype == "text":
        return tokens_for_text(str(block.get("text", "")))
    if btype == "thinking":
        return tokens_for_text(str(block.get("thinking", "")))
    if btype in ("tool_use", "server_tool_use"):
        raw = orjson.dumps(block.get("input", {})).decode()
        return tokens_for_text(str(block.get("name", "")) + raw)
    return tokens_for_text(orjson.dumps(block).decode())


def _long_text(user_text: str) -> str:
    seed = int.from_bytes(hashlib.sha256(user_text.encode()).digest()[:4], "big")
    words: list[str] = []
    for i in range(LONG_ANSWER_WORDS):
        word = _LONG_VOCAB[(seed + i * 7 + i // 5) % len(_LONG_VOCAB)]
        if i % 12 == 0:
            word = word.capitalize()
        if i % 12 == 11 or i == LONG_ANSWER_WORDS - 1:
            word += "."
        words.append(word)
    return f"Simulated long reply to: {user_text[:SNIPPET_CHARS]}\n\n" + " ".join(words)


def _json_schema(body: Mapping[str, Any]) -> Any:
    """Schema from `output_config.format`, or the deprecated top-level `output_format`."""
    output_config = body.get("output_config")
    candidates = (
        output_config.get("format") if isinstance(output_config, Mapping) else None,
        body.get("output_format"),
    )
    for fmt in candidates:
        if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
            return fmt.get("schema", {})
    return None


def _answer_text(body: Mapping[str, Any], user_text: str, result_text: str | None) -> str:
    schema = _json_schema(body)
    if schema is not None:
        return orjson.dumps(sample(schema)).decode()
    if result_text is not None:
        return f"Tool said: {result_text}"
    if "long answer" in user_text.lower():
        return _long_text(user_text)
    return f"Simulated reply to: {user_text[:SNIPPET_CHARS]}"


def _tool_calls(body: Mapping[str, Any], user_text: str) -> list[Mapping[str, Any]]:
    tools = [
        t
        for t in body.get("tools") or ()
        if isinstance(t, Mapping) and isinstance(t.get("input_schema"), Mapping)
    ]
    choice = body.get("tool_choice")
    choice = choice if isinstance(choice, Mapping) else {}
    if not tools or choice.get("type") == "none":
        return []
    first = tools[0]
    if choice.get("type") == "tool":
        first = next((t for t in tools if t.get("name") == choice.get("name")), first)
    calls = [first]
    parallel = not choice.get("disable_parallel_tool_use")
    if parallel and len(tools) >= 2 and "both" in user_text.lower():
        calls.append(next(t for t in tools if t is not first))
    return calls


def _tool_use_block(name: str, schema: Any, key: str, index: int) -> dict[str, Any]:
    digest = hashlib.sha256(f"{key}\x1f{name}\x1f{index}".encode()).hexdigest()
    return {
        "type": "tool_use",
        "id": f"toolu_{digest[:24]}",
        "name": name,
        "input": sample(schema),
    }


def _truncate(blocks: list[dict[str, Any]], budget: int) -> tuple[list[dict[str, Any]], bool]:
    """Cut the content to `budget` output tokens (~4 characters each)."""
    kept: list[dict[str, Any]] = []
    for block in blocks:
        cost = block_tokens(block)
        if cost <= budget:
            kept.append(block)
            budget -= cost
            continue
        key = {"text": "text", "thinking": "thinking"}.get(block["type"])
        if key and budget > 0:
            kept.append({**block, key: block[key][: budget * 4]})
        return kept, True
    return kept, False


def _apply_stop_sequences(
    blocks: list[dict[str, Any]], stops: list[str]
) -> tuple[list[dict[str, Any]], str | None]:
    """Cut the last text block at the earliest stop sequence."""
    for i in range(len(blocks) - 1, -1, -1):
        if blocks[i]["type"] != "text":
            continue
        text = blocks[i]["text"]
        hits = [(text.find(s), s) for s in stops if s and s in text]
        if not hits:
            return blocks, None
        pos, stop = min(hits)
        cut = text[:pos]
        head = blocks[:i]
        return ([*head, {**blocks[i], "text": cut}] if cut else head), stop
    return blocks, None


def _sign_thinking(blocks: list[dict[str, Any]], omitted: bool) -> int:
    """Sign thinking blocks as finally sent; returns the thinking tokens billed."""
    spent = 0
    for block in blocks:
        if block["type"] == "thinking":
            spent += block_tokens(block)
            if omitted:
                # display "omitted": billed, signature kept, text not returned.
                block["thinking"] = ""
            block["signature"] = sign(block["thinking"])
    return spent


def build_reply(body: Mapping[str, Any]) -> Reply:
    messages: list[Any] = body["messages"]
    last_user = next(
        (m for m in reversed(messages) if isinstance(m, Mapping) and m.get("role") == "user"),
        None,
    )
    content = last_user.get("content") if last_user is not None else None
    user_text = text_of(content)
    result_text = first_tool_result_text(content)

    blocks: list[dict[str, Any]] = []
    thinking = body.get("thinking")
    if thinking_enabled(body):
        topic = (result_text if result_text is not None else user_text)[:SNIPPET_CHARS]
        blocks.append(
            {
                "type": "thinking",
                "thinking": f"Thinking about: {topic}\n\nA short, direct answer fits best.",
                "signature": "",
            }
        )
    calls = _tool_calls(body, user_text) if result_text is None else []
    key = f"{len(messages)}\x1f{user_text}"
    blocks.extend(
        _tool_use_block(t["name"], t["input_schema"], key, i) for i, t in enumerate(calls)
    )
    stop_reason = "tool_use" if calls else "end_turn"
    if not calls:
        blocks.append({"type": "text", "text": _answer_text(body, user_text, result_text)})

    blocks, truncated = _truncate(blocks, body["max_tokens"])
    if truncated:
        stop_reason = "max_tokens"
    stops = body.get("stop_sequences") or []
    blocks, stop_sequence = _apply_stop_sequences(blocks, stops)
    if stop_sequence is not None:
        stop_reason = "stop_sequence"

    omitted = isinstance(thinking, Mapping) and thinking.get("display") == "omitted"
    thinking_tokens = _sign_thinking(blocks, omitted)
    output = thinking_tokens + sum(block_tokens(b) for b in blocks if b["type"] != "thinking")
    return Reply(blocks, stop_reason, stop_sequence, output, thinking_tokens)


def reply_from_override(override: Mapping[str, Any]) -> Reply:
    """A scripted reply (`reply` fault field): content is returned exactly as given."""
    content = [dict(b) for b in override.get("content", []) if isinstance(b, Mapping)]
    has_tool = any(b.get("type") == "tool_use" for b in content)
    thinking_tokens = sum(block_tokens(b) for b in content if b.get("type") == "thinking")
    usage = override.get("usage")
    return Reply(
        content=content,
        stop_reason=override.get("stop_reason") or ("tool_use" if has_tool else "end_turn"),
        stop_sequence=override.get("stop_sequence"),
        output_tokens=sum(block_tokens(b) for b in content) if content else 0,
        thinking_tokens=thinking_tokens,
        stop_details=override.get("stop_details"),
        usage_overrides=usage if isinstance(usage, Mapping) else None,
    )
