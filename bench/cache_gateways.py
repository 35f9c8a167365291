"""The prompt-cache benchmark's gateways: a fresh one per run, the next one started while the
current run replays.

A gateway takes ~1.5 s to start (Django), and the quick run starts 12 of them: a third of its
wall time when each waited for the previous run to end. The next run's gateway is started on
the harness's core during the current run's replay and moved to the server core when its run
begins; it is still a fresh process with nothing routed yet.
"""

from __future__ import annotations

import asyncio
import contextlib

from bench.cache_runs import RunSpec
from bench.procs import BenchError, Procs, pin_threads


class Gateways:
    def __init__(self, procs: Procs, server_cpu: int | None) -> None:
        self.procs = procs
        self.server_cpu = server_cpu
        # (the run it is for, its environment, its start) of the gateway started ahead.
        self._ahead: tuple[RunSpec, dict[str, str], asyncio.Task[tuple[int, int]]] | None = None

    async def start(self, spec: RunSpec, env: dict[str, str]) -> tuple[int, int]:
        """(port, pid) of a fresh gateway for this run: the one started ahead for it if its
        environment matches, else a new one. One started ahead for this run with another
        environment (its cooldown was estimated before a retry) is stopped; one started for the
        next run stays (this is a churn run's retry)."""
        if self._ahead is not None and self._ahead[0] == spec:
            _, ahead_env, task = self._ahead
            if ahead_env == env:
                self._ahead = None
                port, pid = await task
                pin_threads(pid, self.server_cpu)
                return port, pid
            await self.discard()
        return await asyncio.to_thread(self.procs.start_gateway, env, "uvicorn", self.server_cpu)

    def prestart(self, spec: RunSpec, env: dict[str, str]) -> None:
        """Start the gateway of the run `spec` now, on the other core (a churn run's retry
        finds the next one on its way and starts nothing)."""
        if self._ahead is not None:
            return
        side = None if self.server_cpu is None else 1 - self.server_cpu
        task = asyncio.ensure_future(
            asyncio.to_thread(self.procs.start_gateway, env, "uvicorn", side)
        )
        self._ahead = (spec, env, task)

    async def discard(self) -> None:
        """Stop a gateway started ahead that no run took."""
        if self._ahead is None:
            return
        task = self._ahead[2]
        self._ahead = None
        with contextlib.suppress(BenchError):
            _, pid = await task
            self.procs.stop(next(p for p in self.procs.children if p.pid == pid))
