from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
API_KEY = "sk-sim-cli"
STOP_DEADLINE = 120.0


def start(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    """Start a simulator process on a free port; returns it and its base URL."""
    proc = subprocess.Popen(
        [sys.executable, *args, "--port", "auto", "--api-key", API_KEY],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    if not ready:
        proc.kill()
        pytest.fail("simulator printed nothing within 120 s")
    line = proc.stdout.readline()
    if "listening on " not in line:
        proc.kill()
        pytest.fail(f"unexpected first line {line!r}; stderr: {proc.communicate()[1]}")
    return proc, line.rsplit(" ", 1)[-1].strip()


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        # Generous: interpreter shutdown on a loaded 2-core box took over 10 s (issue 17).
        proc.wait(timeout=STOP_DEADLINE)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


@pytest.fixture
def module_server() -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc, url = start(["-m", "simulator"])
    try:
        yield proc, url
    finally:
        if proc.poll() is None:
            stop(proc)


def test_python_m_simulator(module_server: tuple[subprocess.Popen[str], str]) -> None:
    proc, url = module_server
    client = anthropic.Anthropic(base_url=url, api_key=API_KEY, max_retries=0)
    message = client.messages.create(
        model="claude-sim-1", max_tokens=50, messages=[{"role": "user", "content": "cli"}]
    )
    assert message.content[0].type == "text"
    assert message.content[0].text == "Simulated reply to: cli"
    assert httpx.post(f"{url}/v1/messages", json={}).status_code == 401
    assert httpx.get(f"{url}/_sim/health").json() == {"ok": True}
    stop(proc)
    assert proc.returncode == 0
    assert proc.stderr is not None
    assert "Traceback" not in proc.stderr.read()


@pytest.mark.skipif(not (REPO / "manage.py").exists(), reason="no manage.py yet")
def test_manage_py_simulator_command() -> None:
    proc, url = start(["manage.py", "simulator"])
    try:
        resp = httpx.post(
            f"{url}/v1/messages/count_tokens",
            json={"model": "m", "messages": [{"role": "user", "content": "12345678"}]},
            headers={"x-api-key": API_KEY},
        )
        assert resp.json() == {"input_tokens": 2}
    finally:
        stop(proc)
