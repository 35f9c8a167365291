"""The OpenAI Agents SDK (`openai-agents`, pinned in tests/clients/py-frameworks) runs a tool
loop through /openai/v1/responses on the agent suite's script (agents_support), streamed and
not: function tools write, read and patch a file, beside the hosted `WebSearchTool()` the
gateway drops (it was a 400 before issue 32).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gateway.handlers.test_responses_clients import run_client
from tests.support.agents_support import (
    DONE_TEXT,
    FIRST,
    NOTES,
    PATCHED,
    PROMPT,
    Step,
    assert_loop,
    loop_calls,
    script,
)
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

MATCH = '"name":"patch_file"'
STEPS = [
    Step("write_file", {"path": NOTES, "content": FIRST + "\n"}),
    Step("read_file", {"path": NOTES}),
    Step("patch_file", {"path": NOTES, "old": FIRST, "new": PATCHED}),
]


@pytest.mark.parametrize("stream", [False, True], ids=["run", "run_streamed"])
def test_agents_sdk_tool_loop_writes_reads_and_patches(
    e2e: Stack, tmp_path: Path, stream: bool
) -> None:
    key = e2e.new_key()
    script(e2e, STEPS, MATCH)
    env = {
        "EZAT_WORKDIR": str(tmp_path),
        "EZAT_PROMPT": PROMPT,
        "EZAT_STREAM": "1" if stream else "0",
    }
    out = run_client(e2e, key, "py-frameworks", "agents_files", env)
    assert out["calls"] == ["write_file", "read_file", "patch_file"]
    assert out["final_output"] == DONE_TEXT
    assert_loop(e2e, key, tmp_path, MATCH, len(STEPS))
    calls = loop_calls(e2e, MATCH)
    assert all(c["body"].get("stream", False) is stream for c in calls)
    assert all("web_search" not in str(c["body"]["tools"]) for c in calls)
    if stream:
        assert "raw_response_event" in out["events"] and "run_item_stream_event" in out["events"]


def test_agents_sdk_on_a_gpt_like_model(e2e: Stack, tmp_path: Path) -> None:
    """The Agents SDK on an OpenAI-kind model (issue 30): its default OpenAIResponsesModel goes
    the translated path (Responses → the internal dialect → Chat Completions on the simulator's
    OpenAI front; the deployment sets no Responses relay option). Its function tools are strict
    (the SDK's default), and the simulator checks strict schemas as OpenAI does; the loop writes,
    reads and patches the file, and every call is billed once, at the GPT-like model."""
    from tests.support.openai_lab import make_openai_lab

    lab = make_openai_lab(e2e)
    script(e2e, STEPS, MATCH, path="chat_completions")
    env = {"EZAT_WORKDIR": str(tmp_path), "EZAT_PROMPT": PROMPT, "EZAT_MODEL": lab.model}
    out = run_client(e2e, lab.key, "py-frameworks", "agents_files", env)
    assert out["calls"] == ["write_file", "read_file", "patch_file"]
    assert out["final_output"] == DONE_TEXT
    assert (tmp_path / NOTES).read_text().strip() == PATCHED
    chats = lab.chat_requests()
    loop = [c for c in chats if MATCH in json.dumps(c["body"], separators=(",", ":"))]
    assert len(loop) == len(STEPS) + 1
    assert all(c["status"] == "200" for c in chats), [c["status"] for c in chats]
    assert lab.messages_requests() == []
    tools = {t["function"]["name"]: t["function"] for t in loop[0]["body"]["tools"]}
    assert set(tools) == {"write_file", "read_file", "patch_file"}  # WebSearchTool dropped
    assert all(f.get("strict") is True for f in tools.values())
    # The read's output reached the model in the request after it, as a tool message.
    assert any(m["role"] == "tool" and FIRST in m["content"] for m in loop[2]["body"]["messages"])
    records = e2e.usage(org_id=lab.key.org_id)
    assert len(records) == len(chats), "every call billed, once"
    assert all(r.status == "ok" and r.model_id == lab.model and r.cost_nano > 0 for r in records)
