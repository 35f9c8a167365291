"""`make run`'s port check advises a command that is valid shell and names free ports no other
variable of the run uses (issue 33, item 6: it printed `SIM_PORT+0=8402 make run`, not shell,
and a PORT the simulator already held)."""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_ports.py"


@pytest.fixture
def held() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _advice(*specs: str) -> dict[str, int]:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *specs], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    words = shlex.split(last.split(": ", 1)[1])
    assert words[-2:] == ["make", "run"], last
    assignments = dict(word.split("=", 1) for word in words[:-2])
    assert all(name.isidentifier() for name in assignments), last  # NAME=value, valid shell
    return {name: int(value) for name, value in assignments.items()}


def test_a_busy_port_gets_a_free_one_that_the_simulators_do_not_use(held: int) -> None:
    advice = _advice(f"PORT={held}", f"SIM_PORT={held + 1}:3")
    # (SIM_PORT is advised too only when another process on this busy box holds one of them.)
    assert "PORT" in advice, advice
    assert advice["PORT"] not in range(held, held + 4) and _free(advice["PORT"])
    if "SIM_PORT" in advice:
        assert advice["PORT"] not in range(advice["SIM_PORT"], advice["SIM_PORT"] + 3)


def test_a_busy_simulator_port_moves_all_the_simulators(held: int) -> None:
    advice = _advice(f"PORT={held - 1}", f"SIM_PORT={held - 2}:3")  # the 2nd simulator's
    assert "SIM_PORT" in advice, advice
    start = advice["SIM_PORT"]
    ports = range(start, start + 3)
    assert held not in ports and held - 1 not in ports and all(_free(p) for p in ports)
    assert advice.get("PORT", held - 1) not in ports
