"""The simulator refuses, per model, what the real API refuses (simulator/models.py), and
accepts what real clients send (Claude Code's mid-conversation system messages)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from simulator.testing import SimulatorThread

API_KEY = "sk-sim-rules"
pytestmark = pytest.mark.usefixtures("reset_sim")
USER = {"role": "user", "content": "Hello"}
SYSTEM = {"role": "system", "content": [{"type": "text", "text": "Answer in French."}]}
TOOL = {"name": "f", "input_schema": {"type": "object", "properties": {}}}


def post(sim: SimulatorThread, **body: Any) -> httpx.Response:
    body = {"max_tokens": 64, "messages": [USER], **body}
    return httpx.post(f"{sim.url}/v1/messages", json=body, headers={"x-api-key": API_KEY})


def error(response: httpx.Response) -> str:
    assert response.status_code == 400, response.text
    return str(response.json()["error"]["message"])


@pytest.mark.parametrize(
    ("model", "limit"),
    [("claude-sonnet-5-5", 128_000), ("claude-opus-5-5", 128_000), ("claude-haiku-4-5", 64_000)],
)
def test_max_tokens_up_to_the_model_maximum(sim: SimulatorThread, model: str, limit: int) -> None:
    assert post(sim, model=model, max_tokens=limit).status_code == 200
    assert error(post(sim, model=model, max_tokens=limit + 1)) == (
        f"max_tokens: {limit + 1} > {limit}, which is the maximum allowed number of output "
        f"tokens for {model}"
    )


def test_unknown_models_get_only_the_common_checks(sim: SimulatorThread) -> None:
    assert post(sim, model="routed-ab", max_tokens=500_000).status_code == 200


@pytest.mark.parametrize("model", ["claude-opus-5-5", "claude-sonnet-5-5"])
@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "f"}])
def test_forced_tool_use_is_refused_where_documented(
    sim: SimulatorThread, model: str, choice: dict[str, Any]
) -> None:
    assert "forced tool use" in error(post(sim, model=model, tools=[TOOL], tool_choice=choice))
    assert post(sim, model=model, tools=[TOOL], tool_choice={"type": "auto"}).status_code == 200
    assert post(sim, model="claude-sonnet-5", tools=[TOOL], tool_choice=choice).status_code == 200


def test_thinking_off_per_model(sim: SimulatorThread) -> None:
    off = {"type": "disabled"}
    assert "cannot be disabled" in error(post(sim, model="claude-opus-5-5", thinking=off))
    assert "use 'between_tools'" in error(post(sim, model="claude-sonnet-5-5", thinking=off))
    between = {"type": "between_tools"}
    assert post(sim, model="claude-sonnet-5-5", thinking=between).status_code == 200
    high = {"effort": "xhigh"}
    assert "between_tools" in error(
        post(sim, model="claude-sonnet-5-5", thinking=between, output_config=high)
    )
    assert post(sim, model="claude-sonnet-5", thinking=off).status_code == 200
    assert post(sim, model="claude-opus-5", thinking=between).status_code == 400


@pytest.mark.parametrize(("field", "value"), [("temperature", 0.2), ("top_p", 0.9), ("top_k", 5)])
def test_sampling_parameters_refused_where_documented(
    sim: SimulatorThread, field: str, value: float
) -> None:
    assert field in error(post(sim, model="claude-sonnet-5-5", **{field: value}))
    assert post(sim, model="claude-sonnet-4-6", **{field: value}).status_code == 200


def test_mid_conversation_system_messages(sim: SimulatorThread) -> None:
    ok = post(sim, model="claude-opus-5-5", messages=[USER, SYSTEM])
    assert ok.status_code == 200, ok.text
    assert post(sim, model="routed-ab", messages=[USER, SYSTEM]).status_code == 200
    assert "role 'system' is not supported on this model" in error(
        post(sim, model="claude-sonnet-4-6", messages=[USER, SYSTEM])
    )
    assert "must come right after a user message" in error(
        post(sim, model="claude-opus-5-5", messages=[SYSTEM, USER])
    )
    image = {"role": "system", "content": [{"type": "image", "source": {}}]}
    assert "text blocks only" in error(post(sim, model="claude-opus-5-5", messages=[USER, image]))
