"""Sample values from a JSON Schema, for tool inputs and structured output.

Deterministic and small: every listed property is filled (so `required` is always satisfied and
`additionalProperties: false` is never violated), enums pick their first value, strings get a
plausible value chosen from the property name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_MAX_DEPTH = 8

# Property-name hints -> sample string. Checked as substrings of the lower-cased name.
_STRING_HINTS: tuple[tuple[str, str], ...] = (
    ("email", "ada@example.com"),
    ("url", "https://example.com"),
    ("date", "2025-01-01"),
    ("time", "12:00:00"),
    ("city", "Oslo"),
    ("location", "Oslo"),
    ("country", "Norway"),
    ("unit", "celsius"),
    ("lang", "en"),
    ("name", "Ada"),
    ("query", "weather in Oslo"),
    ("id", "id_1"),
)
_FORMATS = {
    "email": "ada@example.com",
    "uri": "https://example.com",
    "date": "2025-01-01",
    "date-time": "2025-01-01T12:00:00Z",
    "time": "12:00:00",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return {}
        node = node[part]
    return node if isinstance(node, Mapping) else {}


def _string(name: str, schema: Mapping[str, Any]) -> str:
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMATS:
        return _FORMATS[fmt]
    lowered = name.lower()
    for hint, value in _STRING_HINTS:
        if hint in lowered:
            return value
    return "Oslo"


def _number(schema: Mapping[str, Any]) -> int | float:
    value: int | float = 1
    minimum = schema.get("minimum", schema.get("exclusiveMinimum"))
    maximum = schema.get("maximum", schema.get("exclusiveMaximum"))
    if isinstance(minimum, int | float) and value < minimum:
        value = minimum + (1 if "exclusiveMinimum" in schema else 0)
    if isinstance(maximum, int | float) and value > maximum:
        value = maximum - (1 if "exclusiveMaximum" in schema else 0)
    return value


def _pick_type(schema: Mapping[str, Any]) -> str | None:
    stype = schema.get("type")
    if isinstance(stype, list):
        non_null = [t for t in stype if t != "null"]
        return non_null[0] if non_null else "null"
    if isinstance(stype, str):
        return stype
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


def sample(schema: Any, root: Any = None, name: str = "", depth: int = 0) -> Any:
    if not isinstance(schema, Mapping):
        return "Oslo"
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if depth > _MAX_DEPTH:
        return None
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for combinator in ("anyOf", "oneOf"):
        options = schema.get(combinator)
        if isinstance(options, list) and options:
            return sample(options[0], root, name, depth + 1)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and all_of:
        merged: dict[str, Any] = {}
        for part in all_of:
            part = _resolve(part, root) if isinstance(part, Mapping) else {}
            result = sample(part, root, name, depth + 1)
            if isinstance(result, dict):
                merged.update(result)
        return merged
    if "default" in schema:
        return schema["default"]

    stype = _pick_type(schema)
    if stype == "object":
        props = schema.get("properties")
        if not isinstance(props, Mapping):
            return {}
        return {key: sample(sub, root, key, depth + 1) for key, sub in props.items()}
    if stype == "array":
        count = schema.get("minItems", 1)
        count = count if isinstance(count, int) and count > 0 else 1
        return [sample(schema.get("items", {}), root, name, depth + 1) for _ in range(count)]
    if stype in ("number", "integer"):
        return _number(schema)
    if stype == "boolean":
        return True
    if stype == "null":
        return None
    return _string(name, schema)
