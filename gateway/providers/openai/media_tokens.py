"""Input tokens of the images and PDFs of a Chat Completions request, by OpenAI's rules: for
count_tokens (tokens.py) and for the input estimate a stream cut before its usage is billed at
(request.py).

Images: OpenAI's rule for detail "high"/"auto" (OpenAI vision guide, "Calculating costs"): fit
into 2048x2048, then shrink so the short side is at most 768, then 170 tokens per 512-pixel
tile plus 85 (1024x1024 -> 765, 2048x4096 -> 1105). The size is read from a base64 image's
header; an image given by URL (size unknown without fetching it) counts as 1024x1024, 765.

PDFs (`file` parts): OpenAI puts "both the extracted text and an image of each page" into the
context (file-inputs guide, https://developers.openai.com/api/docs/guides/file-inputs) and
publishes no per-page figure. Each page counts as the image rule on a US-letter page at 72 dpi
(612x792 -> 765) plus the catalog's per-page text allowance (catalog/media.py,
PDF_PAGE_TEXT_TOKENS, the top of Anthropic's "1,500-3,000 tokens per page"): a high count, the
safe side for compaction and for billing a cut stream. A file whose pages cannot be counted, or
given by id, counts as one page.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Any

from catalog.media import PDF_PAGE_TEXT_TOKENS
from gateway.protocols.media import HEAD_BYTES, count_pdf_pages
from gateway.protocols.media import image_size as image_header_size

__all__ = ["image_size", "image_tokens", "part_tokens", "pdf_tokens"]

UNKNOWN_IMAGE_TOKENS = 765


def image_tokens(size: tuple[int, int] | None) -> int:
    if size is None:
        return UNKNOWN_IMAGE_TOKENS
    width, height = size
    scale = min(1.0, 2048 / max(width, height))
    width, height = width * scale, height * scale
    scale = min(1.0, 768 / min(width, height))
    width, height = width * scale, height * scale
    return 85 + 170 * math.ceil(width / 512) * math.ceil(height / 512)


def image_size(url: str) -> tuple[int, int] | None:
    if not url.startswith("data:"):
        return None
    _, _, data = url.partition(",")
    # Only the header is needed: decode the first HEAD_BYTES (a whole number of base64 quads).
    head = data[: (HEAD_BYTES // 3) * 4]
    try:
        return image_header_size(base64.b64decode(head[: len(head) - len(head) % 4]))
    except (binascii.Error, ValueError):
        return None


LETTER_PAGE = (612, 792)  # US letter at 72 dpi, the size a PDF page is counted at


def pdf_tokens(file_data: object) -> int:
    """Tokens of a `file` part's PDF (module docstring): per page, a letter page's image tokens
    plus the per-page text allowance."""
    pages = 1
    if isinstance(file_data, str):
        _, _, data = file_data.partition(",")
        try:
            pages = count_pdf_pages(base64.b64decode(data)) or 1
        except (binascii.Error, ValueError):
            pages = 1
    return pages * (image_tokens(LETTER_PAGE) + PDF_PAGE_TEXT_TOKENS)


def part_tokens(part: dict[str, Any]) -> int:
    """The tokens of an `image_url` or `file` content part; 0 for any other part."""
    kind = part.get("type")
    if kind == "image_url":
        return image_tokens(image_size(part["image_url"]["url"]))
    if kind == "file":
        return pdf_tokens(part["file"].get("file_data"))
    return 0
