"""What images and PDF pages cost on the simulated API: by pixels and pages, like the real one.

Sources (Anthropic's documentation):
- https://platform.claude.com/docs/en/build-with-claude/vision: an image costs
  ⌈width/28⌉ × ⌈height/28⌉ visual tokens; an image larger than the model's maximal native
  resolution is first resized, keeping its aspect ratio, to the largest size within it: 2,576 px
  on the long edge and 4,784 tokens for Opus 4.7 and the high-resolution models after it,
  1,568 px and 1,568 tokens for the others. URL sources are downloaded by the API.
- https://platform.claude.com/docs/en/build-with-claude/pdf-support: each page is converted into
  an image and its text is extracted and provided alongside; both are billed.

Measured figures (count_tokens) put a rendered page at about 1,600 tokens on every model, so a
page image here is a US Letter page within the standard 1,568 px / 1,568-token resolution; the
text is what the page's content streams show (`(...) Tj`), about 4 characters a token.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextvars
import math
import re
from collections.abc import Mapping
from typing import Any

import aiohttp

from gateway.protocols.media import image_size

PATCH = 28
STANDARD = (1568, 1568)  # (long edge px, tokens)
HIGH_RESOLUTION = (2576, 4784)
_HIGH_RES_MODEL = re.compile(r"claude-(opus-4-[7-9]|opus-[5-9]|sonnet-[5-9]|fable)")
LETTER_PAGE_PX = (612, 792)  # 8.5 × 11 in at 72 dpi

# Bytes of the URL sources of the request being priced, downloaded by the handler first.
url_media: contextvars.ContextVar[Mapping[str, bytes] | None] = contextvars.ContextVar(
    "url_media", default=None
)

_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
_SHOWN_TEXT = re.compile(rb"\(((?:[^()\\]|\\.)*)\)\s*Tj")


def resolution(model: str) -> tuple[int, int]:
    return HIGH_RESOLUTION if _HIGH_RES_MODEL.search(model or "") else STANDARD


def visual_tokens(width: int, height: int, model: str) -> int:
    """Tokens of a width × height image after the model's resize."""
    max_edge, max_tokens = resolution(model)
    scale = min(1.0, max_edge / max(width, height))
    w, h = max(1, round(width * scale)), max(1, round(height * scale))
    while math.ceil(w / PATCH) * math.ceil(h / PATCH) > max_tokens:
        w, h = max(1, int(w * 0.99)), max(1, int(h * 0.99))
    return math.ceil(w / PATCH) * math.ceil(h / PATCH)


def _source_bytes(source: Mapping[str, Any]) -> bytes | None:
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        try:
            return base64.b64decode(source["data"], validate=True)
        except (binascii.Error, ValueError):
            return None
    if source.get("type") == "url":
        return (url_media.get() or {}).get(str(source.get("url")))
    return None


def image_block_tokens(block: Mapping[str, Any], model: str) -> int:
    source = block.get("source")
    data = _source_bytes(source) if isinstance(source, Mapping) else None
    size = image_size(data) if data else None
    if size is None:
        return resolution(model)[1]  # unreadable here: billed as a full-size image
    return visual_tokens(*size, model)


def pdf_tokens(data: bytes) -> int:
    pages = max(1, len(_PAGE.findall(data)))
    scale = STANDARD[0] / max(LETTER_PAGE_PX)  # rendered to the standard long edge
    page_image = visual_tokens(round(LETTER_PAGE_PX[0] * scale), STANDARD[0], "")
    text_chars = sum(len(m) for m in _SHOWN_TEXT.findall(data))
    return pages * page_image + -(-text_chars // 4)


def document_block_tokens(block: Mapping[str, Any]) -> int | None:
    source = block.get("source")
    if not isinstance(source, Mapping):
        return None
    if source.get("type") == "base64" or source.get("type") == "url":
        data = _source_bytes(source)
        return pdf_tokens(data) if data else 0
    return None  # text and content documents are counted as their text


def url_sources(body: Mapping[str, Any]) -> list[str]:
    """The URL image and document sources of a request (what the API downloads first)."""
    urls: list[str] = []
    stack: list[Any] = [body.get("messages")]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, Mapping):
            source = item.get("source")
            if (
                item.get("type") in ("image", "document")
                and isinstance(source, Mapping)
                and source.get("type") == "url"
                and isinstance(source.get("url"), str)
            ):
                urls.append(source["url"])
            else:
                stack.extend(v for v in item.values() if isinstance(v, (list, Mapping)))
    return urls


class MediaDownloadFailed(Exception):
    """A URL source could not be downloaded (the real API answers 400 then)."""


async def download(urls: list[str], *, timeout_s: float = 10.0) -> dict[str, bytes]:
    """The bytes behind each URL source, fetched concurrently like the real API does."""
    unique = sorted(set(urls))
    limit = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=limit) as session:

        async def one(url: str) -> bytes:
            try:
                async with session.get(url) as response:
                    if response.status != 200:
                        raise MediaDownloadFailed(f"{url}: HTTP {response.status}")
                    return await response.read()
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise MediaDownloadFailed(f"{url}: {type(exc).__name__}") from None

        bodies = await asyncio.gather(*(one(url) for url in unique))
    return dict(zip(unique, bodies, strict=True))
