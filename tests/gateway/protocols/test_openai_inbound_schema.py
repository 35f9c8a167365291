"""response_format json_schema: object schemas that say nothing about additionalProperties are
closed by the gateway (as openai-python's parse() helper does); only schemas that explicitly allow
extra properties are refused, naming the path."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocols.openai.common import close_objects
from gateway.protocols.openai.inbound import InvalidRequest, translate_request

from .openai_helpers import CAPS, chat

SCHEMA_ERRORS = [
    ("root-additional-true", {"type": "object", "additionalProperties": True}, "", "True"),
    (
        "nested-additional-true",
        {
            "type": "object",
            "properties": {"address": {"type": "object", "additionalProperties": True}},
        },
        ".properties.address",
        "True",
    ),
    (
        "array-items",
        {"type": "array", "items": {"type": "object", "additionalProperties": {}}},
        ".items",
        "{}",
    ),
    (
        "any-of",
        {"anyOf": [{"type": "string"}, {"properties": {}, "additionalProperties": True}]},
        ".anyOf[1]",
        "True",
    ),
    (
        "defs",
        {"$defs": {"Foo": {"properties": {"a": {}}, "additionalProperties": True}}},
        ".$defs.Foo",
        "True",
    ),
    (
        "definitions",
        {"definitions": {"Bar": {"type": ["object", "null"], "additionalProperties": True}}},
        ".definitions.Bar",
        "True",
    ),
    (
        "additional-properties-schema",
        {
            "type": "object",
            "properties": {
                "m": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        ".properties.m",
        "{'type': 'string'}",
    ),
    (
        "all-of-deep",
        {"allOf": [{"oneOf": [{"items": [{"type": "object", "additionalProperties": True}]}]}]},
        ".allOf[0].oneOf[0].items[0]",
        "True",
    ),
    (
        "first-in-document-order",
        {
            "type": "object",
            "properties": {
                "a": {"type": "object", "additionalProperties": True},
                "b": {"type": "object", "additionalProperties": True},
            },
        },
        ".properties.a",
        "True",
    ),
]


@pytest.mark.parametrize(
    ("schema", "suffix", "shown"), [pytest.param(s, p, v, id=i) for i, s, p, v in SCHEMA_ERRORS]
)
def test_schemas_that_allow_extra_properties_are_refused(
    schema: dict[str, Any], suffix: str, shown: str
) -> None:
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    with pytest.raises(InvalidRequest) as info:
        translate_request(chat(response_format=rf), CAPS)
    path = "response_format.json_schema.schema" + suffix
    assert info.value.param == path
    assert info.value.message == (
        f"{path}: objects may not allow additional properties (additionalProperties is "
        f"{shown}); leave it out or set it to false"
    )


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


def test_open_objects_are_closed_everywhere_and_the_callers_schema_is_untouched() -> None:
    # instructor's JSON_SCHEMA mode sends pydantic's schema as is: no additionalProperties.
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/Address"},
            "tags": {"type": "array", "items": {"type": "object", "properties": {}}},
            "either": {"anyOf": [{"type": "null"}, {"properties": {"a": {}}}]},
        },
        "required": ["name"],
        "$defs": {"Address": {"type": ["object", "null"], "properties": {}}},
    }
    original = copy.deepcopy(schema)
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    sent = translate_request(chat(response_format=rf), CAPS).body["output_config"]["format"]
    assert schema == original
    closed_schema = sent["schema"]
    assert closed_schema["additionalProperties"] is False
    assert closed_schema["properties"]["tags"]["items"]["additionalProperties"] is False
    assert closed_schema["properties"]["either"]["anyOf"][1]["additionalProperties"] is False
    assert closed_schema["$defs"]["Address"]["additionalProperties"] is False
    # Everything else is what the caller sent.
    assert closed_schema["properties"]["name"] == {"type": "string"}
    assert closed_schema["required"] == ["name"]


# -- property: closing never loosens, and closing twice changes nothing ---------------------------

_leaf = st.sampled_from([{"type": "string"}, {"type": "integer"}, True, {}])


def _objects(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    props = st.dictionaries(st.sampled_from(["a", "b", "c"]), children, max_size=3)
    extra = st.sampled_from([None, False])
    return st.builds(
        lambda p, e: (
            {"type": "object", "properties": p} | ({} if e is None else {"additionalProperties": e})
        ),
        props,
        extra,
    ) | st.builds(lambda items: {"type": "array", "items": items}, children)


schemas = st.recursive(_leaf, _objects, max_leaves=12)


def _objects_in(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if node.get("type") == "object":
            found.append(node)
        for key in ("properties",):
            for sub in (node.get(key) or {}).values():
                found.extend(_objects_in(sub))
        if isinstance(node.get("items"), dict):
            found.extend(_objects_in(node["items"]))
    return found


@given(schemas)
def test_closing_closes_every_object_and_is_idempotent(schema: Any) -> None:
    if not isinstance(schema, dict):
        return
    result = close_objects(schema, "s")
    assert all(o["additionalProperties"] is False for o in _objects_in(result))
    assert close_objects(result, "s") is result  # already closed: returned as is
