"""Real clients against the running gateway, as a new user runs them: Claude Code headless and
the Vercel AI SDK's Anthropic provider (tests/clients/<name>/, installed by
scripts/install_test_clients.sh from the test command).

Both send the model's own maximum output (128,000 tokens for Claude Opus/Sonnet/Haiku 5.5) and
resolve the short names themselves (`--model haiku` → `claude-haiku-5-5`). A catalog with a
lower ceiling, a missing model or a simulator stricter than the provider shows here as a refused
call, a retry (`x-stainless-retry-count` > 0) or a re-sent, modified request (Claude Code lowers
`max_tokens` after a refusal and drops what the API refused), so every call the simulator got
must be a first attempt, answered 200, with the client's own `max_tokens`, and billed once.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.stack import ROOT, Key, Stack

pytestmark = pytest.mark.e2e

CLIENTS = ROOT / "tests" / "clients"
CLAUDE = CLIENTS / "claude-code" / "node_modules" / ".bin" / "claude"
AI_SDK = CLIENTS / "ai-sdk-anthropic"


def _installed(path: Path) -> Path:
    assert path.exists(), (
        f"{path} is missing: the JavaScript clients are installed by "
        "scripts/install_test_clients.sh (`make test` runs it; it needs Node.js and npm)"
    )
    return path


def _clean_env(home: Path, **extra: str) -> dict[str, str]:
    """Only what the client needs: no developer credentials or proxies leak in."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", **extra}
    return env


def _messages_calls(e2e: Stack) -> list[dict[str, Any]]:
    return [r for r in e2e.sim.requests() if r["path"] == "/v1/messages"]


def _assert_clean_calls(e2e: Stack, key: Key, model: str, max_tokens: int) -> list[Any]:
    calls = _messages_calls(e2e)
    assert calls, "the client made no Messages call"
    for call in calls:
        assert call["status"] == "200", call
        assert call["headers"].get("x-stainless-retry-count", "0") == "0", "a retried call"
        assert call["body"]["model"] == model
        assert call["body"]["max_tokens"] == max_tokens, "the client lowered max_tokens"
    records = e2e.usage(org_id=key.org_id)
    assert len(records) == len(calls), "every call billed, once"
    assert all(r.status == "ok" and r.cost_nano > 0 for r in records)
    return records


def _run_claude(e2e: Stack, key: Key, tmp_path: Path, *args: str) -> dict[str, Any]:
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = _clean_env(
        home,
        ANTHROPIC_BASE_URL=e2e.url,
        ANTHROPIC_API_KEY=key.secret,
        # No internet here, and nothing but the Messages API should leave the client:
        # https://docs.claude.com/en/docs/claude-code/settings (environment variables).
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1",
    )
    done = subprocess.run(
        [str(_installed(CLAUDE)), "-p", "Say hello", "--output-format", "json", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, (
        f"claude exited {done.returncode}:\n{done.stderr[-3000:]}\n{done.stdout[-3000:]}"
    )
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["subtype"] == "success", result
    assert result["api_error_status"] is None
    return result


@pytest.mark.parametrize(
    ("args", "upstream_model", "catalog_id"),
    [
        ((), "claude-opus-5-5", "anthropic/claude-opus-5-5"),  # Claude Code's default model
        (("--model", "haiku"), "claude-haiku-5-5", "anthropic/claude-haiku-5-5"),
    ],
    ids=["default", "haiku"],
)
def test_claude_code_runs_without_a_refused_or_retried_call(
    e2e: Stack, tmp_path: Path, args: tuple[str, ...], upstream_model: str, catalog_id: str
) -> None:
    key = e2e.new_key()
    result = _run_claude(e2e, key, tmp_path, *args)
    assert upstream_model in result["modelUsage"]
    records = _assert_clean_calls(e2e, key, upstream_model, 128_000)
    assert {r.model_id for r in records} == {catalog_id}
    assert {r.model_name for r in records} == {upstream_model}  # the name Claude Code sent
    # Claude Code's mid-conversation system message reached the simulator and was accepted.
    roles = [m["role"] for call in _messages_calls(e2e) for m in call["body"]["messages"]]
    assert "system" in roles


def test_ai_sdk_anthropic_provider_without_max_output_tokens(e2e: Stack, tmp_path: Path) -> None:
    key = e2e.new_key()
    _installed(AI_SDK / "node_modules")
    env = _clean_env(
        tmp_path,
        EZAT_BASE_URL=f"{e2e.url}/v1",
        EZAT_API_KEY=key.secret,
        EZAT_MODEL="claude-sonnet-5-5",
    )
    done = subprocess.run(
        ["node", "run.mjs"],
        cwd=AI_SDK,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"the AI SDK run failed:\n{done.stderr[-3000:]}"
    answer = json.loads(done.stdout)
    assert answer["text"] == "Simulated reply to: Say hello"
    assert answer["finishReason"] == "stop"
    records = _assert_clean_calls(e2e, key, "claude-sonnet-5-5", 128_000)
    assert [r.model_id for r in records] == ["anthropic/claude-sonnet-5-5"]
    assert answer["usage"]["outputTokens"] == records[0].output_tokens


def test_claude_code_runs_on_a_gpt_like_model(e2e: Stack, tmp_path: Path) -> None:
    """Claude Code (headless) on an OpenAI-kind model (issue 30, contract item 10): every turn is
    translated to the simulator's OpenAI front, none goes to a Messages API, each is billed."""
    from tests.support.openai_lab import make_openai_lab

    lab = make_openai_lab(e2e, max_output_tokens=32_000)
    result = _run_claude(e2e, lab.key, tmp_path, "--model", lab.model)
    assert result["result"]
    chats = lab.chat_requests()
    assert chats and _messages_calls(e2e) == []
    assert all(call["status"] == "200" for call in chats), chats
    assert {c["body"]["model"] for c in chats} == {lab.server_model}
    records = e2e.usage(org_id=lab.key.org_id)
    assert len(records) == len(chats)
    assert all(r.status == "ok" and r.model_id == lab.model and r.cost_nano > 0 for r in records)
