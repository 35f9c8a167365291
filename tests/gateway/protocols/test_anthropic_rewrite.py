"""Replacing the top-level model in a raw Messages body (gateway/protocols/anthropic/rewrite.py)."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocols.anthropic.rewrite import with_model


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"model":"a","max_tokens":1}', {"model": "up-1", "max_tokens": 1}),
        (b'{ "max_tokens": 1 , "model" :  "a" }', {"model": "up-1", "max_tokens": 1}),
        (b'{"model":"a\\"b","x":1}', {"model": "up-1", "x": 1}),
        (
            b'{"model":"a","messages":[{"role":"user","content":"say \\"model\\": \\"x\\""}]}',
            {"model": "up-1", "messages": [{"role": "user", "content": 'say "model": "x"'}]},
        ),
    ],
)
def test_the_top_level_model_is_replaced(raw: bytes, expected: dict) -> None:
    out = with_model(raw, "up-1")
    assert out is not None and orjson.loads(out) == expected


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model":"a","tools":[{"input_schema":{"properties":{"model":{"type":"string"}}}}]}',
        b'{"tools":[{"name":"t","input":{"model":"m"}}],"model":"a"}',
        b'{"max_tokens":1}',
        b'{"model":null}',
    ],
)
def test_ambiguous_or_missing_model_falls_back(raw: bytes) -> None:
    assert with_model(raw, "up-1") is None


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(_text, _json, max_size=5), _text, _text, st.booleans())
def test_same_result_as_parsing_and_dumping(
    extra: dict, original: str, target: str, spaced: bool
) -> None:
    body = {**extra, "model": original}
    raw = json.dumps(body, ensure_ascii=False).encode() if spaced else orjson.dumps(body)
    out = with_model(raw, target)
    if out is None:
        assert raw.count(b'"model"') != 1  # only ever refused when ambiguous
        return
    assert orjson.loads(out) == {**body, "model": target}
