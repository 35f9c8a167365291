"""Images and documents inside a request: validation and worst-case token bounds. Pure.

Both APIs call this while they validate a request (the Messages pass-through on its content
blocks, the chat translator on its data URLs), so an admission hold can cover what media costs:
Anthropic bills images and PDF pages by their pixels and pages, not by their bytes, and a small
body can carry a large prompt (issue 13: 100 image URLs in an 8 KB body were billed 160k tokens).

Token figures (Anthropic's documentation):
- Vision, https://platform.claude.com/docs/en/build-with-claude/vision: an image costs
  ⌈width/28⌉ × ⌈height/28⌉ visual tokens (28 px patches; older pages: about width × height / 750).
  Larger images are first resized to the model's maximal native resolution, which caps the
  tokens of one image (per model: 1,568 tokens / 1,568 px long edge for most, 4,784 tokens /
  2,576 px for Opus 4.7 and the newer high-resolution models). The cap lives in the catalog.
- PDF support, https://platform.claude.com/docs/en/build-with-claude/pdf-support: every page is
  converted into an image (billed as an image) and its text is extracted alongside (typically
  1,500–3,000 tokens per page); at most 600 pages per request (100 for models with a 200k
  context window). The catalog keeps the page bound (image cap + 3,000) and the page limit.

Validation of base64 payloads is done with C-level checks (`binascii.a2b_base64` in strict mode:
alphabet, padding, no data after padding), a chunk at a time so a 32 MB payload never needs a
second 24 MB buffer, and the magic bytes must match the declared media type.
"""

from __future__ import annotations

import binascii
import re
import zlib
from dataclasses import dataclass, field

from catalog.media import CONSERVATIVE_FIGURES as CONSERVATIVE_FIGURES
from catalog.media import MediaFigures as MediaFigures

IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
PDF_MEDIA_TYPE = "application/pdf"
PATCH_PX = 28
# Base64 characters decoded per step: a multiple of 4, so every chunk but the last has no padding.
B64_CHUNK = 4 * 1024 * 1024
# The first decoded bytes are enough for the magic bytes and, nearly always, the dimensions.
HEAD_BYTES = 64 * 1024


class InvalidMedia(ValueError):
    """A media part the gateway refuses; `param` is the JSON path of the offending field."""

    def __init__(self, param: str, reason: str) -> None:
        super().__init__(f"{param}: {reason}")
        self.param = param
        self.message = f"{param}: {reason}"


@dataclass(slots=True)
class MediaTally:
    """What the media of one request can cost at most, gathered while it is validated."""

    images: int = 0
    image_tokens: int = 0  # Σ per-image bounds (dimensions when known, else the model's cap)
    pdf_pages: int = 0  # pages counted in inline PDFs
    unsized_documents: int = 0  # PDFs by URL or file id, or too odd to count: the page limit
    payload_chars: int = 0  # base64 characters in the body: media, not prompt text
    # Each image's size (None: unknown), so a fallback model's bound uses its own cap.
    sizes: list[tuple[int, int] | None] = field(default_factory=list)
    _cap: int = 0  # the image cap `image_tokens` was summed at

    def add_image(self, figures: MediaFigures, size: tuple[int, int] | None) -> None:
        self.images += 1
        self.image_tokens += image_tokens(size, figures.image_max_tokens)
        self.sizes.append(size)
        self._cap = figures.image_max_tokens

    def tokens(self, figures: MediaFigures) -> int:
        pages = self.pdf_pages + self.unsized_documents * figures.pdf_max_pages
        # Pages beyond the per-request limit make the provider refuse the request (not billed).
        pages = min(pages, figures.pdf_max_pages)
        images = self.image_tokens
        if self.sizes and figures.image_max_tokens != self._cap:
            # Another model (a fallback): the same images at its own cap.
            images = sum(image_tokens(s, figures.image_max_tokens) for s in self.sizes)
        return images + pages * figures.pdf_page_max_tokens


