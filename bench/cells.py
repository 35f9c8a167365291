"""The measured cells of `python -m bench.run`: the plan (how big each cell is), one closed-loop
cell, the matrix of them, the per-event cost, held-open streams (burst and sustained) and the
memory check. bench/run.py strings them into phases against the upstream and the gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

import orjson

from bench import loadgen, report
from bench.procs import BenchError, Meter, Procs, http, memory_kb
from bench.run_options import QUIET_CPUS


@dataclass(frozen=True)
class Plan:
    concurrency: tuple[int, ...]
    prompts: tuple[int, ...]
    seconds: float  # measured window per cell
    requests: int  # and at most this many requests per cell
    warm_seconds: float
    open_streams: int
    open_delay: float
    sustained_seconds: float  # how long each stream of the sustained shape lasts (paced)
    sustained_duration: float  # seconds of arrivals (ramp + time at the level)
    memory_requests: int
    memory_batches: int
    long_stream: int  # tokens of the long stream for the per-event cost

    @classmethod
    def make(cls, quick: bool, memory_requests: int | None = None) -> Plan:
        if quick:
            # Every cell of the full run's shape, each as short as still proves it runs end to
            # end (the CI smoke: issue 22 holds it under 2 minutes; it asserts no timings).
            plan = cls((1, 16), (1000, 100_000), 0.2, 100, 0.05, 30, 0.1, 0.5, 1.0, 24, 3, 256)
        else:
            plan = cls(
                (1, 16, 64),
                (1000, 10_000, 100_000),
                4.0,
                50_000,
                0.5,
                1000,
                0.3,
                6.0,
                12.0,
                1000,
                10,
                1024,
            )
        if memory_requests:
            batches = max(1, memory_requests // 100)
            plan = replace(plan, memory_requests=memory_requests, memory_batches=batches)
        return plan


class PeakRss:
    """Samples the process tree's RSS every 20 ms while the block runs; keeps the highest."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rss_kb = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        while not self._stop.is_set():
            self.rss_kb = max(self.rss_kb, memory_kb(self.pid)["rss_kb"])
            await asyncio.sleep(0.02)

    async def __aenter__(self) -> PeakRss:
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task


def cpu_fields(used: dict[str, float], requests: int) -> dict[str, float]:
    """Per-request CPU (ms) of each party, and how busy everyone else kept the machine (CPUs)."""
    n = max(1, requests)
    return {
        "cpu_ms_per_req": round(used["server"] * 1000 / n, 3),
        "upstream_cpu_ms_per_req": round(used["upstream"] * 1000 / n, 3),
        "services_cpu_ms_per_req": round(used["services"] * 1000 / n, 3),
        "harness_cpu_ms_per_req": round(used["harness"] * 1000 / n, 3),
        "other_cpus": round(used["other"] / max(used["elapsed"], 1e-9), 2),
    }


