"""The run's yardstick: what this machine, today, charges for a fixed amount of work.

Measured first in every run, on the core the server under test gets:
- `loop`: CPU of a fixed pure-Python loop (LOOP_ITERATIONS iterations of integer arithmetic and
  a dict update) in a fresh interpreter, best of LOOP_REPEATS. It moves with the CPU, its clock,
  the Python build and the neighbours' cache pressure, not with the network stack.
- `upstream_ms_per_req`: the fake upstream's CPU per non-streamed request (C=1, 1k-token prompt):
  an asyncio + httptools server doing the least an HTTP server can, system calls included.
- `upstream_us_per_event`: the fake upstream's CPU per streamed event, back to back and 1 ms apart.

Every gateway figure is then printed absolute and as a multiple of the matching yardstick, so a
claim reads "EZAT spends N× what a bare HTTP server spends per request", which carries across
machines where the absolute milliseconds do not.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from bench import loadgen
from bench.procs import UPSTREAM_KEY, pin
from bench.report import yardstick_line

if TYPE_CHECKING:
    from bench.run import Runner

LOOP_ITERATIONS = 200_000
LOOP_REPEATS = 5
_LOOP = f"""
import time
t0 = time.process_time()
d = {{}}
acc = 0
for i in range({LOOP_ITERATIONS}):
    acc = (acc * 31 + i) & 0xFFFFFFFF
    d[i & 1023] = acc
print(time.process_time() - t0)
"""


def cpu_loop_ms(cpu: int | None) -> dict[str, float]:
    """The fixed loop in a child interpreter pinned to `cpu`: best and median of the repeats (ms).

    Best-of is the yardstick (the least disturbed run); the median shows how noisy the core was.
    """
    samples = [_loop_ms(_loop_once(cpu)) for _ in range(LOOP_REPEATS)]
    return {
        "loop_ms": round(min(samples), 3),
        "loop_ms_median": round(statistics.median(samples), 3),
        "loop_iterations": LOOP_ITERATIONS,
    }


def _loop_once(cpu: int | None) -> subprocess.Popen[str]:
    pre = None if cpu is None else (lambda: __import__("os").sched_setaffinity(0, {cpu}))
    return subprocess.Popen(
        [sys.executable, "-c", _LOOP], stdout=subprocess.PIPE, text=True, preexec_fn=pre
    )


def _loop_ms(proc: subprocess.Popen[str]) -> float:
    out, _ = proc.communicate(timeout=120)
    if proc.returncode:
        raise RuntimeError(f"the yardstick loop exited with {proc.returncode}")
    return float(out.strip()) * 1000


def parallel_capacity(cpus: tuple[int, int] = (0, 1)) -> dict[str, float]:
    """What two cores of this machine do together, as a multiple of one core: the ceiling of any
    two-process speed-up here, whatever the processes are.

    The fixed loop alone on one core, then two copies at once, one per core, alternately, best of
    LOOP_REPEATS each. Two cores that are really two give 2.0; vCPUs that are hyperthreads of one
    physical core, or a host that overcommits its cores, give less, and so will two gateway
    workers. (CPU time of each loop, as the loop measures it: pinned, it equals its wall time.)
    """
    solo, pair = [], []
    for _ in range(LOOP_REPEATS):
        solo.append(_loop_ms(_loop_once(cpus[0])))
        both = [_loop_once(cpu) for cpu in cpus]
        pair.append(max(_loop_ms(p) for p in both))  # the pair is done when both are
    best_solo, best_pair = min(solo), min(pair)
    return {
        "solo_loop_ms": round(best_solo, 3),
        "pair_loop_ms": round(best_pair, 3),
        "parallel_capacity": round(2 * best_solo / best_pair, 2),
    }


def times(value: float | None, base: float | None) -> float | None:
    """value as a multiple of base (None when either is missing or base is zero)."""
    if value is None or not base:
        return None
    return round(value / base, 2)


def event_base(yard: dict[str, Any], paced_ms: float) -> float | None:
    return yard.get("upstream_us_per_event_paced" if paced_ms else "upstream_us_per_event")


async def measure(runner: Runner) -> None:
    """What this machine charges today for fixed work, measured before anything else on the
    core the server under test gets (see the module docstring)."""
    runner.log("yardstick: fixed CPU loop, then the fake upstream alone")
    yard: dict[str, Any] = {"section": "yardstick"}
    yard.update(await asyncio.to_thread(cpu_loop_ms, runner.server_cpu))
    pid = runner.procs.upstream_pid
    pin(pid, runner.server_cpu)
    try:
        target = loadgen.Target(
            "127.0.0.1", runner.up_port, "/v1/messages", "anthropic", UPSTREAM_KEY
        )
        row = await runner.cell(target, pid, stream=False, conc=1, prompt=1000)
        yard["upstream_ms_per_req"] = row["cpu_ms_per_req"]
        row = await runner.cell(target, pid, stream=False, conc=16, prompt=1000)
        yard["upstream_ms_per_req_c16"] = row["cpu_ms_per_req"]
        for paced in (False, True):
            ev = await runner.event_cost(
                "upstream", "direct", target, pid, paced=paced, section="yardstick-events"
            )
            key = "upstream_us_per_event_paced" if paced else "upstream_us_per_event"
            yard[key] = ev["us_per_event"]
    finally:
        pin(pid, runner.side_cpu)
    runner.yard = yard
    runner.rows.append(yard)
    runner.log(f"yardstick: {yardstick_line(yard)}")
