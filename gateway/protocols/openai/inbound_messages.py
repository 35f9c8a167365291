"""Chat `messages` -> Anthropic `system` + `messages` (part of the inbound translator).

Every error names the offending field as a JSON path (`messages[2].content[1].type`) both in the
message and in `param`, because the client's indexes are the only ones it can act on: after
merging and hoisting, Anthropic's own error indexes would point somewhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gateway.protocols.media import (
    IMAGE_MEDIA_TYPES,
    PDF_MEDIA_TYPE,
    InvalidMedia,
    MediaTally,
    check_image,
    check_pdf,
)
from gateway.protocols.nesting import MAX_NESTING, nesting_exceeds, nesting_message

from .types import ImageRef, InvalidRequest, ModelCaps

# Nesting limit for JSON parsed from strings (tool-call arguments): the same bound as a request
# body (gateway/protocols/nesting.py), since it ends up inside the upstream body.
MAX_JSON_DEPTH = MAX_NESTING

_ROLES = ("system", "developer", "user", "assistant", "tool")
_KNOWN_PART_TYPES = ("text", "image_url", "file", "input_audio", "refusal")


def short(value: object, limit: int = 40) -> str:
    """repr() of a client value, truncated so an error message stays readable."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_depth(value: object, param: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse JSON nested deeper than `limit` (iterative: recursion could itself overflow)."""
    if isinstance(value, (dict, list)) and nesting_exceeds(value, limit):
        raise InvalidRequest(nesting_message(param, limit), param)


def parse_data_url(url: str, param: str) -> tuple[str, str]:
    """Split `data:<mime>;base64,<data>` into (mime, data); the mime is lower-cased."""
    header, sep, data = url[5:].partition(",")
    if not sep:
        raise InvalidRequest(
            f"{param}: malformed data URL (expected data:<type>;base64,<data>)", param
        )
    media_type, *flags = header.split(";")
    if "base64" not in (flag.strip().lower() for flag in flags):
        raise InvalidRequest(
            f"{param}: data URLs must be base64-encoded (data:<type>;base64,<data>)", param
        )
    if not data:
        raise InvalidRequest(f"{param}: the data URL is empty", param)
    return media_type.strip().lower(), data


# (part, its JSON path, the message's role) -> its Anthropic block, or None to leave it out.
PartReader = Callable[[object, str, str], dict[str, Any] | None]


