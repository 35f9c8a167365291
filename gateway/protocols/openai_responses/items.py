"""Responses `input` items -> Anthropic `system` + `messages` (part of the inbound translator).

Items map onto turns: messages by role, `function_call` and `reasoning` into the assistant turn,
`function_call_output` into the next user turn (tool results first, as Anthropic requires).
Every error names the client's own item (`input[3].call_id`): after merging, Anthropic's indexes
would point somewhere else. Content parts reuse chat's rules (images, PDFs, cache markers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.protocols.openai.inbound_messages import (
    Converter,
    content_blocks,
    parse_arguments,
    short,
)
from gateway.protocols.openai.types import InvalidRequest

from .tools import CUSTOM_INPUT, flat_name
from .types import Unseal

_ROLES = ("user", "assistant", "system", "developer")
_USER_PARTS = ("input_text", "input_image", "input_file")
_ASSISTANT_PARTS = ("output_text", "refusal", "input_text")
_THINKING = ("thinking", "redacted_thinking")
MAX_CALL_ID = 64  # OpenAI's limit on call_id (O-SPEC FunctionCallOutputItemParam)
# A call_id EZAT gave out with a provider's thought signature in it (the mark and the format are
# gateway/providers/openai/signatures.py's): as long as the signature needs, within reason.
SIGNED_CALL_ID_MARK = "__sig_"
MAX_SIGNED_CALL_ID = 16_384


class _Turn:
    __slots__ = ("blocks", "results", "role", "thinking")

    def __init__(self, role: str) -> None:
        self.role = role
        self.results: list[dict[str, Any]] = []  # tool_result blocks (lead the user turn)
        self.blocks: list[dict[str, Any]] = []
        self.thinking = False  # the assistant turn carries a thinking block


class ItemConverter:
    """Converts one request's items; `history` items (from a stored response) are trusted."""

    __slots__ = ("conv", "issued", "pending_calls", "system", "turns", "unseal")

    def __init__(self, conv: Converter, unseal: Unseal | None) -> None:
        self.conv = conv
        self.unseal = unseal
        self.system: list[dict[str, Any]] = []
        self.turns: list[_Turn] = []
        self.issued: set[str] = set()  # call ids of function_call items seen so far
        self.pending_calls: dict[str, str] = {}  # call id -> param, until its output arrives

    # -- turns -------------------------------------------------------------------------------

    def _turn(self, role: str) -> _Turn:
        if not self.turns or self.turns[-1].role != role:
            # Consecutive same-role items become one turn: Anthropic wants alternation.
            self._close_assistant_calls()
            self.turns.append(_Turn(role))
        return self.turns[-1]

    def _close_assistant_calls(self) -> None:
        """Leaving an assistant turn that called tools for anything but their outputs."""
        if self.turns and self.turns[-1].role == "user" and self.pending_calls:
            call_id, param = next(iter(self.pending_calls.items()))
            raise InvalidRequest(
                f"{param}: function call {short(call_id)} has no function_call_output before "
                "the conversation goes on",
                param,
            )

    def result(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
        """(system blocks, Anthropic messages, whether a tool_use turn lacks thinking)."""
        if self.pending_calls:
            call_id, param = next(iter(self.pending_calls.items()))
            raise InvalidRequest(
                f"{param}: function call {short(call_id)} has no function_call_output after it",
                param,
            )
        if not any(t.role == "user" for t in self.turns):
            raise InvalidRequest("input: must contain at least one user message", "input")
        tool_turn_without_thinking = False
        for turn in self.turns:
            if turn.role == "assistant" and any(b["type"] == "tool_use" for b in turn.blocks):
                tool_turn_without_thinking = not turn.thinking
        messages = [
            {"role": t.role, "content": t.results + t.blocks}
            for t in self.turns
            if t.results or t.blocks
        ]
        return self.system, messages, tool_turn_without_thinking

    # -- items -------------------------------------------------------------------------------

    def add(self, item: object, param: str, *, trusted: bool = False) -> None:
        if not isinstance(item, dict):
            raise InvalidRequest(f"{param}: must be an object", param)
        kind = item.get("type")
        if kind is None or kind == "message":
            self._message(item, param)
        elif kind == "function_call" or kind == "custom_tool_call":
            self._function_call(item, param)
        elif kind == "function_call_output" or kind == "custom_tool_call_output":
            self._function_call_output(item, param)
        elif kind == "reasoning":
            self._reasoning(item, param, trusted)
        else:
            raise InvalidRequest(
                f"{param}.type: unsupported input item type {short(kind)}; use message, "
                "function_call, function_call_output, custom_tool_call, "
                "custom_tool_call_output, reasoning or item_reference",
                f"{param}.type",
            )

    def _message(self, item: dict[str, Any], param: str) -> None:
        role = item.get("role")
        if role not in _ROLES:
            raise InvalidRequest(
                f"{param}.role: must be one of user, assistant, system, developer "
                f"(got {short(role)})",
                f"{param}.role",
            )
        content = item.get("content")
        if role in ("system", "developer"):
            # Hoisted: Anthropic's system prompt has no position in the messages.
            self.system.extend(self._parts(content, param, role))
            return
        blocks = self._parts(content, param, role)
        if role == "user":
            if not blocks:
                raise InvalidRequest(f"{param}.content: must not be empty", f"{param}.content")
            self._turn("user").blocks.extend(blocks)
        elif blocks:
            self._turn("assistant").blocks.extend(blocks)

    def _parts(self, content: object, param: str, role: str) -> list[dict[str, Any]]:
        return content_blocks(content, param, role, self._part, "content parts")

    def _part(self, part: object, param: str, role: str) -> dict[str, Any] | None:
        if not isinstance(part, dict):
            raise InvalidRequest(f"{param}: must be an object", param)
        kind = part.get("type")
        allowed = _ASSISTANT_PARTS if role == "assistant" else _USER_PARTS
        if kind not in allowed or (role in ("system", "developer") and kind != "input_text"):
            allowed_here = ("input_text",) if role in ("system", "developer") else allowed
            raise InvalidRequest(
                f"{param}.type: {short(kind)} parts are not allowed in {role} messages "
                f"(use {', '.join(allowed_here)})",
                f"{param}.type",
            )
        block: dict[str, Any]
        if kind in ("input_text", "output_text", "refusal"):
            key = "refusal" if kind == "refusal" else "text"
            text = part.get(key)
            if not isinstance(text, str):
                raise InvalidRequest(f"{param}.{key}: must be a string", f"{param}.{key}")
            if not text:
                self.conv.copy_cache_control(part, {}, param)
                return None  # Anthropic refuses empty text blocks
            block = {"type": "text", "text": text}
        elif kind == "input_image":
            if part.get("file_id") is not None:
                raise _file_id_refused(f"{param}.file_id")
            block = self.conv.image_block(part.get("image_url"), param, f"{param}.image_url")
        else:
            for name in ("file_id", "file_url"):
                if part.get(name) is not None:
                    raise _file_id_refused(f"{param}.{name}")
            block = self.conv.pdf_block(part.get("file_data"), param, f"{param}.file_data")
        self.conv.copy_cache_control(part, block, param)
        return block

    def _call_id(self, item: dict[str, Any], param: str) -> str:
        call_id = item.get("call_id")
        limit = MAX_CALL_ID
        if isinstance(call_id, str) and SIGNED_CALL_ID_MARK in call_id:
            limit = MAX_SIGNED_CALL_ID
        if not isinstance(call_id, str) or not 1 <= len(call_id) <= limit:
            raise InvalidRequest(
                f"{param}.call_id: must be a string of 1 to {MAX_CALL_ID} characters",
                f"{param}.call_id",
            )
        return call_id

    def _function_call(self, item: dict[str, Any], param: str) -> None:
        call_id = self._call_id(item, param)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"{param}.name: must be a non-empty string", f"{param}.name")
        namespace = item.get("namespace")
        if namespace is not None and (not isinstance(namespace, str) or not namespace):
            raise InvalidRequest(
                f"{param}.namespace: must be a non-empty string", f"{param}.namespace"
            )
        if item.get("type") == "custom_tool_call":
            text = item.get("input")
            if not isinstance(text, str):
                raise InvalidRequest(f"{param}.input: must be a string", f"{param}.input")
            tool_input: dict[str, Any] = {CUSTOM_INPUT: text}
        else:
            tool_input = parse_arguments(item.get("arguments"), f"{param}.arguments")
        turn = self._turn("assistant")
        turn.blocks.append(
            {
                "type": "tool_use",
                "id": call_id,
                # The name the tool has upstream (namespace tools are flattened, see tools.py).
                "name": flat_name(name, namespace),
                "input": tool_input,
            }
        )
        self.issued.add(call_id)
        self.pending_calls[call_id] = f"{param}.call_id"

    def _function_call_output(self, item: dict[str, Any], param: str) -> None:
        call_id = self._call_id(item, param)
        if call_id not in self.issued:
            raise InvalidRequest(
                f"{param}.call_id: {short(call_id)} does not match any function_call issued "
                "earlier in the input",
                f"{param}.call_id",
            )
        if self.pending_calls.pop(call_id, None) is None:
            raise InvalidRequest(
                f"{param}.call_id: function call {short(call_id)} was already answered",
                f"{param}.call_id",
            )
        if self.turns and self.turns[-1].role == "user" and self.turns[-1].blocks:
            # Results must lead the turn after the tool calls; text came in between.
            raise InvalidRequest(
                f"{param}: a function_call_output must come right after its function_call "
                "(before any new user message)",
                param,
            )
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
        output = item.get("output")
        if isinstance(output, str):
            if output:
                block["content"] = output
        elif isinstance(output, list):
            parts = self._parts(output, f"{param}.output", "user")
            if parts:
                block["content"] = parts
        else:
            raise InvalidRequest(
                f"{param}.output: must be a string or an array of content parts",
                f"{param}.output",
            )
        self._turn("user").results.append(block)

    def _reasoning(self, item: dict[str, Any], param: str, trusted: bool) -> None:
        blob = item.get("encrypted_content")
        if blob is None:
            # Summaries alone cannot be turned back into a signed thinking block: the turn goes
            # on without it (with thinking on, the gateway then turns thinking off).
            return
        if not isinstance(blob, str) or self.unseal is None:
            raise InvalidRequest(
                f"{param}.encrypted_content: must be a string this gateway produced",
                f"{param}.encrypted_content",
            )
        try:
            block = self.unseal(blob, f"{param}.encrypted_content")
        except InvalidRequest:
            if trusted:
                return  # a stored turn sealed for another model: continue without it
            raise
        if not isinstance(block, Mapping) or block.get("type") not in _THINKING:
            raise InvalidRequest(
                f"{param}.encrypted_content: does not hold a reasoning block",
                f"{param}.encrypted_content",
            )
        turn = self._turn("assistant")
        # Anthropic wants an assistant turn to start with its thinking: a reasoning item that
        # follows the turn's text still goes before it (after the thinking already there).
        at = 0
        while at < len(turn.blocks) and turn.blocks[at]["type"] in _THINKING:
            at += 1
        turn.blocks.insert(at, dict(block))
        turn.thinking = True


def _file_id_refused(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"{param}: file ids and file URLs are not supported because there is no Files API; "
        "send images as image_url (data: or http(s) URL) and PDFs as file_data "
        "(data:application/pdf;base64,...)",
        param,
    )
