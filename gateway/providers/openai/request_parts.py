"""Anthropic content blocks -> Chat Completions content parts (pure): images and documents.

Apart from request.py, which translates the request around them, because documents have rules
of their own. OpenAI's file-inputs guide
(https://developers.openai.com/api/docs/guides/file-inputs) says Chat Completions "accepts only
PDF files as file content parts", as base64 data (`file_data`) or an uploaded file's id
(`file_id`), and never by external URL; and "To use text from a file in Chat Completions, read
the file in your application and send its contents as a text content part". The part's shape is
openai-python's `ChatCompletionContentPartParam` member `File`:
`{"type": "file", "file": {"file_data", "file_id", "filename"}}`. So a document block becomes:

- a base64 PDF -> a `file` part: the data as a `data:application/pdf;base64,…` URL (the guide's
  own example), with a filename (the document's title when it is a plain file name, else
  `document-<n>.pdf`): the model reads the file's name as context;
- a plain-text document -> a text part with its text (its title on the first line);
- a content document (text and image blocks) -> those blocks' parts;
- a PDF by URL, or an Anthropic file id -> refused naming `source.type`: Chat takes no URL, and
  an Anthropic file id means nothing to OpenAI. EZAT does not download the file itself: it would
  fetch customers' URLs from the gateway on a path no other client API has;
- `citations: {"enabled": true}` -> refused naming `citations`: a Chat answer carries no
  citations, so the client would silently get none.
"""

from __future__ import annotations

import re
from typing import Any

from gateway.protocols.openai.inbound_messages import short

__all__ = ["UntranslatableRequest", "block_type", "document_parts", "image_part", "string"]

_PDF = "application/pdf"
_FILENAME = re.compile(r"[\w][\w .()-]{0,99}\.pdf", re.IGNORECASE)


class UntranslatableRequest(ValueError):
    """A Messages field with no Chat Completions equivalent; `param` is its JSON path."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = f"{param}: {message}"


def block_type(block: object, at: str) -> str:
    if not isinstance(block, dict):
        raise UntranslatableRequest(at, "must be a content block (an object)")
    kind = block.get("type")
    if not isinstance(kind, str):
        raise UntranslatableRequest(f"{at}.type", "must be a string")
    return kind


def string(value: object, param: str) -> str:
    if not isinstance(value, str):
        raise UntranslatableRequest(param, "must be a string")
    return value


def image_part(source: object, param: str) -> dict[str, Any]:
    if not isinstance(source, dict):
        raise UntranslatableRequest(param, "must be an object")
    kind = source.get("type")
    if kind == "base64":
        media = string(source.get("media_type"), f"{param}.media_type")
        data = string(source.get("data"), f"{param}.data")
        url = f"data:{media};base64,{data}"
    elif kind == "url":
        url = string(source.get("url"), f"{param}.url")
    else:
        raise UntranslatableRequest(f"{param}.type", f"{short(kind)} image sources cannot be sent")
    return {"type": "image_url", "image_url": {"url": url}}


def document_parts(block: dict[str, Any], at: str, number: int) -> list[dict[str, Any]]:
    """The Chat content parts of the document block at `at`, the `number`-th of its request
    (for a filename when the title cannot be one)."""
    citations = block.get("citations")
    if isinstance(citations, dict) and citations.get("enabled") is True:
        raise UntranslatableRequest(
            f"{at}.citations", "citations cannot be returned by this model: leave them off"
        )
    title = block.get("title")
    title = title if isinstance(title, str) and title.strip() else None
    source = block.get("source")
    where = f"{at}.source"
    if not isinstance(source, dict):
        raise UntranslatableRequest(where, "must be an object")
    kind = source.get("type")
    if kind == "base64":
        media = string(source.get("media_type"), f"{where}.media_type")
        if media != _PDF:
            raise UntranslatableRequest(
                f"{where}.media_type", f'must be "{_PDF}": this model takes PDF files only'
            )
        data = string(source.get("data"), f"{where}.data")
        filename = title if title and _FILENAME.fullmatch(title) else f"document-{number}.pdf"
        file = {"filename": filename, "file_data": f"data:{_PDF};base64,{data}"}
        return [{"type": "file", "file": file}]
    if kind == "text":
        text = string(source.get("data"), f"{where}.data")
        return [{"type": "text", "text": f"{title}\n\n{text}" if title else text}]
    if kind == "content":
        return _content_parts(source.get("content"), f"{where}.content")
    if kind == "url":
        raise UntranslatableRequest(
            f"{where}.type", "PDFs by URL cannot be sent to this model: send the file's data"
        )
    raise UntranslatableRequest(f"{where}.type", f"{short(kind)} documents cannot be sent")


def _content_parts(content: object, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise UntranslatableRequest(where, "must be a string or an array")
    parts: list[dict[str, Any]] = []
    for k, inner in enumerate(content):
        at = f"{where}.{k}"
        kind = block_type(inner, at)
        if kind == "text":
            parts.append({"type": "text", "text": string(inner.get("text"), f"{at}.text")})
        elif kind == "image":
            parts.append(image_part(inner.get("source"), f"{at}.source"))
        else:
            raise UntranslatableRequest(f"{at}.type", "must be text or image")
    return parts