def content_blocks(
    content: object, param: str, role: str, part: PartReader, parts_name: str
) -> list[dict[str, Any]]:
    """A message's content (a string or an array of parts, each read by `part`) as Anthropic
    blocks; empty text is dropped. `parts_name` says what the array holds in the error. Both
    OpenAI APIs read content this way (chat messages, Responses message items)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise InvalidRequest(
            f"{param}.content: must be a string or an array of {parts_name}", f"{param}.content"
        )
    blocks: list[dict[str, Any]] = []
    for j, item in enumerate(content):
        block = part(item, f"{param}.content[{j}]", role)
        if block is not None:
            blocks.append(block)
    return blocks


class _Turn:
    """One Anthropic turn being built, with the tool call ids asked and answered in it."""

    __slots__ = ("answers", "blocks", "calls", "results", "role")

    def __init__(self, role: str) -> None:
        self.role = role
        self.results: list[dict[str, Any]] = []  # tool_result blocks
        self.blocks: list[dict[str, Any]] = []  # everything else
        self.calls: list[tuple[str, str]] = []  # (tool_use id, client param)
        self.answers: list[tuple[str, str]] = []  # (tool_call_id answered, client param)


def _check_tool_pairing(turns: list[_Turn]) -> None:
    """Tool calls and tool messages must pair up across adjacent turns.

    Anthropic refuses the request otherwise, but its error would carry indexes of the merged
    turns; checked here, the error names the client's own message.
    """
    for k, turn in enumerate(turns):
        if turn.answers:
            asked = {call_id for call_id, _ in turns[k - 1].calls} if k else set()
            for call_id, param in turn.answers:
                if call_id not in asked:
                    raise InvalidRequest(
                        f"{param}: {short(call_id)} does not match a tool call of the preceding "
                        "assistant message",
                        param,
                    )
        if turn.calls and k + 1 < len(turns):
            answered = {call_id for call_id, _ in turns[k + 1].answers}
            for call_id, param in turn.calls:
                if call_id not in answered:
                    raise InvalidRequest(
                        f"{param}: tool call {short(call_id)} has no tool message answering it "
                        "right after the assistant message",
                        param,
                    )


class Converter:
    """Translation state shared by messages and tools: caps, copied breakpoints, images."""

    __slots__ = ("cache_params", "caps", "images", "keep_cache_control", "media", "tool_use_ids")

    def __init__(self, caps: ModelCaps) -> None:
        self.caps = caps
        # Without prompt caching upstream, caller breakpoints are dropped rather than sent to a
        # model that would refuse them.
        self.keep_cache_control = caps.prompt_caching
        self.cache_params: list[str] = []  # where the caller put cache_control, in order
        self.images: list[ImageRef] = []
        self.media = MediaTally()
        self.tool_use_ids: list[str] = []

    # -- cache_control ---------------------------------------------------------------------

    def copy_cache_control(self, src: dict[str, Any], dst: dict[str, Any], param: str) -> None:
        """Copy a caller's `cache_control` marker (OpenRouter/LiteLLM extension) onto `dst`.

        Only `type` and `ttl` are copied: they are all Anthropic knows, and rebuilding the dict
        keeps arbitrary client JSON out of the upstream body.
        """
        marker = src.get("cache_control")
        if marker is None:
            return
        cc_param = f"{param}.cache_control"
        if not isinstance(marker, dict) or not isinstance(marker.get("type"), str):
            raise InvalidRequest(
                f'{cc_param}: must be an object such as {{"type": "ephemeral"}}', cc_param
            )
        ttl = marker.get("ttl")
        if ttl is not None and not isinstance(ttl, str):
            raise InvalidRequest(
                f'{cc_param}.ttl: must be a string such as "5m" or "1h"', f"{cc_param}.ttl"
            )
        self.cache_params.append(cc_param)
        if self.keep_cache_control:
            copied = {"type": marker["type"]}
            if ttl is not None:
                copied["ttl"] = ttl
            dst["cache_control"] = copied

    # -- messages --------------------------------------------------------------------------

    def convert_messages(self, raw: object) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Return (system blocks, Anthropic messages)."""
        if not isinstance(raw, list) or not raw:
            raise InvalidRequest("messages: must be a non-empty array of messages", "messages")
        system: list[dict[str, Any]] = []
        turns: list[_Turn] = []
        for i, msg in enumerate(raw):
            param = f"messages[{i}]"
            if not isinstance(msg, dict):
                raise InvalidRequest(f"{param}: must be an object", param)
            role = msg.get("role")
            if not isinstance(role, str) or role not in _ROLES:
                raise self._bad_role(role, param)
            if role == "system" or role == "developer":
                # Hoisted: Anthropic's initial system prompt has no position in the messages.
                system.extend(self._content(msg.get("content"), param, role))
                continue
            results: list[dict[str, Any]] = []
            calls: list[tuple[str, str]] = []
            if role == "user":
                blocks = self._content(msg.get("content"), param, role)
                if not blocks:
                    raise InvalidRequest(f"{param}.content: must not be empty", f"{param}.content")
            elif role == "tool":
                results, blocks = [self._tool_result(msg, param)], []
            else:
                blocks = self._assistant(msg, param)
                if not blocks:
                    continue  # an empty assistant message says nothing; Anthropic refuses it
                tool_ids = [b["id"] for b in blocks if b["type"] == "tool_use"]
                calls = [(c, f"{param}.tool_calls[{j}].id") for j, c in enumerate(tool_ids)]
            turn_role = "assistant" if role == "assistant" else "user"
            if not turns or turns[-1].role != turn_role:
                # Consecutive same-role messages become one turn: Anthropic wants alternation.
                turns.append(_Turn(turn_role))
            turn = turns[-1]
            turn.results.extend(results)
            turn.blocks.extend(blocks)
            turn.calls.extend(calls)
            turn.answers.extend((r["tool_use_id"], f"{param}.tool_call_id") for r in results)
        if not turns:
            raise InvalidRequest("messages: must contain at least one user message", "messages")
        _check_tool_pairing(turns)
        return system, [
            # Tool results lead: Anthropic wants them at the START of the turn after tool_use.
            {"role": t.role, "content": t.results + t.blocks}
            for t in turns
        ]

    @staticmethod
    def _bad_role(role: object, param: str) -> InvalidRequest:
        if role == "function":
            return InvalidRequest(
                f"{param}.role: the legacy 'function' role is not supported; "
                "send tool results as 'tool' messages",
                f"{param}.role",
            )
        return InvalidRequest(
            f"{param}.role: must be one of system, developer, user, assistant, tool "
            f"(got {short(role)})",
            f"{param}.role",
        )

    def _content(self, content: object, param: str, role: str) -> list[dict[str, Any]]:
        """Content (string, parts or null) -> Anthropic blocks; empty text is dropped."""
        if content is None and role == "assistant":
            return []
        parts = "content parts" if role == "user" else "text parts"
        return content_blocks(content, param, role, self._part, parts)

    def _part(self, part: object, param: str, role: str) -> dict[str, Any] | None:
        if not isinstance(part, dict):
            raise InvalidRequest(f"{param}: must be an object", param)
        kind = part.get("type")
        block: dict[str, Any]
        if kind == "text" or (kind == "refusal" and role == "assistant"):
            # An assistant's earlier refusal is just text the model said.
            text = part.get(kind)
            if not isinstance(text, str):
                raise InvalidRequest(f"{param}.{kind}: must be a string", f"{param}.{kind}")
            if not text:
                # Anthropic refuses empty text blocks. A marker on one is still validated and
                # still counts as "the caller placed breakpoints".
                self.copy_cache_control(part, {}, param)
                return None
            block = {"type": "text", "text": text}
        elif role != "user" or kind not in ("image_url", "file", "input_audio"):
            raise self._bad_part_type(kind, param, role)
        elif kind == "image_url":
            block = self._image(part, param)
        elif kind == "file":
            block = self._file(part, param)
        else:
            raise InvalidRequest(
                f"{param}.type: audio input (input_audio) is not supported", f"{param}.type"
            )
        self.copy_cache_control(part, block, param)
        return block

    @staticmethod
    def _bad_part_type(kind: object, param: str, role: str) -> InvalidRequest:
        if isinstance(kind, str) and kind in _KNOWN_PART_TYPES:
            reason = f"'{kind}' parts are not allowed in {role} messages"
        else:
            reason = f"unknown content part type {short(kind)}"
        return InvalidRequest(f"{param}.type: {reason}", f"{param}.type")

    def _image(self, part: dict[str, Any], param: str) -> dict[str, Any]:
        spec = part.get("image_url")
        # Some clients send the URL string directly instead of {"url": ...}; accept both.
        if isinstance(spec, dict):
            url, url_param = spec.get("url"), f"{param}.image_url.url"
        else:
            url, url_param = spec, f"{param}.image_url"
        return self.image_block(url, param, url_param)

    def image_block(self, url: object, param: str, url_param: str) -> dict[str, Any]:
        """An image part's URL (data: or http(s)) as an Anthropic image block; http(s) URLs are
        queued in `images` for the gateway to download."""
        if not self.caps.vision:
            raise InvalidRequest(
                f"{param}: model {self.caps.canonical_id} does not accept images", param
            )
        if not isinstance(url, str):
            raise InvalidRequest(
                f"{url_param}: must be a string (a data: or http(s) URL)", url_param
            )
        scheme = url[:8].lower()
        if scheme.startswith("data:"):
            media_type, data = parse_data_url(url, url_param)
            if media_type not in IMAGE_MEDIA_TYPES:
                raise InvalidRequest(
                    f"{url_param}: unsupported image type {short(media_type)}; "
                    "use image/jpeg, image/png, image/gif or image/webp",
                    url_param,
                )
            try:
                size = check_image(data, media_type, url_param)
            except InvalidMedia as exc:
                raise InvalidRequest(exc.message, exc.param) from None
            self.media.payload_chars += len(data)
            self.media.add_image(self.caps.media, size)
            return {
                "type": "image",
                "source": {"type": "base64", "media_type": media_type, "data": data},
            }
        if scheme.startswith(("http://", "https://")):
            # Placeholder source: the gateway downloads the URL (SSRF-safe) and swaps in base64,
            # because not every upstream deployment can fetch URLs itself.
            block = {"type": "image", "source": {"type": "url", "url": url}}
            self.images.append(ImageRef(param=url_param, url=url, block=block))
            return block
        raise InvalidRequest(
            f"{url_param}: must be a data: URL (data:image/png;base64,...) or an http(s) URL",
            url_param,
        )

    def _file(self, part: dict[str, Any], param: str) -> dict[str, Any]:
        spec = part.get("file")
        if not isinstance(spec, dict):
            raise InvalidRequest(f"{param}.file: must be an object", f"{param}.file")
        if spec.get("file_id") is not None:
            raise InvalidRequest(
                f"{param}.file.file_id: file_id is not supported because there is no Files API; "
                "send the PDF inline as file_data (data:application/pdf;base64,...)",
                f"{param}.file.file_id",
            )
        return self.pdf_block(spec.get("file_data"), param, f"{param}.file.file_data")

    def pdf_block(self, file_data: object, param: str, data_param: str) -> dict[str, Any]:
        """A PDF given as a data URL, as an Anthropic document block."""
        if not self.caps.pdf:
            raise InvalidRequest(
                f"{param}: model {self.caps.canonical_id} does not accept PDF files", param
            )
        if not isinstance(file_data, str) or file_data[:5].lower() != "data:":
            raise InvalidRequest(
                f"{data_param}: must be a data URL (data:application/pdf;base64,...)", data_param
            )
        media_type, data = parse_data_url(file_data, data_param)
        if media_type != PDF_MEDIA_TYPE:
            raise InvalidRequest(
                f"{data_param}: only PDF files (application/pdf) are supported, "
                f"got {short(media_type)}",
                data_param,
            )
        try:
            pages = check_pdf(data, data_param)
        except InvalidMedia as exc:
            raise InvalidRequest(exc.message, exc.param) from None
        self.media.payload_chars += len(data)
        if pages is None:
            self.media.unsized_documents += 1
        else:
            self.media.pdf_pages += pages
        return {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": data},
        }

    def _tool_result(self, msg: dict[str, Any], param: str) -> dict[str, Any]:
        tool_call_id = msg.get("tool_call_id")
        if not isinstance(tool_call_id, str) or not tool_call_id:
            raise InvalidRequest(
                f"{param}.tool_call_id: required, the id of the tool call this message answers",
                f"{param}.tool_call_id",
            )
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_call_id}
        content = msg.get("content")
        if isinstance(content, str):
            if content:
                block["content"] = content
        else:
            parts = self._content(content, param, "tool")
            if parts:
                block["content"] = parts
        return block

    def _assistant(self, msg: dict[str, Any], param: str) -> list[dict[str, Any]]:
        blocks = self._content(msg.get("content"), param, "assistant")
        refusal = msg.get("refusal")
        if isinstance(refusal, str):
            if refusal:
                blocks.append({"type": "text", "text": refusal})
        elif refusal is not None:
            raise InvalidRequest(f"{param}.refusal: must be a string", f"{param}.refusal")
        if msg.get("function_call") is not None:
            raise InvalidRequest(
                f"{param}.function_call: the legacy function_call is not supported; use tool_calls",
                f"{param}.function_call",
            )
        tool_calls = msg.get("tool_calls")
        if tool_calls is None:
            return blocks
        if not isinstance(tool_calls, list):
            raise InvalidRequest(f"{param}.tool_calls: must be an array", f"{param}.tool_calls")
        for j, call in enumerate(tool_calls):
            blocks.append(self._tool_use(call, f"{param}.tool_calls[{j}]"))
        return blocks

    def _tool_use(self, call: object, param: str) -> dict[str, Any]:
        if not isinstance(call, dict):
            raise InvalidRequest(f"{param}: must be an object", param)
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidRequest(f"{param}.id: must be a non-empty string", f"{param}.id")
        kind = call.get("type")
        if kind is not None and kind != "function":
            raise InvalidRequest(
                f'{param}.type: only "function" tool calls are supported', f"{param}.type"
            )
        function = call.get("function")
        if not isinstance(function, dict):
            raise InvalidRequest(f"{param}.function: must be an object", f"{param}.function")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(
                f"{param}.function.name: must be a non-empty string", f"{param}.function.name"
            )
        tool_input = parse_arguments(function.get("arguments"), f"{param}.function.arguments")
        self.tool_use_ids.append(call_id)
        return {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}


def parse_arguments(arguments: object, param: str) -> dict[str, Any]:
    """Tool-call `arguments` (a JSON string) -> Anthropic `input` (an object)."""
    if arguments is None:
        return {}
    if not isinstance(arguments, str):
        raise InvalidRequest(f"{param}: must be a string containing a JSON object", param)
    if not arguments.strip():
        # Models emit "" for argument-less calls; Anthropic needs an object.
        return {}
    try:
        value = orjson.loads(arguments)
    except ValueError:  # orjson.JSONDecodeError subclasses ValueError
        raise InvalidRequest(f"{param}: is not valid JSON", param) from None
    if not isinstance(value, dict):
        raise InvalidRequest(f"{param}: must be a JSON object", param)
    check_depth(value, param)
    return value
