"""The body the Responses relay sends (gateway/handlers/responses_relay.py): the client's, with
the model renamed, EZAT's `models` list out, a derived prompt_cache_key only where the client
sent none and the deployment takes one, and the hosted tools EZAT cannot bill left out; and
which routes relay (OpenAI kinds with `"responses_api": true`, a JSON boolean)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from catalog.snapshot import DeploymentInfo, Route
from gateway.handlers.responses_relay import _Body, _dropped, relay_route


def route(kind: str = "openai", **options: Any) -> Route:
    deployment = DeploymentInfo(
        id=1,
        name="d",
        kind=kind,
        base_url="http://h/v1",
        api_key="",
        weight=1,
        max_concurrency=1,
        options=options,
    )
    return Route(deployment, "server-model")


FUNCTION = {"type": "function", "name": "f", "parameters": {"type": "object"}}


@pytest.mark.parametrize(
    ("body", "options", "expected"),
    [
        (
            {"model": "m", "input": "hi", "temperature": 0.2},
            {},
            {"model": "server-model", "input": "hi", "temperature": 0.2, "prompt_cache_key": "K"},
        ),
        ({"model": "m", "input": "hi", "prompt_cache_key": "mine"}, {}, None),
        (
            {"model": "m", "input": "hi"},
            {"prompt_cache_key": "client"},
            {"model": "server-model", "input": "hi"},
        ),
        (
            {"model": "m", "input": "hi", "models": ["a", "b"]},
            {"prompt_cache_key": "client"},
            {"model": "server-model", "input": "hi"},
        ),
        (
            {"model": "m", "input": "hi", "tools": [{"type": "web_search"}, FUNCTION]},
            {"prompt_cache_key": "client"},
            {"model": "server-model", "input": "hi", "tools": [FUNCTION]},
        ),
        (
            {"model": "m", "input": "hi", "tools": [{"type": "code_interpreter"}]},
            {"prompt_cache_key": "client"},
            {"model": "server-model", "input": "hi", "tools": []},
        ),
    ],
)
def test_the_relayed_body(
    body: dict[str, Any], options: dict[str, Any], expected: dict[str, Any] | None
) -> None:
    sent = orjson.loads(_Body(body, "K").body_for(route(**options)))
    if expected is None:  # the client's own key is kept
        expected = {**body, "model": "server-model"}
    assert sent == expected
    assert body["model"] == "m"  # the client's body is not changed


def test_the_dropped_tools_are_named_once_in_order() -> None:
    tools = [{"type": "web_search"}, {"type": "file_search"}, {"type": "web_search"}, FUNCTION]
    assert _dropped({"tools": tools}) == ["file_search", "web_search"]
    assert _dropped({"tools": [FUNCTION]}) == []
    assert _dropped({}) == []


@pytest.mark.parametrize(
    ("kind", "options", "relays"),
    [
        ("openai", {"responses_api": True}, True),
        ("azure-openai", {"responses_api": True}, True),
        ("openai", {}, False),
        ("openai", {"responses_api": False}, False),
        ("openai", {"responses_api": "true"}, False),
        ("anthropic", {"responses_api": True}, False),
    ],
)
def test_which_routes_relay(kind: str, options: dict[str, Any], relays: bool) -> None:
    assert relay_route(route(kind, **options)) is relays
