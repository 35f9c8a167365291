"""gateway/nul_escape.py: stored responses keep NUL exactly (issue 31 item 5)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway import nul_escape
from gateway.stored_responses import storable_id

TEXT = st.text(alphabet=st.sampled_from(["a", "\x00", "\ue000", "0", "1", "é"]), max_size=12)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(TEXT, JSON, max_size=4))
def test_decode_returns_exactly_what_was_encoded(value: dict[str, Any]) -> None:
    encoded = nul_escape.encode(value)
    assert not nul_escape._walk_finds_nul(encoded)  # what jsonb refuses never reaches it
    assert nul_escape.decode(encoded) == value


def test_a_value_without_nul_is_stored_unchanged() -> None:
    value = {"items": [{"text": "plain \ue000 marker"}], "output": []}
    assert nul_escape.encode(value) is value
    assert nul_escape.decode(value) is value


def test_only_the_gateways_own_response_ids_are_looked_up() -> None:
    assert storable_id("resp_req_0123abcd") and storable_id("resp_my-id.1:2")
    for value in (
        "resp_\x00",
        "resp_a\x00",
        "\x00",
        "resp_",
        "resp_é",
        "msg_x",
        "resp_" + "a" * 129,
    ):
        assert not storable_id(value), value
