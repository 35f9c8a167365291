"""The pure media checks behind the holds (gateway/protocols/media.py) and the nesting bound."""

from __future__ import annotations

import zlib

import pytest

from gateway.protocols.anthropic.media import tally_messages
from gateway.protocols.media import (
    B64_CHUNK,
    CONSERVATIVE_FIGURES,
    InvalidMedia,
    MediaFigures,
    MediaTally,
    check_image,
    count_pdf_pages,
    decode_base64,
    image_size,
    image_tokens,
)
from gateway.protocols.nesting import nesting_exceeds
from tests.media_samples import b64, gif, jpeg_header, pdf, png

STANDARD = MediaFigures(image_max_tokens=1568, pdf_page_max_tokens=4568, pdf_max_pages=100)


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (png(1000, 700), (1000, 700)),
        (gif(320, 200), (320, 200)),
        (jpeg_header(4000, 3000), (4000, 3000)),
        (
            b"RIFF\x00\x00\x00\x00WEBPVP8X"
            + b"\x00" * 8
            + (639).to_bytes(3, "little")
            + (479).to_bytes(3, "little"),
            (640, 480),
        ),
        (
            b"RIFF\x00\x00\x00\x00WEBPVP8 "
            + b"\x00" * 10
            + (800).to_bytes(2, "little")
            + (600).to_bytes(2, "little"),
            (800, 600),
        ),
        (b"\x89PNG\r\n\x1a\n", None),  # too short to tell
    ],
)
def test_image_size_from_the_header(data: bytes, size: tuple[int, int] | None) -> None:
    assert image_size(data) == size


def test_image_tokens_bound_both_documented_formulas_under_the_cap() -> None:
    assert image_tokens((1000, 1000), 1568) == 1334  # ⌈10⁶/750⌉ ≥ ⌈1000/28⌉² = 1,296
    assert image_tokens((4000, 3000), 1568) == 1568  # resized by the API: the cap
    assert image_tokens((4000, 3000), 4784) == 4784
    assert image_tokens(None, 4784) == 4784  # a URL: unread, the cap


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ("", "empty"),
        ("abc", "not a multiple of 4"),
        ("ab!d", "outside the base64 alphabet"),
        ("abc=abcd", "invalid base64 data"),
        ("aé==", "outside the base64 alphabet"),
    ],
)
def test_base64_is_checked_strictly(data: str, fragment: str) -> None:
    with pytest.raises(InvalidMedia) as raised:
        decode_base64(data, "x.data", whole=True)
    assert raised.value.message.startswith("x.data: ") and fragment in raised.value.message


def test_padding_between_chunks_is_refused() -> None:
    # A chunk boundary must not hide padding in the middle of the data.
    data = "A" * (B64_CHUNK - 4) + "AA==" + "AAAA"
    with pytest.raises(InvalidMedia, match="padding before the end"):
        decode_base64(data, "p", whole=False)
    assert decode_base64("A" * B64_CHUNK + "AA==", "p", whole=False) == b"\x00" * 65536


def test_declared_type_must_match_the_magic_bytes() -> None:
    assert check_image(b64(png(10, 20)), "image/png", "p") == (10, 20)
    with pytest.raises(InvalidMedia, match=r"declared image/jpeg \(it is a image/png image\)"):
        check_image(b64(png(10, 20)), "image/jpeg", "p")
    with pytest.raises(InvalidMedia, match="unsupported image type 'image/bmp'"):
        check_image(b64(b"BM"), "image/bmp", "p")


def _object_stream_pdf(pages: int) -> bytes:
    """PDF 1.5 style: page objects compressed inside an object stream."""
    inner = b" ".join(b"<< /Type /Page /Parent 2 0 R >>" for _ in range(pages))
    packed = zlib.compress(inner)
    return (
        b"%PDF-1.5\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
        + b"5 0 obj << /Type /ObjStm /N %d /First 0 /Filter /FlateDecode /Length %d >>\nstream\n"
        % (pages, len(packed))
        + packed
        + b"\nendstream\nendobj\n%%EOF\n"
    )


def test_pdf_pages_are_counted_cheaply() -> None:
    assert count_pdf_pages(pdf(7)) == 7
    assert count_pdf_pages(_object_stream_pdf(12)) == 12
    assert count_pdf_pages(b"%PDF-1.4\n%%EOF") is None  # nothing to count: bound by the limit
    odd = _object_stream_pdf(3).replace(b"/FlateDecode", b"/LZWDecode")
    assert count_pdf_pages(odd) is None  # pages could hide there: bound by the limit


def _body(*blocks: dict[str, object]) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": list(blocks)}]}


def test_a_messages_tally_bounds_every_source() -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": b64(png(560, 560))},
    }
    url_image = {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}
    doc = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": b64(pdf(3))},
    }
    url_doc = {"type": "document", "source": {"type": "url", "url": "https://x/y.pdf"}}
    in_result = {"type": "tool_result", "tool_use_id": "t", "content": [image]}
    tally = tally_messages(_body(image, url_image, doc, in_result), STANDARD)
    assert (tally.images, tally.pdf_pages, tally.unsized_documents) == (3, 3, 0)
    assert tally.image_tokens == 419 + 1568 + 419  # ⌈560²/750⌉ twice, a URL at the cap
    assert tally.tokens(STANDARD) == 419 + 1568 + 419 + 3 * 4568
    assert tally.payload_chars == 2 * len(image["source"]["data"]) + len(doc["source"]["data"])
    # A URL document could have any number of pages up to the request's page limit.
    assert tally_messages(_body(url_doc), STANDARD).tokens(STANDARD) == 100 * 4568


def test_pages_beyond_the_request_limit_are_not_held() -> None:
    tally = MediaTally(pdf_pages=450, unsized_documents=2)
    assert tally.tokens(CONSERVATIVE_FIGURES) == 600 * CONSERVATIVE_FIGURES.pdf_page_max_tokens


def test_nesting_bound() -> None:
    def deep(levels: int) -> object:
        value: object = 1
        for _ in range(levels):
            value = [value]
        return value

    assert not nesting_exceeds(deep(64))
    assert nesting_exceeds(deep(65))
    assert not nesting_exceeds({"a": deep(63)})
    assert nesting_exceeds({"a": deep(64)})
    assert not nesting_exceeds({"x": "[[[[" * 100})  # brackets in text are text
