"""Claude Code (`@anthropic-ai/claude-code`, pinned in tests/clients/claude-code) runs `claude -p`
through /v1/messages on the agent suite's script (agents_support): it writes a file with its
Write tool, reads it with Read and patches it with Edit. Edits are accepted without a prompt
(`--permission-mode acceptEdits`), as headless runs need; thinking is on (Claude Code's
default), so every scripted turn carries a signed thinking block.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.agents_support import (
    CLIENTS,
    DONE_TEXT,
    FIRST,
    NOTES,
    PATCHED,
    PROMPT,
    Step,
    assert_loop,
    clean_env,
    installed,
    script,
)
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

CLAUDE = CLIENTS / "claude-code" / "node_modules" / ".bin" / "claude"
MATCH = '"name":"Edit"'  # a tool only the main loop's requests declare


def test_claude_code_writes_reads_and_patches(e2e: Stack, tmp_path: Path) -> None:
    key = e2e.new_key()
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    path = str(work / NOTES)
    steps = [
        Step("Write", {"file_path": path, "content": FIRST + "\n"}),
        Step("Read", {"file_path": path}),
        Step("Edit", {"file_path": path, "old_string": FIRST, "new_string": PATCHED}),
    ]
    script(e2e, steps, MATCH, thinking=True)
    env = clean_env(
        home,
        ANTHROPIC_BASE_URL=e2e.url,
        ANTHROPIC_API_KEY=key.secret,
        # Nothing but the Messages API should leave the client (no internet here either).
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1",
    )
    done = subprocess.run(
        [
            str(installed(CLAUDE)),
            "-p",
            PROMPT,
            "--output-format",
            "json",
            "--permission-mode",
            "acceptEdits",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, f"claude exited {done.returncode}:\n{done.stderr[-3000:]}"
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["api_error_status"] is None, result
    assert result["result"] == DONE_TEXT
    assert_loop(e2e, key, work, MATCH, len(steps))
