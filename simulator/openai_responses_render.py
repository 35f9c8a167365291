"""Responses API rendering for the OpenAI front (pure): the response object and its stream.

Shapes and event order follow reference/platforms-and-responses.md §4.3-4.4 (O-SDK types and
recordings of real streams): output items `reasoning` (`rs_…`; OpenAI shows no text, only an
`encrypted_content` when `include` asks for it; qwen-sim, like vLLM, gives the text as
`reasoning_text` content), `message` (`msg_…`, `output_text` parts) and `function_call` (`fc_…`,
`call_id`, JSON-string `arguments`); usage with `input_tokens` including the cached tokens and
`output_tokens` including the reasoning tokens. Streams are `event: <type>` + `data: {…}` with a
`sequence_number` from 0, no `[DONE]`; `response.completed` carries the full response.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from simulator.openai_models import OpenAIModel
from simulator.openai_render import call_id
from simulator.replies import Reply
from simulator.sse import chunk_json, chunk_text


def _id(prefix: str, seed: str) -> str:
    return prefix + hashlib.sha256(seed.encode()).hexdigest()[:32]


def usage(prompt: int, cached: int, reply: Reply) -> dict[str, Any]:
    return {
        "input_tokens": prompt,
        # cache_write_tokens: required by the SDK type; OpenAI writes implicitly, unreported.
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": reply.output_tokens,
        "output_tokens_details": {"reasoning_tokens": reply.thinking_tokens},
        "total_tokens": prompt + reply.output_tokens,
    }


def output_items(
    response_id: str, reply: Reply, model: OpenAIModel, include: list[str]
) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    texts: list[str] = []
    for n, block in enumerate(reply.content):
        kind = block.get("type")
        seed = f"{response_id}\x1f{n}"
        if kind == "thinking":
            item: dict[str, Any] = {"id": _id("rs_", seed), "type": "reasoning", "summary": []}
            thought = str(block.get("thinking", ""))
            if model.visible_reasoning:
                item["content"] = [{"type": "reasoning_text", "text": thought}]
            if "reasoning.encrypted_content" in include:
                # Opaque to clients; a stateless client sends it back on the next turn.
                item["encrypted_content"] = "gAAAA" + base64.b64encode(thought.encode()).decode()
            items.append(item)
        elif kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            items.append(
                {
                    "id": _id("fc_", seed),
                    "type": "function_call",
                    "status": "completed",
                    "call_id": call_id(str(block.get("id", ""))),
                    "name": block.get("name", ""),
                    "arguments": orjson.dumps(block.get("input", {})).decode(),
                }
            )
    if texts or not items:
        message = {
            "id": _id("msg_", response_id),
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": "".join(texts), "annotations": [], "logprobs": []}
            ],
        }
        # The message comes after reasoning and before the calls, as the models emit them.
        at = next((i for i, it in enumerate(items) if it["type"] == "function_call"), len(items))
        items.insert(at, message)
    return items


def response(
    *,
    response_id: str,
    created: int,
    body: Mapping[str, Any],
    model: OpenAIModel,
    reply: Reply,
    usage_: dict[str, Any],
) -> dict[str, Any]:
    include = list(body.get("include") or [])
    incomplete = reply.stop_reason in ("max_tokens", "model_context_window_exceeded")
    reasoning = body.get("reasoning") if isinstance(body.get("reasoning"), Mapping) else {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": "incomplete" if incomplete else "completed",
        "completed_at": None if incomplete else created,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": model.id,
        "output": output_items(response_id, reply, model, include),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": {
            "effort": reasoning.get("effort", "medium" if model.reasoning else None),
            "summary": reasoning.get("summary"),
        },
        "service_tier": "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [{"strict": None, "description": None, **t} for t in body.get("tools") or []],
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage_,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


class _Events:
    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def add(self, kind: str, **fields: Any) -> None:
        data = {"type": kind, "sequence_number": len(self.frames), **fields}
        self.frames.append(b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n")


def events(done: Mapping[str, Any]) -> list[bytes]:
    """Every event of a stream ending in the finished response `done`."""
    out = _Events()
    start = {**done, "status": "in_progress", "output": [], "usage": None, "completed_at": None}
    start["incomplete_details"] = None
    out.add("response.created", response=start)
    out.add("response.in_progress", response=start)
    for index, item in enumerate(done["output"]):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            part = item["content"][0]
            out.add(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            empty = {**part, "text": ""}
            out.add("response.content_part.added", **where, content_index=0, part=empty)
            for piece in chunk_text(part["text"]):
                out.add(
                    "response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[]
                )
            out.add(
                "response.output_text.done",
                **where,
                content_index=0,
                text=part["text"],
                logprobs=[],
            )
            out.add("response.content_part.done", **where, content_index=0, part=part)
        elif item["type"] == "function_call":
            added = {**item, "status": "in_progress", "arguments": ""}
            out.add("response.output_item.added", output_index=index, item=added)
            for piece in chunk_json(item["arguments"])[1:]:
                out.add("response.function_call_arguments.delta", **where, delta=piece)
            out.add(
                "response.function_call_arguments.done",
                **where,
                name=item["name"],
                arguments=item["arguments"],
            )
        else:
            added = {**item, "summary": []}
            if "content" in item:
                added["content"] = []
            out.add("response.output_item.added", output_index=index, item=added)
            for content in item.get("content") or ():
                for piece in chunk_text(content["text"]):
                    out.add("response.reasoning_text.delta", **where, content_index=0, delta=piece)
                out.add(
                    "response.reasoning_text.done", **where, content_index=0, text=content["text"]
                )
        out.add("response.output_item.done", output_index=index, item=item)
    final = "response.incomplete" if done["status"] == "incomplete" else "response.completed"
    out.add(final, response=done)
    return out.frames


def error_frames(done: Mapping[str, Any], at: int, error: Mapping[str, Any]) -> bytes:
    """A mid-stream failure after `at` events, as a real stream ends (O-REC): an `error` event
    with the nested error object, then `response.failed`."""
    frames = _Events()
    frames.frames = [b""] * at  # only the numbering matters here
    frames.add("error", error=dict(error))
    failed = {
        **done,
        "status": "failed",
        "output": [],
        "usage": None,
        "completed_at": None,
        "error": {"code": error.get("code") or "server_error", "message": error["message"]},
    }
    frames.add("response.failed", response=failed)
    return b"".join(frames.frames[at:])
