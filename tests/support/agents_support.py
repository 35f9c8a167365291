"""The agent conformance suite's shared script (issue 32, item 3): real coding agents, driven
headless against the gateway and the simulator, write a file, read it back and patch it.

The simulator plays the model: each of the agent's loop requests gets the next scripted reply
(a tool call in the agent's own tool vocabulary, then a closing text). Entries `match` a string
only the agent's main loop sends (one of its tool names), so side requests an agent makes (titles,
quota checks) get the simulator's ordinary reply and leave the script alone. What proves the
loop went round: the file on disk at the end, the read's output in the next request, and every
call answered 200 and billed once.

The agents are pinned in tests/clients/<name>/ (package.json + package-lock.json, or
requirements.txt) and installed by scripts/install_test_clients.sh; README "Tested with" lists
the versions. Bumping one is a one-line change there that this suite then proves.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.thinking import sign
from tests.support.stack import ROOT, Key, Stack

CLIENTS = ROOT / "tests" / "clients"
NOTES = "notes.txt"
FIRST = "hello from ezat"
PATCHED = "hello from ezat, patched"
DONE_TEXT = "All three steps are done."
PROMPT = f"Create {NOTES} saying '{FIRST}', read it back, then patch it to say '{PATCHED}'."


@dataclass(frozen=True)
class Step:
    tool: str
    input: dict[str, Any]


def installed(path: Path) -> Path:
    assert path.exists(), (
        f"{path} is missing: the agents are installed by scripts/install_test_clients.sh "
        "(`make test` runs it; it needs Node.js, npm and network access to the registries)"
    )
    return path


def pinned_npm(name: str, package: str) -> str:
    """The version package.json pins (what README's "Tested with" table names)."""
    manifest = json.loads((CLIENTS / name / "package.json").read_text())
    return str(manifest["dependencies"][package])


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """Only what the agent needs: no developer credentials, proxies or config leak in."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", **extra}


def _reply(content: list[dict[str, Any]], thinking: bool, n: int) -> dict[str, Any]:
    if thinking:
        # With thinking on, Anthropic wants each assistant tool turn to start with a signed
        # thinking block; the simulator checks the signature it would have made.
        text = f"Step {n} of the scripted plan."
        content = [{"type": "thinking", "thinking": text, "signature": sign(text)}, *content]
    return {"content": content}


def script(
    e2e: Stack, steps: list[Step], match: str, *, thinking: bool = False, path: str = "messages"
) -> None:
    """Queue the replies: one tool call per step, then a closing text. `path`: the simulator's
    front that answers them (`chat_completions` for an OpenAI-kind model)."""
    entries = [
        {
            "path": path,
            "match": match,
            "reply": _reply(
                [{"type": "tool_use", "id": f"toolu_step{n}", "name": s.tool, "input": s.input}],
                thinking,
                n,
            ),
        }
        for n, s in enumerate(steps, 1)
    ]
    entries.append(
        {
            "path": path,
            "match": match,
            "reply": _reply([{"type": "text", "text": DONE_TEXT}], thinking, 0),
        }
    )
    e2e.sim.script(*entries)


def loop_calls(e2e: Stack, match: str) -> list[dict[str, Any]]:
    """The Messages calls of the agent's main loop (those the script answered)."""
    return [
        r
        for r in e2e.sim.requests()
        if r["path"] == "/v1/messages" and match in json.dumps(r["body"], separators=(",", ":"))
    ]


def tool_results(call: dict[str, Any]) -> list[str]:
    """The text of each tool_result in the last user turn of an upstream call."""
    out = []
    for block in call["body"]["messages"][-1]["content"]:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            content = block.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            out.append(str(content or ""))
    return out


def assert_loop(e2e: Stack, key: Key, work: Path, match: str, steps: int) -> None:
    """The scripted loop went round and every call was answered and billed once."""
    assert (work / NOTES).read_text().strip() == PATCHED
    calls = loop_calls(e2e, match)
    assert len(calls) == steps + 1, [c["body"]["messages"][-1] for c in calls]
    assert all(c["status"] == "200" for c in calls), [c["status"] for c in calls]
    # The read's output reached the model in the request after it.
    assert any(FIRST in text for text in tool_results(calls[2])), tool_results(calls[2])
    every = [r for r in e2e.sim.requests() if r["path"] == "/v1/messages"]
    records = e2e.usage(org_id=key.org_id)
    assert all(r["status"] == "200" for r in every), [r["status"] for r in every]
    assert len(records) == len(every), "every call billed, once"
    assert all(r.status == "ok" and r.cost_nano > 0 for r in records)
