"""README's "Tested with" table names the agent versions the conformance suite installs
(tests/clients/<name>/ pins them; tests/gateway/handlers/test_agents_*.py runs them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "tests" / "clients"


def _table() -> dict[str, str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Tested with", 1)[1]
    rows = re.findall(r"^\| [^|]*\(`([^`]+)`\)[^|]* \| ([0-9][^ |]*) \|", section, re.M)
    return dict(rows)


def _npm(name: str, package: str) -> str:
    return json.loads((CLIENTS / name / "package.json").read_text())["dependencies"][package]


def _pip(name: str, package: str) -> str:
    for line in (CLIENTS / name / "requirements.txt").read_text().splitlines():
        if line.startswith(package + "=="):
            return line.split("==", 1)[1].strip()
    raise AssertionError(f"{package} is not pinned in tests/clients/{name}/requirements.txt")


def test_the_table_matches_the_pins() -> None:
    assert _table() == {
        "@openai/codex": _npm("codex", "@openai/codex"),
        "@anthropic-ai/claude-code": _npm("claude-code", "@anthropic-ai/claude-code"),
        "openai-agents": _pip("py-frameworks", "openai-agents"),
    }


def test_the_locks_agree_with_the_manifests() -> None:
    for name, package in (("codex", "@openai/codex"), ("claude-code", "@anthropic-ai/claude-code")):
        lock = json.loads((CLIENTS / name / "package-lock.json").read_text())
        assert lock["packages"][f"node_modules/{package}"]["version"] == _npm(name, package)
