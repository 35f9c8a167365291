"""The OpenAI Agents SDK (`openai-agents`, pinned in tests/clients/py-frameworks) runs a tool
loop through /openai/v1/responses on the agent suite's script (agents_support), streamed and
not: function tools write, read and patch a file, beside the hosted `WebSearchTool()` the
gateway drops (it was a 400 before issue 32).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.agents_support import (
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
from tests.e2e.conftest import Stack
from tests.e2e.test_responses_clients import run_client

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