def image_tokens(size: tuple[int, int] | None, cap: int) -> int:
    """An upper bound on one image's tokens: the larger of the two documented formulas for its
    size (resizing only lowers them), never above the model's cap; the cap when unknown."""
    if size is None:
        return cap
    width, height = size
    patches = -(-width // PATCH_PX) * -(-height // PATCH_PX)
    by_area = -(-width * height // 750)
    return max(1, min(cap, max(patches, by_area)))


# --- magic bytes and dimensions --------------------------------------------------------------
def sniff_media_type(head: bytes | bytearray) -> str | None:
    """image/jpeg, image/png, image/gif or image/webp from the leading bytes, else None."""
    if head[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def is_pdf(head: bytes) -> bool:
    # Readers accept a header anywhere in the first 1,024 bytes (PDF 32000-1, annex H.3).
    return b"%PDF-" in head[:1024]


def image_size(data: bytes | bytearray) -> tuple[int, int] | None:
    """(width, height) from an image's header, or None when it cannot be read from `data`."""
    kind = sniff_media_type(data)
    try:
        if kind == "image/png" and data[12:16] == b"IHDR":
            return _positive(int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big"))
        if kind == "image/gif" and len(data) >= 10:
            return _positive(
                int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
            )
        if kind == "image/webp":
            return _webp_size(data)
        if kind == "image/jpeg":
            return _jpeg_size(data)
    except IndexError:
        return None
    return None


def _positive(width: int, height: int) -> tuple[int, int] | None:
    return (width, height) if width > 0 and height > 0 else None


def _webp_size(data: bytes | bytearray) -> tuple[int, int] | None:
    chunk = bytes(data[12:16])
    if chunk == b"VP8 " and len(data) >= 30:
        width = int.from_bytes(data[26:28], "little") & 0x3FFF
        height = int.from_bytes(data[28:30], "little") & 0x3FFF
        return _positive(width, height)
    if chunk == b"VP8L" and len(data) >= 25:
        b = data[21:25]
        width = 1 + (b[0] | (b[1] & 0x3F) << 8)
        height = 1 + (b[1] >> 6 | b[2] << 2 | (b[3] & 0x0F) << 10)
        return (width, height)
    if chunk == b"VP8X" and len(data) >= 30:
        return (
            1 + int.from_bytes(data[24:27], "little"),
            1 + int.from_bytes(data[27:30], "little"),
        )
    return None


_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_size(data: bytes | bytearray) -> tuple[int, int] | None:
    """The frame header's size: segments are length-prefixed, so this hops, never scans."""
    pos = 2
    end = len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # standalone markers
            pos += 2
            continue
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if marker in _SOF_MARKERS:
            if pos + 9 > end:
                return None
            height = int.from_bytes(data[pos + 5 : pos + 7], "big")
            width = int.from_bytes(data[pos + 7 : pos + 9], "big")
            return _positive(width, height)
        if length < 2:
            return None
        pos += 2 + length
    return None


# --- base64 -----------------------------------------------------------------------------------
def decode_base64(data: str, param: str, *, whole: bool) -> bytes:
    """Check that `data` is strict base64 (alphabet, padding, nothing after the padding).

    Returns the decoded bytes when `whole`, else only the first HEAD_BYTES of them (the rest is
    checked a chunk at a time and dropped, so checking a 32 MB image costs no 24 MB buffer).
    """
    if not data:
        raise InvalidMedia(param, "the base64 data is empty")
    if len(data) % 4:
        raise InvalidMedia(param, "invalid base64 data (its length is not a multiple of 4)")
    parts: list[bytes] = []
    head = b""
    try:
        for start in range(0, len(data), B64_CHUNK):
            chunk = data[start : start + B64_CHUNK]
            if start + B64_CHUNK < len(data) and chunk[-1] == "=":
                raise InvalidMedia(param, "invalid base64 data (padding before the end)")
            decoded = binascii.a2b_base64(chunk, strict_mode=True)
            if whole:
                parts.append(decoded)
            elif not head:
                head = decoded[:HEAD_BYTES]
    except (binascii.Error, ValueError) as exc:  # ValueError: a non-ASCII character
        if isinstance(exc, InvalidMedia):
            raise
        raise InvalidMedia(param, f"invalid base64 data ({_reason(exc)})") from None
    if not whole:
        return head
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _reason(exc: Exception) -> str:
    text = str(exc)
    if "ASCII" in text or "Only base64 data" in text:
        return "characters outside the base64 alphabet"
    return text.rstrip(".").lower() or "malformed"


def check_image(data: str, media_type: str, param: str) -> tuple[int, int] | None:
    """Validate a base64 image of the declared type; returns its size when readable."""
    if media_type not in IMAGE_MEDIA_TYPES:
        raise InvalidMedia(
            param,
            f"unsupported image type {media_type[:40]!r}; use image/jpeg, image/png, image/gif "
            "or image/webp",
        )
    head = decode_base64(data, param, whole=False)
    found = sniff_media_type(head)
    if found != media_type:
        what = f"a {found} image" if found else "not a JPEG, PNG, GIF or WebP image"
        raise InvalidMedia(
            param, f"the data does not match the declared {media_type} (it is {what})"
        )
    return image_size(head)


def check_pdf(data: str, param: str) -> int | None:
    """Validate a base64 PDF; returns its page count, or None when that is not cheap to tell."""
    raw = decode_base64(data, param, whole=True)
    if not is_pdf(raw):
        raise InvalidMedia(param, "the data does not match the declared application/pdf")
    return count_pdf_pages(raw)


# --- PDF pages ----------------------------------------------------------------------------------
# A page object is a dictionary with /Type /Page (PDF 32000-1, 7.7.3.3: Type is required).
_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z0-9#])")
_COUNT = re.compile(rb"/Count\s+(\d{1,9})")
_OBJSTM = re.compile(rb"/Type\s*/ObjStm\b")
_FILTER = re.compile(rb"/Filter\s*(?:\[\s*((?:/\w+\s*)*)\]|(/\w+))")
_LENGTH = re.compile(rb"/Length\s+(\d{1,10})(?!\s+\d+\s+R)")
# Object streams decompressed to find page objects hidden in them, at most this much per PDF.
OBJSTM_BUDGET = 8 * 1024 * 1024


def count_pdf_pages(raw: bytes) -> int | None:
    """Pages of a PDF, counted cheaply: page objects in the file and in its object streams
    (PDF 1.5 compresses them there), or the page tree's /Count if larger. None when a page
    could hide where this does not look (an object stream with another filter, too large)."""
    pages = len(_PAGE.findall(raw))
    counts = [int(n) for n in _COUNT.findall(raw)]
    budget = OBJSTM_BUDGET
    for match in _OBJSTM.finditer(raw):
        inflated = _object_stream(raw, match.start(), budget)
        if inflated is None:
            return None
        budget -= len(inflated)
        pages += len(_PAGE.findall(inflated))
        counts.extend(int(n) for n in _COUNT.findall(inflated))
    pages = max(pages, *counts) if counts else pages
    return pages or None


def _object_stream(raw: bytes, at: int, budget: int) -> bytes | None:
    start_dict = raw.rfind(b"obj", 0, at)
    keyword = raw.find(b"stream", at)
    if start_dict < 0 or keyword < 0:
        return None
    header = raw[start_dict:keyword]
    declared = _FILTER.search(header)
    filters = (declared.group(1) or declared.group(2) or b"").split() if declared else []
    if filters not in ([], [b"/FlateDecode"]):
        return None
    begin = keyword + 6
    if raw[begin : begin + 2] == b"\r\n":
        begin += 2
    elif raw[begin : begin + 1] in (b"\n", b"\r"):
        begin += 1
    length = _LENGTH.search(header)
    end = begin + int(length.group(1)) if length else raw.find(b"endstream", begin)
    if end < begin:
        return None
    body = raw[begin:end]
    if not filters:
        return body[:budget] if len(body) <= budget else None
    inflater = zlib.decompressobj()
    try:
        inflated = inflater.decompress(body, budget)
    except zlib.error:
        return None
    if inflater.unconsumed_tail:
        return None  # larger than what is worth inflating to count pages
    return inflated