class Cells:
    """The measured cells of a run (bench/run.py's Runner strings them into phases)."""

    def __init__(self, args: argparse.Namespace, plan: Plan, procs: Procs) -> None:
        self.args = args
        self.plan = plan
        self.procs = procs
        self.rows: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.server_cpu = 0 if args.pin else None
        self.side_cpu = 1 if args.pin else None
        self.up_port = 0
        self.yard: dict[str, Any] = {}
        self.gw_env: dict[str, str] | None = None  # the run's gateway database + Redis, set up once
        self.gw_key = ""

    def log(self, msg: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def configure_upstream(self, **changes: float) -> None:
        status, body = http("POST", f"http://127.0.0.1:{self.up_port}/_bench/config", changes)
        if status != 200:
            raise BenchError(f"upstream config failed: {status} {body[:300]!r}")

    def upstream_stats(self) -> dict[str, Any]:
        return orjson.loads(http("GET", f"http://127.0.0.1:{self.up_port}/stats")[1])

    async def wait_quiet(self) -> float:
        """With --quiet-wait S: wait up to S seconds for other processes to go below QUIET_CPUS.

        The machine may be shared (other people's test suites); their load inflates latency and
        lowers throughput here, though CPU per request is mostly unaffected.
        """
        waited = 0.0
        while waited < self.args.quiet_wait:
            meter = Meter(self.procs, os.getpid())  # the harness's tree: everything of ours
            await asyncio.sleep(0.5)
            used = meter.stop()
            if used["other"] / used["elapsed"] < QUIET_CPUS:
                break
            waited += used["elapsed"]
        return waited

    # -- one measured cell ---------------------------------------------------------------------
    async def cell(
        self,
        target: loadgen.Target,
        pid: int,
        *,
        stream: bool,
        conc: int,
        prompt: int,
        max_tokens: int = 64,
        requests: int | None = None,
        seconds: float | None = None,
    ) -> dict[str, Any]:
        plan = self.plan
        waited = await self.wait_quiet()
        data = loadgen.build_request(
            target, stream=stream, prompt_tokens=prompt, max_tokens=max_tokens
        )
        # Warm-up: connections, caches and the allocator settle before the window opens; the
        # measured run reuses the warm-up's connections (no connects inside the window).
        pool: list[Any] = []
        await loadgen.run_closed(
            target,
            stream=stream,
            concurrency=conc,
            requests=conc * 5,
            duration=plan.warm_seconds,
            request=data,
            pool=pool,
        )
        meter = Meter(self.procs, pid)
        try:
            res = await loadgen.run_closed(
                target,
                stream=stream,
                concurrency=conc,
                requests=requests or plan.requests,
                duration=seconds or plan.seconds,
                request=data,
                timeout=self.args.timeout,
                pool=pool,
            )
            used = meter.stop()
        finally:
            loadgen.close_pool(pool)
        row = res.summary()
        row.update(cpu_fields(used, res.requests), quiet_wait_s=round(waited, 1))
        row["tokens"] = max_tokens if stream else None
        return row

    async def matrix(self, target_name: str, api: str, target: loadgen.Target, pid: int) -> None:
        for stream in (False, True):
            for conc in self.plan.concurrency:
                for prompt in self.plan.prompts:
                    await self.matrix_cell(target_name, api, target, pid, stream, conc, prompt)

    async def matrix_cell(
        self,
        target_name: str,
        api: str,
        target: loadgen.Target,
        pid: int,
        stream: bool,
        conc: int,
        prompt: int,
    ) -> None:
        """One cell of the matrix, measured, labelled, kept and logged."""
        row = await self.cell(target, pid, stream=stream, conc=conc, prompt=prompt)
        row.update(
            section="matrix", target=target_name, api=api, stream=stream, conc=conc, prompt=prompt
        )
        self.rows.append(row)
        self.log(report.one_line(row))

    async def event_cost(
        self,
        target_name: str,
        api: str,
        target: loadgen.Target,
        pid: int,
        *,
        paced: bool,
        conc: int = 16,
        section: str = "events",
    ) -> dict[str, Any]:
        """CPU of one streamed event = Δ CPU per stream between a short and a long stream.

        Unpaced, the upstream writes a stream's events back to back and the gateway reads many
        per system call (the best case). Paced 1 ms apart, every event arrives on its own, as
        a real provider's tokens do: one read, one parse and one write per event.
        """
        long = self.plan.long_stream if not paced else self.plan.long_stream // 2
        pace = 0.001 if paced else 0.0
        self.configure_upstream(event_delay=pace)
        try:
            short_row = await self.cell(
                target, pid, stream=True, conc=conc, prompt=1000, max_tokens=64
            )
            long_row = await self.cell(
                target, pid, stream=True, conc=conc, prompt=1000, max_tokens=long
            )
        finally:
            self.configure_upstream(event_delay=0.0)
        delta = long_row["cpu_ms_per_req"] - short_row["cpu_ms_per_req"]
        row = {
            "section": section,
            "target": target_name,
            "api": api,
            "conc": conc,
            "paced_ms": pace * 1000,
            "cpu_ms_short": short_row["cpu_ms_per_req"],
            "cpu_ms_long": long_row["cpu_ms_per_req"],
            "short": 64,
            "long": long,
            "us_per_event": round(delta * 1000 / (long - 64), 3),
            "errors": short_row["errors"] + long_row["errors"],
            "first_error": short_row["first_error"] or long_row["first_error"],
            "services_ms_short": short_row["services_cpu_ms_per_req"],
            "services_ms_long": long_row["services_cpu_ms_per_req"],
            # How finely the two cells resolve CPU (it is read in 1/CLK_TCK s ticks).
            "requests_short": short_row["requests"],
            "requests_long": long_row["requests"],
        }
        if section == "events":
            self.rows.append(row)
        self.log(
            f"events {target_name}/{api} {'paced' if paced else 'unpaced'}: "
            f"{row['us_per_event']} µs per streamed event"
        )
        return row

    async def open_streams(
        self, target_name: str, api: str, target: loadgen.Target, pid: int
    ) -> None:
        plan = self.plan
        self.configure_upstream(first_event_delay=plan.open_delay, reset_max_open=True)
        idle = memory_kb(pid)["rss_kb"]
        meter = Meter(self.procs, pid)
        try:
            async with PeakRss(pid) as peak:
                res = await loadgen.run_open_streams(
                    target, streams=plan.open_streams, timeout=plan.open_delay + self.args.timeout
                )
        finally:
            used = meter.stop()
            self.configure_upstream(first_event_delay=0.0)
        row = res.summary()
        fields = cpu_fields(used, res.requests)
        row.update(
            cpu_ms_per_stream=fields["cpu_ms_per_req"],
            other_cpus=fields["other_cpus"],
            upstream_max_open=self.upstream_stats()["max_open_streams"],
        )
        row.update(
            section="open",
            shape="burst",
            target=target_name,
            api=api,
            streams=plan.open_streams,
            delay_ms=plan.open_delay * 1000,
            idle_rss_kb=idle,
            peak_rss_kb=peak.rss_kb,
            kb_per_stream=round((peak.rss_kb - idle) / max(1, plan.open_streams), 1),
        )
        self.rows.append(row)
        self.log(report.one_line(row))

    def open_levels(self) -> list[int]:
        return self.args.open_levels or [self.plan.open_streams]

    async def sustained_streams(
        self, target_name: str, api: str, target: loadgen.Target, pid: int, level: int
    ) -> None:
        """1,000 streams held open (each paced to last `sustained_seconds`, 300 ms to its first
        event), new ones arriving at a steady rate: TTFT of the streams that start at that level.
        The burst above starts all 1,000 in the same millisecond; this is the steady state."""
        plan = self.plan
        tokens = 64
        # The upstream sends the first token after `open_delay`, then paces each of the other
        # tokens - 1 deltas, content_block_stop, message_delta and message_stop.
        pace = (plan.sustained_seconds - plan.open_delay) / (tokens + 2)
        self.configure_upstream(
            first_event_delay=plan.open_delay, event_delay=pace, reset_max_open=True
        )
        idle = memory_kb(pid)["rss_kb"]
        meter = Meter(self.procs, pid)
        try:
            async with PeakRss(pid) as peak:
                res = await loadgen.run_sustained_streams(
                    target,
                    level=level,
                    stream_seconds=plan.sustained_seconds,
                    duration=plan.sustained_duration,
                    max_tokens=tokens,
                    timeout=plan.sustained_seconds + self.args.timeout,
                )
        finally:
            used = meter.stop()
            self.configure_upstream(first_event_delay=0.0, event_delay=0.0)
        row = res.steady.summary()
        fields = cpu_fields(used, res.all.requests)
        row.update(
            section="open",
            shape="sustained",
            target=target_name,
            api=api,
            streams=level,
            delay_ms=plan.open_delay * 1000,
            arrivals_per_s=res.arrivals_per_s,
            client_max_open=res.max_open,
            all_streams=res.all.requests,
            all_errors=res.all.errors,
            cpu_ms_per_stream=fields["cpu_ms_per_req"],
            other_cpus=fields["other_cpus"],
            upstream_max_open=self.upstream_stats()["max_open_streams"],
            idle_rss_kb=idle,
            peak_rss_kb=peak.rss_kb,
            kb_per_stream=round((peak.rss_kb - idle) / max(1, res.max_open), 1),
        )
        if res.all.errors and not row["first_error"]:
            row["first_error"] = res.all.first_error
            row["errors"] = res.all.errors
        self.rows.append(row)
        self.log(report.one_line(row))

    async def memory(self, api: str, target: loadgen.Target, pid: int, stream: bool) -> None:
        """RSS after each batch of 100k-token requests: a leak shows as steady growth."""
        plan = self.plan
        per_batch = plan.memory_requests // plan.memory_batches
        data = loadgen.build_request(target, stream=stream, prompt_tokens=100_000)
        samples = [memory_kb(pid)["rss_kb"]]
        errors, first_error = 0, ""
        for _ in range(plan.memory_batches):
            res = await loadgen.run_closed(
                target,
                stream=stream,
                concurrency=16,
                requests=per_batch,
                duration=120.0,
                request=data,
                timeout=self.args.timeout,
            )
            errors += res.errors
            first_error = first_error or res.first_error
            samples.append(memory_kb(pid)["rss_kb"])
        row = {
            "section": "memory",
            "target": "gateway",
            "api": api,
            "stream": stream,
            "requests": per_batch * plan.memory_batches,
            "rss_kb": samples,
            # After the first batch (warm-up: pools, caches, allocator arenas) RSS should be flat.
            "growth_kb": samples[-1] - samples[1],
            "errors": errors,
            "first_error": first_error,
        }
        self.rows.append(row)
        self.log(
            f"memory {api}: RSS {samples[0] // 1024}→{samples[-1] // 1024} MB, errors {errors}"
        )
