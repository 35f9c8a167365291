"""`make run` can be run again (issue 17, item 3): three runs in a row, each stopped with Ctrl-C
(SIGINT to the whole process group, as a terminal sends it), each printing a key that works, the
logins every time, no child left behind, one active quickstart key; and a port in use is named
with the process holding it before anything starts.

Every run uses its own SQLite file, ports and var directory (never the checkout's var/).
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import sqlite3
import subprocess
import threading
from pathlib import Path

import httpx
import pytest

from tests.services import free_port, free_port_block
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
START_DEADLINE = 300.0  # migrate + catalog + uvicorn on a loaded 2-core box
STOP_DEADLINE = 60.0


def _env(tmp_path: Path, port: int, sim_port: int) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "ANTHROPIC_API_KEY", "CELERY_BROKER_URL")
    }
    env.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'quickstart.sqlite3'}",
        PORT=str(port),
        SIM_PORT=str(sim_port),
        VAR_DIR=str(tmp_path / "var"),
        PYTHONUNBUFFERED="1",
    )
    return env


class Run:
    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", "scripts/quickstart.sh"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own group: SIGINT to it is Ctrl-C in a terminal
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for_line(self, pattern: str, deadline: float) -> re.Match[str]:
        def found() -> re.Match[str] | None:
            while True:
                try:
                    line = self.lines.get_nowait()
                except queue.Empty:
                    return None
                if line is None:
                    raise AssertionError("quickstart exited:\n" + "".join(self.output))
                self.output.append(line)
                if match := re.search(pattern, line):
                    return match

        return wait_for(found, deadline, what=f"a line matching {pattern!r}")

    def ctrl_c(self) -> int:
        os.killpg(self.proc.pid, signal.SIGINT)
        code = self.proc.wait(timeout=STOP_DEADLINE)

        def group_gone() -> bool:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return True
            return False

        wait_for(group_gone, STOP_DEADLINE, what="every child of the quickstart to exit")
        return code


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _hello(port: int, key: str) -> httpx.Response | None:
    try:
        response = httpx.post(
            f"http://127.0.0.1:{port}/v1/messages",
            headers={"x-api-key": key},
            json={
                "model": "anthropic/claude-sonnet-5-5",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": "Hello!"}],
            },
            timeout=30,
        )
    except httpx.TransportError:
        return None  # not listening yet
    return response


@pytest.mark.timeout(1500)
def test_make_run_three_times_with_ctrl_c(tmp_path: Path) -> None:
    port, sim_port = free_port(), free_port_block(3)
    env = _env(tmp_path, port, sim_port)
    credentials = tmp_path / "var" / "demo-credentials.txt"
    keys = []
    for attempt in range(3):
        run = Run(env)
        try:
            key = run.wait_for_line(r'x-api-key: (\S+)"', START_DEADLINE).group(1)
            text = "".join(run.output)
            assert "dashboard login: demo / " in text, text
            assert "operator console login: admin / " in text, text
            response = wait_for(
                lambda key=key: _hello(port, key), START_DEADLINE, what="the gateway to answer"
            )
            assert response.status_code == 200, (attempt, response.text)
            assert response.json()["content"][0]["text"]
            # The GPT-like model on the simulator's OpenAI front (issue 30, item 10).
            gpt = httpx.post(
                f"http://127.0.0.1:{port}/openai/v1/chat/completions",
                headers={"authorization": f"Bearer {key}"},
                json={"model": "gpt-sim", "messages": [{"role": "user", "content": "Hello!"}]},
                timeout=30,
            )
            assert gpt.status_code == 200, (attempt, gpt.text)
            assert gpt.json()["choices"][0]["message"]["content"]
        finally:
            run.ctrl_c()
        assert credentials.stat().st_mode & 0o777 == 0o600
        assert f"API key: {key}" in credentials.read_text()
        assert (tmp_path / "var" / "log" / "simulator.log").exists()
        wait_for(lambda: _port_free(port) and _port_free(sim_port), STOP_DEADLINE, what="ports")
        keys.append(key)
    assert len(set(keys)) == 3
    with sqlite3.connect(tmp_path / "quickstart.sqlite3") as db:
        [(active,)] = db.execute(
            "SELECT count(*) FROM accounts_apikey WHERE name = 'quickstart' AND revoked_at IS NULL"
        ).fetchall()
    assert active == 1


def test_a_port_in_use_is_named_with_its_holder(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = subprocess.run(
            ["bash", "scripts/quickstart.sh"],
            cwd=ROOT,
            env=_env(tmp_path, port, free_port_block(3)),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 1
    assert f"port {port} is in use by pid {os.getpid()}" in result.stderr, result.stderr
    assert not (tmp_path / "quickstart.sqlite3").exists()  # nothing was started
