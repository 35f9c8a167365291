"""Real client libraries against the gateway, each run as its users run it: the openai Node SDK,
the Vercel AI SDK's default `openai(model)` provider (the Responses API), the OpenAI Agents SDK
and instructor's JSON_SCHEMA mode (on chat completions). The clients live in tests/clients/<name>/
(installed by the test command: scripts/install_test_clients.sh); each scenario prints JSON."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.chat_support import upstream, upstream_records
from tests.support.responses_support import SONNET
from tests.support.stack import Key, Stack

pytestmark = pytest.mark.e2e

CLIENTS = Path(__file__).resolve().parents[2] / "clients"


def run_client(
    e2e: Stack, key: Key, name: str, scenario: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    directory = CLIENTS / name
    if (directory / "package.json").exists():
        assert (directory / "node_modules").is_dir(), (
            f"{directory} is not installed: run scripts/install_test_clients.sh"
        )
        command = ["node", "run.mjs", scenario]
    else:
        python = directory / ".venv" / "bin" / "python"
        assert python.exists(), f"{directory} is not installed: run scripts/install_test_clients.sh"
        command = [str(python), "run.py", scenario]
    result = subprocess.run(
        command,
        cwd=directory,
        env={
            **os.environ,
            "EZAT_BASE_URL": e2e.url + "/openai/v1",
            "EZAT_API_KEY": key.secret,
            "EZAT_MODEL": SONNET,
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def responses_bodies(e2e: Stack) -> list[dict[str, Any]]:
    return [r["body"] for r in upstream_records(e2e)]


# -- openai Node SDK ------------------------------------------------------------------------------


def test_node_sdk_plain_and_stream(e2e: Stack) -> None:
    key = e2e.new_key()
    plain = run_client(e2e, key, "openai-node", "plain")
    assert plain["status"] == "completed" and plain["text"] == "Simulated reply to: Say hello"
    assert plain["id"].startswith("resp_")
    stream = run_client(e2e, key, "openai-node", "stream")
    assert stream["deltas"] > 3 and stream["text"].startswith("Simulated long reply")
    assert stream["sequence"] == list(range(len(stream["sequence"])))
    assert stream["usage"]["output_tokens"] > 0


def test_node_sdk_tool_loop_with_reasoning_and_structured_output(e2e: Stack) -> None:
    key = e2e.new_key()
    tools = run_client(e2e, key, "openai-node", "tools")
    assert tools["first"] == ["reasoning", "function_call"]
    assert tools["arguments"] == {"city": "Oslo"}
    assert tools["text"] == "Tool said: 9°C"
    assert upstream(e2e)["messages"][1]["content"][0]["type"] == "thinking"
    structured = run_client(e2e, key, "openai-node", "structured")
    assert structured["parsed"] == {"city": "Oslo", "population": 1}


def test_node_sdk_errors(e2e: Stack) -> None:
    out = run_client(e2e, e2e.new_key(), "openai-node", "errors")
    assert out["wrongKey"]["status"] == 401 and out["wrongKey"]["type"] == "AuthenticationError"
    assert out["unknownModel"]["status"] == 404 and out["unknownModel"]["code"] == "model_not_found"


# -- Vercel AI SDK --------------------------------------------------------------------------------


def test_ai_sdk_generate_and_stream_text(e2e: Stack) -> None:
    key = e2e.new_key()
    plain = run_client(e2e, key, "ai-sdk", "plain")
    assert plain["text"] == "Simulated reply to: Say hello"
    assert plain["finishReason"] == "stop"
    assert plain["usage"]["outputTokens"] > 0
    stream = run_client(e2e, key, "ai-sdk", "stream")
    assert stream["deltas"] > 3 and stream["text"].startswith("Simulated long reply")


@pytest.mark.parametrize("store", ["true", "false"])
def test_ai_sdk_tools_with_stop_when_and_reasoning(e2e: Stack, store: str) -> None:
    """store true: the SDK sends earlier reasoning as item_reference; false: encrypted_content."""
    key = e2e.new_key()
    out = run_client(e2e, key, "ai-sdk", "tools", {"EZAT_STORE": store})
    steps = out["steps"]
    assert steps[0]["finishReason"] == "tool-calls"
    assert steps[0]["toolCalls"] == [{"name": "get_weather", "input": {"city": "Oslo"}}]
    assert steps[0]["reasoning"] >= 1
    assert out["text"] == "Tool said: 9°C in Oslo"
    last = responses_bodies(e2e)[-1]
    # The second step continued with the exact signed thinking, so thinking stayed on.
    assert last["messages"][1]["content"][0]["type"] == "thinking"
    assert last["thinking"]["type"] == "adaptive"


def test_ai_sdk_generate_object_and_errors(e2e: Stack) -> None:
    key = e2e.new_key()
    out = run_client(e2e, key, "ai-sdk", "object")
    assert out["object"] == {"city": "Oslo", "population": 1}
    assert upstream(e2e)["output_config"]["format"]["type"] == "json_schema"
    errors = run_client(e2e, key, "ai-sdk", "errors")
    assert errors["wrongKey"]["status"] == 401
    assert errors["unknownModel"]["status"] == 404


# -- OpenAI Agents SDK and instructor -------------------------------------------------------------


@pytest.mark.parametrize("store", [None, "false"])
def test_agents_sdk_runner_with_a_function_tool(e2e: Stack, store: str | None) -> None:
    key = e2e.new_key()
    env = {} if store is None else {"EZAT_STORE": store}
    out = run_client(e2e, key, "py-frameworks", "agents_tool", env)
    assert out["tool_calls"] == ["Oslo"]
    assert out["final_output"] == "Tool said: 9°C in Oslo"
    assert "tool_call_item" in out["items"] and "tool_call_output_item" in out["items"]
    last = responses_bodies(e2e)[-1]
    assert last["messages"][1]["content"][0]["type"] == "thinking"
    assert last["thinking"]["type"] == "adaptive"
    assert len(e2e.usage(org_id=key.org_id)) == len(out["responses"]) == 2


def test_agents_sdk_plain_answer(e2e: Stack) -> None:
    key = e2e.new_key()
    out = run_client(e2e, key, "py-frameworks", "agents_plain")
    assert out["final_output"] == "Simulated reply to: Say hello"
    sent = upstream(e2e)
    assert sent["system"][0]["text"] == "Be brief."
    assert len(e2e.usage(org_id=key.org_id)) == len(out["responses"]) == 1


def test_agents_sdk_run_streamed(e2e: Stack) -> None:
    key = e2e.new_key()
    out = run_client(e2e, key, "py-frameworks", "agents_stream")
    assert len(out["deltas"]) > 1  # streamed in pieces, not one block
    assert "".join(out["deltas"]) == out["final_output"]
    assert out["final_output"].startswith("Simulated long reply to: Tell me a long answer")
    assert upstream(e2e)["stream"] is True
    (record,) = e2e.usage(org_id=key.org_id)
    assert record.stream and record.output_tokens > 0


def test_agents_sdk_structured_output_type(e2e: Stack) -> None:
    key = e2e.new_key()
    out = run_client(e2e, key, "py-frameworks", "agents_structured")
    assert out == {"final_output": {"city": "Oslo", "population": 1}, "type": "City"}
    fmt = upstream(e2e)["output_config"]["format"]
    assert fmt["type"] == "json_schema"
    assert fmt["schema"]["additionalProperties"] is False
    assert set(fmt["schema"]["required"]) == {"city", "population"}


def test_agents_sdk_wrong_key_and_unknown_model(e2e: Stack) -> None:
    key = e2e.new_key()
    out = run_client(e2e, key, "py-frameworks", "agents_errors")
    assert out == {
        "wrongKey": {"status": 401, "type": "AuthenticationError"},
        "unknownModel": {"status": 404, "type": "NotFoundError"},
    }
    assert upstream_records(e2e) == []  # neither reached the upstream
    assert e2e.usage(org_id=key.org_id) == []


def test_instructor_json_schema_mode_on_chat_completions(e2e: Stack) -> None:
    key = e2e.new_key()
    out = run_client(e2e, key, "py-frameworks", "instructor_json_schema")
    assert out["person"] == {"name": "Ada", "age": 1, "address": {"street": "Oslo", "city": "Oslo"}}
    schema = upstream(e2e)["output_config"]["format"]["schema"]
    # instructor sent pydantic's schema without additionalProperties: the gateway closed it.
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["Address"]["additionalProperties"] is False
