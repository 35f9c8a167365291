"""Pure-function checks of the simulator's building blocks (no server)."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.cache import PromptCache
from simulator.faults import Fault, FaultError, FaultScript
from simulator.schema import sample
from simulator.sse import chunk_json, chunk_text
from simulator.thinking import sign, verify
from simulator.tokens import estimate_input_tokens
from tests.media_samples import b64, pdf, png


@pytest.mark.parametrize("text", ["", "a", "ab", "one two", "a b c d e f g h", "x  y   z "])
def test_chunk_text_round_trips(text: str) -> None:
    pieces = chunk_text(text)
    assert "".join(pieces) == text
    assert all(pieces)
    if len(text) >= 2:
        assert len(pieces) >= 2


@pytest.mark.parametrize("raw", ["{}", '{"a":1}', '{"city":"Oslo","days":1,"metric":true}'])
def test_chunk_json_pieces(raw: str) -> None:
    pieces = chunk_json(raw)
    assert pieces[0] == ""
    assert "".join(pieces) == raw
    assert len(pieces) - 1 >= min(3, len(raw))


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string"}, "Oslo"),
        ({"type": ["string", "null"]}, "Oslo"),
        ({"type": "integer", "minimum": 5}, 5),
        ({"type": "number", "maximum": 0}, 0),
        ({"type": "boolean"}, True),
        ({"type": "string", "format": "date-time"}, "2025-01-01T12:00:00Z"),
        ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, 1),
        ({"const": "fixed"}, "fixed"),
        ({"type": "array", "items": {"type": "string"}, "minItems": 2}, ["Oslo", "Oslo"]),
        (
            {"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {}}}]},
            {"a": 1, "b": "Oslo"},
        ),
        (
            {"type": "object", "properties": {"email": {"type": "string"}}},
            {"email": "ada@example.com"},
        ),
    ],
)
def test_schema_samples(schema: dict[str, Any], expected: Any) -> None:
    assert sample(schema) == expected


def test_schema_recursive_ref_terminates() -> None:
    schema = {
        "$defs": {"node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}}},
        "$ref": "#/$defs/node",
    }
    value = sample(schema)
    depth = 0
    while isinstance(value, dict):
        value = value["child"]
        depth += 1
    assert 5 <= depth <= 12


def test_signatures() -> None:
    signature = sign("some thought")
    assert verify("some thought", signature)
    assert not verify("some thought!", signature)
    assert not verify("some thought", "bm90IGEgc2lnbmF0dXJl")


def test_cache_split_between_1h_and_5m_breakpoints() -> None:
    body = {
        "model": "m",
        "tools": [
            {
                "name": "t",
                "description": "d" * 400,
                "input_schema": {"type": "object"},
                "cache_control": {"type": "ephemeral", "ttl": "1h"},
            }
        ],
        "system": [{"type": "text", "text": "s" * 800, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "q" * 40}],
    }
    cache = PromptCache()
    first = cache.account("m", body)
    assert first.cache_creation_1h == 101  # ceil((1 + 400) / 4)
    assert first.cache_creation_5m == 301 - 101  # ceil(1201 / 4) - 101
    assert first.input_tokens == estimate_input_tokens(body) - 301
    # Changing the system keeps the 1h tools entry readable.
    body["system"][0]["text"] = "z" * 800
    second = cache.account("m", body)
    assert second.cache_read == 101
    assert second.cache_creation_5m == 200
    assert second.cache_creation_1h == 0


def test_fault_script_matching() -> None:
    script = FaultScript()
    script.extend([{"match": "needle", "status": 500}, {"status": 429, "times": 2}])
    assert script.take("messages", b"hay")
    taken = script.take("messages", b"hay needle")
    assert taken is not None and taken.status == 500
    assert script.take("count_tokens", b"needle") is None
    assert script.pending() == [{"status": 429, "times": 1}]


def test_fault_parse_errors() -> None:
    with pytest.raises(FaultError, match="unknown fault field"):
        Fault.parse({"dealy": 1})
    with pytest.raises(FaultError):
        Fault.parse({"status": 600})
    assert Fault.parse({"drop_after_events": 2}).shapes_stream
    assert not Fault.parse({"status": 500}).shapes_stream


@pytest.mark.parametrize(
    ("model", "size", "tokens"),
    [
        # ⌈w/28⌉ × ⌈h/28⌉ (vision page); 1000×1000 fits every model unresized.
        ("claude-haiku-4-5", (1000, 1000), 36 * 36),
        ("claude-sonnet-5-5", (1000, 1000), 36 * 36),
        # Beyond the native resolution: resized (aspect kept) under 1,568 / 4,784 tokens.
        ("claude-haiku-4-5", (4000, 3000), None),
        ("claude-opus-4-7", (4000, 3000), None),
        ("claude-haiku-4-5", (100, 50), 4 * 2),
    ],
)
def test_images_are_priced_by_their_pixels(
    model: str, size: tuple[int, int], tokens: int | None
) -> None:
    def body(data: bytes) -> dict[str, Any]:
        source = {"type": "base64", "media_type": "image/png", "data": b64(data)}
        return {
            "model": model,
            "messages": [{"role": "user", "content": [{"type": "image", "source": source}]}],
        }

    counted = estimate_input_tokens(body(png(*size)))
    if tokens is not None:
        assert counted == tokens
    else:
        cap = 4784 if "opus-4-7" in model else 1568
        assert cap * 0.95 <= counted <= cap


def test_pdfs_are_priced_by_their_pages() -> None:
    def body(data: bytes) -> dict[str, Any]:
        source = {"type": "base64", "media_type": "application/pdf", "data": b64(data)}
        return {
            "model": "claude-haiku-4-5",
            "messages": [{"role": "user", "content": [{"type": "document", "source": source}]}],
        }

    one = estimate_input_tokens(body(pdf(1, "x" * 400)))
    three = estimate_input_tokens(body(pdf(3, "x" * 400)))
    assert three == 3 * one  # per page: its image plus its text (100 tokens here)
    assert 1400 < one - 100 <= 1568  # a page image within the standard resolution
