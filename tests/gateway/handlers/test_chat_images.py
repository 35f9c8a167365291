"""Images (data URLs and http URLs downloaded by the gateway) and PDF file parts, seen by the
openai SDK and by the upstream simulator. The image host is a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.chat_support import (
    IMAGES,
    SONNET,
    ImageHost,
    client,
    error_of,
    image_host,
    upstream,
    upstream_records,
    without_cache_control,
)
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"


@pytest.fixture(scope="module")
def host() -> Iterator[ImageHost]:
    with image_host() as server:
        yield server


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def image_part(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, **extra}}


def ask_about(e2e: Stack, *parts: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    key = e2e.new_key()
    completion = client(e2e, key).chat.completions.create(
        model=SONNET,
        max_tokens=50,
        messages=[{"role": "user", "content": [{"type": "text", "text": "What is this?"}, *parts]}],
    )
    return completion, without_cache_control(upstream(e2e))


def refused(e2e: Stack, messages: list[dict[str, Any]]) -> dict[str, Any]:
    key = e2e.new_key()
    with pytest.raises(openai.BadRequestError) as raised:
        client(e2e, key).chat.completions.create(model=SONNET, max_tokens=50, messages=messages)  # type: ignore[arg-type]
    assert upstream_records(e2e) == []
    assert e2e.usage(org_id=key.org_id) == []
    return error_of(raised.value)


@pytest.mark.parametrize("kind", list(IMAGES))
def test_data_url_becomes_base64_image_block(e2e: Stack, kind: str) -> None:
    data, media_type = IMAGES[kind]
    completion, body = ask_about(
        e2e, image_part(f"data:{media_type};base64,{b64(data)}", detail="high")
    )
    assert body["messages"][0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": b64(data)},
    }  # and `detail` is ignored
    assert completion.choices[0].message.content == "Simulated reply to: What is this?"


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("data:image/bmp;base64,Qk0=", "unsupported image type 'image/bmp'"),
        ("data:image/svg+xml;base64,PHN2Zz4=", "unsupported image type 'image/svg+xml'"),
        ("data:image/png,rawbytes", "base64"),
        ("ftp://example.com/a.png", "data: URL"),
    ],
)
def test_bad_image_url_is_400_naming_the_part(e2e: Stack, url: str, needle: str) -> None:
    error = refused(
        e2e,
        [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "see"}, image_part(url)]},
        ],
    )
    param = "messages[2].content[1].image_url.url"
    assert error["param"] == param
    assert error["message"].startswith(f"{param}: ")
    assert needle in error["message"]
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize("kind", list(IMAGES))
def test_http_image_downloaded_and_inlined_by_magic_bytes(
    e2e: Stack, host: ImageHost, kind: str
) -> None:
    data, media_type = IMAGES[kind]
    # The host says application/octet-stream: only the bytes tell the real type.
    completion, body = ask_about(e2e, image_part(host.url(f"/img/{kind}"), detail="low"))
    assert body["messages"][0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": b64(data)},
    }
    assert f"/img/{kind}" in host.hits
    assert "127.0.0.1" not in str(upstream(e2e))  # the URL itself never goes upstream
    assert completion.choices[0].finish_reason == "stop"


def test_several_http_images_in_one_request(e2e: Stack, host: ImageHost) -> None:
    _, body = ask_about(
        e2e,
        image_part(host.url("/img/png")),
        image_part(host.url("/img/gif")),
        image_part(f"data:image/webp;base64,{b64(IMAGES['webp'][0])}"),
    )
    types = [b["source"]["media_type"] for b in body["messages"][0]["content"][1:]]
    assert types == ["image/png", "image/gif", "image/webp"]
    assert all(b["source"]["type"] == "base64" for b in body["messages"][0]["content"][1:])


def test_http_404_is_400_naming_the_part(e2e: Stack, host: ImageHost) -> None:
    error = refused(
        e2e,
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "see"},
                    image_part(host.url("/status/404")),
                ],
            }
        ],
    )
    assert error["message"] == (
        "messages[0].content[1].image_url.url: could not download the image (HTTP 404)"
    )
    assert error["param"] == "messages[0].content[1].image_url.url"


@pytest.mark.parametrize(
    ("path_or_url", "needle"),
    [
        ("/html", "not a JPEG, PNG, GIF or WebP image"),  # Content-Type says image/png
        ("/status/500", "(HTTP 500)"),
        ("http://169.254.169.254/latest/meta-data/", "the address is not public"),
        ("http://10.0.0.1/a.png", "the address is not public"),
    ],
)
def test_unusable_image_url_is_400(
    e2e: Stack, host: ImageHost, path_or_url: str, needle: str
) -> None:
    url = path_or_url if path_or_url.startswith("http") else host.url(path_or_url)
    error = refused(
        e2e,
        [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi"},
            {"role": "user", "content": [image_part(url), {"type": "text", "text": "?"}]},
        ],
    )
    param = "messages[2].content[0].image_url.url"
    assert error["param"] == param
    assert error["message"].startswith(f"{param}: ") and needle in error["message"]


def test_pdf_file_part_becomes_document_block(e2e: Stack) -> None:
    completion, body = ask_about(
        e2e,
        {
            "type": "file",
            "file": {"filename": "doc.pdf", "file_data": f"data:application/pdf;base64,{b64(PDF)}"},
        },
    )
    assert body["messages"][0]["content"][1] == {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": b64(PDF)},
    }
    assert "doc.pdf" not in str(body)
    assert completion.choices[0].message.content == "Simulated reply to: What is this?"


@pytest.mark.parametrize(
    ("file", "param", "needle"),
    [
        ({"file_id": "file-abc123"}, "messages[0].content[1].file.file_id", "no Files API"),
        (
            {"file_data": f"data:text/plain;base64,{b64(b'hello')}"},
            "messages[0].content[1].file.file_data",
            "only PDF files",
        ),
        (
            {"file_data": b64(PDF)},
            "messages[0].content[1].file.file_data",
            "data URL",
        ),
    ],
)
def test_unsupported_file_part_is_400(
    e2e: Stack, file: dict[str, str], param: str, needle: str
) -> None:
    error = refused(
        e2e,
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "read"}, {"type": "file", "file": file}],
            }
        ],
    )
    assert error["param"] == param
    assert error["message"].startswith(f"{param}: ") and needle in error["message"]
