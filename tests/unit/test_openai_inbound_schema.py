"""response_format json_schema: every object schema must be closed (additionalProperties: false)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.protocols.openai.inbound import InvalidRequest, translate_request

from .openai_helpers import CAPS, chat

SCHEMA_ERRORS = [
    ("root-open", {"type": "object", "properties": {}}, ""),
    ("root-additional-true", {"type": "object", "additionalProperties": True}, ""),
    (
        "nested-property",
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {"address": {"type": "object", "properties": {}}},
        },
        ".properties.address",
    ),
    (
        "array-items",
        {"type": "array", "items": {"type": "object"}},
        ".items",
    ),
    (
        "any-of",
        {"anyOf": [{"type": "string"}, {"type": "object", "properties": {}}]},
        ".anyOf[1]",
    ),
    (
        "defs",
        {
            "type": "object",
            "additionalProperties": False,
            "$defs": {"Foo": {"properties": {"a": {"type": "string"}}}},
        },
        ".$defs.Foo",
    ),
    (
        "definitions",
        {"definitions": {"Bar": {"type": ["object", "null"]}}},
        ".definitions.Bar",
    ),
    (
        "additional-properties-schema",
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "m": {"type": "object", "additionalProperties": {"type": "object"}},
            },
        },
        ".properties.m",
    ),
    (
        "all-of-deep",
        {"allOf": [{"oneOf": [{"items": [{"type": "object"}]}]}]},
        ".allOf[0].oneOf[0].items[0]",
    ),
    (
        "first-in-document-order",
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {"a": {"type": "object"}, "b": {"type": "object"}},
        },
        ".properties.a",
    ),
]


@pytest.mark.parametrize(
    ("schema", "suffix"), [pytest.param(s, p, id=i) for i, s, p in SCHEMA_ERRORS]
)
def test_json_schema_objects_must_be_closed(schema: dict[str, Any], suffix: str) -> None:
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    with pytest.raises(InvalidRequest) as info:
        translate_request(chat(response_format=rf), CAPS)
    path = "response_format.json_schema.schema" + suffix
    assert info.value.param == path
    assert info.value.message == f'{path}: objects need "additionalProperties": false'


def closed(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False}


def test_closed_schema_through_every_keyword_is_forwarded_as_is() -> None:
    schema = {
        **closed(
            address=closed(street={"type": "string"}),
            tags={"type": "array", "items": closed(k={"type": "string"})},
            either={"anyOf": [{"type": "null"}, closed(), {"$ref": "#/$defs/Item"}]},
            pair={"type": "array", "prefixItems": [closed(), True]},
            anything=True,
            loose_array={"type": "array"},  # not an object: nothing to close
        ),
        "$defs": {"Item": {"allOf": [closed(id={"type": "integer"})]}},
        "definitions": {"Old": {"oneOf": [closed(), {"type": "string"}]}},
    }
    rf = {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": schema}}
    body = translate_request(chat(response_format=rf), CAPS).body
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
