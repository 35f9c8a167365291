"""Codex CLI (`@openai/codex`, pinned in tests/clients/codex) runs `codex exec` through
/openai/v1/responses with its default configuration: only the provider (base URL, key variable,
`wire_api = "responses"`) and the model are set (issue 32). It writes a file, reads it back and
patches it with its own `apply_patch`, on the simulator's scripted tool calls (agents_support).

Codex sends a `namespace` tool (multi_agent_v1) and hosted `web_search` by default: the first is
flattened, the second dropped with `x-ezat-dropped-tools`; before issue 32 both were a 400. With
the metadata of its GPT models it also sends the freeform `apply_patch` custom tool and
`tool_search` (the last test). The
sandbox is set to workspace-write, as `codex exec --full-auto` does: exec's default is read-only,
where no agent can write a file.
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
    loop_calls,
    pinned_npm,
    script,
)
from tests.support.responses_support import SONNET
from tests.support.stack import Key, Stack

pytestmark = pytest.mark.e2e

CODEX = CLIENTS / "codex" / "node_modules" / ".bin" / "codex"
MATCH = '"name":"exec_command"'  # Codex's shell tool, in every loop request
PATCH = (
    "apply_patch <<'EOF'\n*** Begin Patch\n"
    f"*** Update File: {NOTES}\n@@\n-{FIRST}\n+{PATCHED}\n*** End Patch\nEOF\n"
)
STEPS = [
    Step("exec_command", {"cmd": f"printf '{FIRST}\\n' > {NOTES}"}),
    Step("exec_command", {"cmd": f"cat {NOTES}"}),
    Step("exec_command", {"cmd": PATCH}),  # Codex runs apply_patch itself, not the shell
]


def run_codex(
    e2e: Stack,
    key: Key,
    tmp_path: Path,
    prompt: str,
    *,
    like: str | None = None,
    model: str = SONNET,
) -> subprocess.CompletedProcess[str]:
    """`codex exec` with the provider set and nothing else. `like` names a model of Codex's own
    catalog whose metadata the gateway's model then gets (its tools differ per model)."""
    home = tmp_path / "home"
    codex_home = home / ".codex"
    work = tmp_path / "work"
    codex_home.mkdir(parents=True)
    work.mkdir()
    env = clean_env(home, CODEX_HOME=str(codex_home), EZAT_API_KEY=key.secret)
    catalog = ""
    if like is not None:
        catalog = f'model_catalog_json = "{_catalog_like(codex_home, env, like)}"\n'
    # The provider only (https://developers.openai.com/codex/config-reference, model_providers):
    # no feature, tool or web_search setting.
    (codex_home / "config.toml").write_text(
        f'model = "{model}"\n'
        'model_provider = "ezat"\n'
        f"{catalog}\n"
        "[model_providers.ezat]\n"
        'name = "EZAT"\n'
        f'base_url = "{e2e.url}/openai/v1"\n'
        'env_key = "EZAT_API_KEY"\n'
        'wire_api = "responses"\n'
    )
    return subprocess.run(
        [str(installed(CODEX)), "exec", "--skip-git-repo-check", "-s", "workspace-write", prompt],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _catalog_like(codex_home: Path, env: dict[str, str], slug: str) -> Path:
    """Codex's bundled catalog entry for `slug`, renamed to the gateway's model."""
    shown = subprocess.run(
        [str(installed(CODEX)), "debug", "models"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    [entry] = [m for m in json.loads(shown.stdout)["models"] if m["slug"] == slug]
    path = codex_home / "models.json"
    path.write_text(json.dumps({"models": [{**entry, "slug": SONNET, "upgrade": None}]}))
    return path


def test_codex_exec_default_config_writes_reads_and_patches(e2e: Stack, tmp_path: Path) -> None:
    key = e2e.new_key()
    script(e2e, STEPS, MATCH)
    done = run_codex(e2e, key, tmp_path, PROMPT)
    assert done.returncode == 0, f"codex exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert DONE_TEXT in done.stdout
    assert_loop(e2e, key, tmp_path / "work", MATCH, len(STEPS))
    first = loop_calls(e2e, MATCH)[0]["body"]
    names = [t["name"] for t in first["tools"]]
    # Its namespace tool arrived flattened; its web_search was dropped (no such tool upstream).
    assert any(n.startswith("multi_agent_v1__") for n in names), names
    assert not any("web_search" in n for n in names)
    assert first["stream"] is True


def test_codex_exec_create_hello_txt(e2e: Stack, tmp_path: Path) -> None:
    """Issue 32's "done when", with the simulator writing the file as a model would."""
    key = e2e.new_key()
    script(e2e, [Step("exec_command", {"cmd": "printf 'hi\\n' > hello.txt"})], MATCH)
    done = run_codex(e2e, key, tmp_path, "create hello.txt saying hi")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "work" / "hello.txt").read_text() == "hi\n"
    assert (
        f"codex-cli {pinned_npm('codex', '@openai/codex')}"
        in subprocess.run(
            [str(CODEX), "--version"], capture_output=True, text=True, check=True
        ).stdout
    )


APPLY = '"name":"apply_patch"'  # the freeform tool, in every loop request of a GPT model


def test_codex_with_gpt_metadata_patches_through_the_custom_apply_patch_tool(
    e2e: Stack, tmp_path: Path
) -> None:
    """What Codex sends for its GPT models (here GPT-5.5's catalog entry on the gateway's model):
    the freeform `apply_patch` custom tool (a grammar, no JSON) and `tool_search`. The calls come
    back as custom_tool_call items and their outputs go round the loop."""
    key = e2e.new_key()
    add = f"*** Begin Patch\n*** Add File: {NOTES}\n+{FIRST}\n*** End Patch\n"
    update = f"*** Begin Patch\n*** Update File: {NOTES}\n@@\n-{FIRST}\n+{PATCHED}\n*** End Patch\n"
    steps = [
        Step("apply_patch", {"input": add}),
        Step("exec_command", {"cmd": f"cat {NOTES}"}),
        Step("apply_patch", {"input": update}),
    ]
    script(e2e, steps, APPLY)
    done = run_codex(e2e, key, tmp_path, PROMPT, like="gpt-5.5")
    assert done.returncode == 0, f"codex exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert DONE_TEXT in done.stdout
    assert_loop(e2e, key, tmp_path / "work", APPLY, len(steps))
    calls = loop_calls(e2e, APPLY)
    [patch_tool] = [t for t in calls[0]["body"]["tools"] if t["name"] == "apply_patch"]
    assert patch_tool["input_schema"]["required"] == ["input"]
    assert "lark grammar" in patch_tool["description"]
    # Codex sent the patch back as a custom_tool_call: upstream, the same one-string input.
    replayed = [
        b
        for m in calls[1]["body"]["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]
    assert replayed[0]["input"] == {"input": add}


def test_codex_exec_on_a_gpt_like_model(e2e: Stack, tmp_path: Path) -> None:
    """Codex on an OpenAI-kind model (issue 30): Responses → the internal dialect → Chat
    Completions on the simulator's OpenAI front; the loop writes, reads and patches the file and
    every call is billed once, at the GPT-like model."""
    from tests.support.openai_lab import make_openai_lab

    lab = make_openai_lab(e2e)
    script(e2e, STEPS, MATCH, path="chat_completions")
    done = run_codex(e2e, lab.key, tmp_path, PROMPT, model=lab.model)
    assert done.returncode == 0, f"codex exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert DONE_TEXT in done.stdout
    assert (tmp_path / "work" / NOTES).read_text().strip() == PATCHED
    chats = lab.chat_requests()
    loop = [c for c in chats if MATCH in json.dumps(c["body"], separators=(",", ":"))]
    assert len(loop) == len(STEPS) + 1
    assert all(c["status"] == "200" for c in chats), [c["status"] for c in chats]
    assert lab.messages_requests() == []
    records = e2e.usage(org_id=lab.key.org_id)
    assert len(records) == len(chats), "every call billed, once"
    assert all(r.status == "ok" and r.model_id == lab.model and r.cost_nano > 0 for r in records)


def test_codex_exec_on_a_gpt_like_model_relayed_to_responses(e2e: Stack, tmp_path: Path) -> None:
    """The same loop on a deployment that has /responses (`"responses_api": true`, issue 30
    item 5): Codex's Responses requests are relayed to the simulator's /v1/responses as sent
    (model renamed, its hosted web_search left out), never translated to Chat Completions, and
    every call is billed once at the GPT-like model."""
    from tests.support.openai_lab import make_openai_lab

    lab = make_openai_lab(e2e, options={"responses_api": True})
    script(e2e, STEPS, MATCH, path="responses")
    done = run_codex(e2e, lab.key, tmp_path, PROMPT, model=lab.model)
    assert done.returncode == 0, f"codex exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert DONE_TEXT in done.stdout
    assert (tmp_path / "work" / NOTES).read_text().strip() == PATCHED
    calls = lab.responses_requests()
    loop = [c for c in calls if MATCH in json.dumps(c["body"], separators=(",", ":"))]
    assert len(loop) == len(STEPS) + 1
    assert all(c["status"] == "200" for c in calls), [c["status"] for c in calls]
    assert lab.chat_requests() == [] and lab.messages_requests() == []
    first = loop[0]["body"]
    assert first["model"] == lab.server_model and first["stream"] is True
    assert not any("web_search" in str(t.get("type")) for t in first["tools"])
    assert any(t.get("type") == "namespace" for t in first["tools"])  # as Codex sent it
    records = e2e.usage(org_id=lab.key.org_id)
    assert len(records) == len(calls), "every call billed, once"
    assert {r.model_id for r in records} == {lab.model}
