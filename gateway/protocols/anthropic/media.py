"""The media of a Messages request: validated and tallied for the admission hold. Pure.

Images and documents sit in `messages[i].content[j]`, inside `tool_result` content, and inside
a document whose source is `content` (protocol.md, "Content blocks"). Sources are `base64` (checked
here: alphabet, padding, magic bytes), `url` and `file` (fetched by the provider, so their size is
unknown here: an image is bounded by the model's per-image cap, a document by the page limit).
Anything else is left to the provider, which refuses what it does not know (and bills nothing).
"""

from __future__ import annotations

from typing import Any

from gateway.protocols.media import (
    PDF_MEDIA_TYPE,
    MediaFigures,
    MediaTally,
    check_image,
    check_pdf,
)

# tool_result content and document content blocks nest, but only this deep in the protocol.
_MAX_BLOCK_NESTING = 4


def tally_messages(body: dict[str, Any], figures: MediaFigures) -> MediaTally:
    """Validate every base64 image and PDF of `body` and bound what its media can cost.

    Raises InvalidMedia naming the part (`messages[0].content[2].source.data`).
    """
    tally = MediaTally()
    messages = body.get("messages")
    if not isinstance(messages, list):
        return tally
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            _blocks(content, f"messages[{i}].content", tally, figures, 0)
    return tally


def _blocks(
    blocks: list[Any], param: str, tally: MediaTally, figures: MediaFigures, depth: int
) -> None:
    if depth > _MAX_BLOCK_NESTING:
        return
    for j, block in enumerate(blocks):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        where = f"{param}[{j}]"
        if kind == "image":
            _image(block.get("source"), f"{where}.source", tally, figures)
        elif kind == "document":
            _document(block.get("source"), f"{where}.source", tally, figures, depth)
        elif kind == "tool_result":
            content = block.get("content")
            if isinstance(content, list):
                _blocks(content, f"{where}.content", tally, figures, depth + 1)


def _image(source: object, param: str, tally: MediaTally, figures: MediaFigures) -> None:
    if not isinstance(source, dict):
        return
    kind = source.get("type")
    if kind == "base64":
        data, media_type = source.get("data"), source.get("media_type")
        if isinstance(data, str) and isinstance(media_type, str):
            size = check_image(data, media_type, f"{param}.data")
            tally.payload_chars += len(data)
            tally.add_image(figures, size)
    elif kind in ("url", "file"):
        tally.add_image(figures, None)  # fetched by the provider: the model's cap


def _document(
    source: object, param: str, tally: MediaTally, figures: MediaFigures, depth: int
) -> None:
    if not isinstance(source, dict):
        return
    kind = source.get("type")
    if kind == "base64":
        data = source.get("data")
        if isinstance(data, str) and source.get("media_type") == PDF_MEDIA_TYPE:
            pages = check_pdf(data, f"{param}.data")
            tally.payload_chars += len(data)
            if pages is None:
                tally.unsized_documents += 1
            else:
                tally.pdf_pages += pages
    elif kind in ("url", "file"):
        tally.unsized_documents += 1
    elif kind == "content":
        content = source.get("content")
        if isinstance(content, list):
            _blocks(content, f"{param}.content", tally, figures, depth + 1)
