"""One command for the whole benchmark matrix: the fake upstream alone vs the gateway.

    python -m bench.run [--quick] [--db sqlite|postgres] [--server uvicorn|granian]
                        [--targets upstream,gateway] [--out bench/results/NAME]
                        [--peers litellm,portkey [--rounds N]] [--update-readme]

Phases (each bounded in requests and seconds):
0. the yardstick, always first (bench/yardstick.py): a fixed CPU loop and the fake upstream's
   CPU per request and per event, on the server core; every gateway CPU figure is also printed
   as a multiple of it;
1. upstream alone: `/v1/messages` of the fake upstream, every (stream, concurrency, prompt) cell;
2. gateway: the same cells through `/v1/messages`, `/openai/v1/chat/completions` and
   `/openai/v1/responses` (store: false);
3. per target: the marginal CPU of one streamed event (64 vs 1,024 tokens per stream), N open
   streams against an upstream paced at D s to the first event, and (gateway) RSS across 1,000
   100k-token requests;
4. with --peers: EZAT and each peer in interleaved rounds (bench/compare.py, bench/peers.py);
   phase `scale` (full runs): 1 against 2 workers at the same p99, and granian with 2;
5. the prompt-cache benchmark (`python -m bench.cache`, its own gateways and simulators), after
   the others, into the same directory.
Writes `report.md` and `results.json` (and `cache.md`, `cache.json`) to --out and prints the
markdown.

CPU placement (default `--pin`, needs 2 CPUs): the server under test (the gateway, or the upstream
when measured alone) gets CPU 0 to itself; the load generator and the upstream share CPU 1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from bench import compare, loadgen, perf_readme, report, run_options, yardstick
from bench.fake_upstream import raise_nofile_limit
from bench.procs import UPSTREAM_KEY, BenchError, Meter, Procs, http, memory_kb, pin
from bench.run_options import QUIET_CPUS, parse_args

APIS = {
    "messages": "/v1/messages",
    "openai": "/openai/v1/chat/completions",
    "responses": "/openai/v1/responses",
}
# How the load generator speaks to each API (auth header, first-token and end markers).
LOADGEN_API = {"messages": "anthropic", "openai": "openai", "responses": "responses"}


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
            plan = cls((1, 16), (1000, 100_000), 0.4, 300, 0.1, 50, 0.1, 1.0, 2.0, 40, 4, 256)
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


class Runner:
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
                    row = await self.cell(target, pid, stream=stream, conc=conc, prompt=prompt)
                    row.update(
                        section="matrix",
                        target=target_name,
                        api=api,
                        stream=stream,
                        conc=conc,
                        prompt=prompt,
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

    # -- phases ------------------------------------------------------------------------------
    async def run_upstream(self) -> None:
        pid = self.procs.upstream_pid
        pin(pid, self.server_cpu)  # measured alone, the upstream is the server under test
        try:
            target = loadgen.Target(
                "127.0.0.1", self.up_port, "/v1/messages", "anthropic", UPSTREAM_KEY
            )
            self.rows.append({"section": "rss", "target": "upstream", **memory_kb(pid)})
            phases = self.args.phases
            if "matrix" in phases:
                await self.matrix("upstream", "direct", target, pid)
            if "events" in phases:
                for paced in (False, True):
                    await self.event_cost("upstream", "direct", target, pid, paced=paced)
            if "open" in phases:
                await self.open_streams("upstream", "direct", target, pid)
                for level in self.open_levels():
                    await self.sustained_streams("upstream", "direct", target, pid, level)
        finally:
            pin(pid, self.side_cpu)

    async def run_gateway(self) -> None:
        args = self.args
        redis = args.redis if args.redis is not None else args.db == "postgres"
        self.log(
            f"gateway: setting up ({args.server}, {args.db}, redis={'on' if redis else 'off'})"
        )
        env = self.procs.gateway_env(args.db, redis)
        key = await asyncio.to_thread(self.procs.setup_gateway, env, self.up_port)
        self.gw_env, self.gw_key = env, key
        port, pid = await asyncio.to_thread(
            self.procs.start_gateway, env, args.server, self.server_cpu
        )
        targets = {
            api: loadgen.Target("127.0.0.1", port, path, LOADGEN_API[api], key)
            for api, path in APIS.items()
        }
        working = await self.smoke(targets)
        if not working:
            return
        # Background work (cache refreshes, catalog polling, timers) costs CPU with no traffic.
        meter = Meter(self.procs, pid)
        await asyncio.sleep(self.plan.seconds / 2)
        used = meter.stop()
        idle = {"idle_cpu_ms_per_s": round(used["server"] * 1000 / used["elapsed"], 1)}
        self.rows.append(
            {"section": "rss", "target": "gateway", "when": "idle", **memory_kb(pid), **idle}
        )
        phases = self.args.phases
        for api in working if "matrix" in phases else []:
            await self.matrix("gateway", api, targets[api], pid)
        for api in working if "events" in phases else []:
            for paced in (False, True):
                await self.event_cost("gateway", api, targets[api], pid, paced=paced)
        # Memory before open streams: 1,000 held streams raise RSS for good (the allocator keeps
        # its arenas), which would hide growth from the 100k-token requests.
        self.rows.append(
            {"section": "rss", "target": "gateway", "when": "after matrix", **memory_kb(pid)}
        )
        if "messages" in working and "memory" in phases:
            await self.memory("messages", targets["messages"], pid, stream=False)
        if "openai" in working and "memory" in phases:
            await self.memory("openai", targets["openai"], pid, stream=True)
        for api in working if "open" in phases else []:
            await self.open_streams("gateway", api, targets[api], pid)
            for level in self.open_levels():
                await self.sustained_streams("gateway", api, targets[api], pid, level)
        self.rows.append({"section": "rss", "target": "gateway", "when": "end", **memory_kb(pid)})
        gateway = next(p for p in self.procs.children if p.pid == pid)
        if gateway.poll() is not None:
            self.notes.append(f"gateway exited early:\n{self.procs.log_tail('gateway')}")
        self.procs.stop(gateway)  # the peers and scale phases start their own

    async def compare_request_log(self) -> None:
        """What the request log costs (issue 16: added latency and CPU per request may not move
        by more than 5 %): two gateways on the same database, Redis and upstream, one with
        EZAT_REQUEST_LOG=false; every matrix cell is measured on both back to back, the order
        alternating from cell to cell so drift in the machine's load hits both alike."""
        args = self.args
        redis = args.redis if args.redis is not None else args.db == "postgres"
        self.log(f"request log on vs off ({args.server}, {args.db}, redis={redis})")
        env = self.procs.gateway_env(args.db, redis)
        key = await asyncio.to_thread(self.procs.setup_gateway, env, self.up_port)
        variants = {"gateway": env, "gateway-nolog": {**env, "EZAT_REQUEST_LOG": "false"}}
        started: dict[str, tuple[int, dict[str, loadgen.Target]]] = {}
        apis = list(APIS)
        for name, variant_env in variants.items():
            port, pid = await asyncio.to_thread(
                partial(self.procs.start_gateway, name=name),
                variant_env,
                args.server,
                self.server_cpu,
            )
            targets = {
                api: loadgen.Target("127.0.0.1", port, path, LOADGEN_API[api], key)
                for api, path in APIS.items()
            }
            working = await self.smoke(targets)
            apis = [api for api in apis if api in working]
            started[name] = (pid, targets)
        flip = False
        for api in apis:
            for stream in (False, True):
                for conc in self.plan.concurrency:
                    for prompt in self.plan.prompts:
                        order = list(started)[::-1] if flip else list(started)
                        flip = not flip
                        for name in order:
                            pid, targets = started[name]
                            row = await self.cell(
                                targets[api], pid, stream=stream, conc=conc, prompt=prompt
                            )
                            row.update(
                                section="matrix",
                                target=name,
                                api=api,
                                stream=stream,
                                conc=conc,
                                prompt=prompt,
                            )
                            self.rows.append(row)
                            self.log(report.one_line(row))

    async def smoke(self, targets: dict[str, loadgen.Target]) -> list[str]:
        """One request per API and mode; an API that answers errors is reported and skipped."""
        working = []
        for api, target in targets.items():
            ok = True
            for stream in (False, True):
                res = await loadgen.run_closed(
                    target, stream=stream, concurrency=1, requests=1, duration=30, timeout=30
                )
                if res.errors:
                    ok = False
                    msg = f"gateway {api} stream={stream} failed: {res.first_error}"
                    self.notes.append(msg)
                    self.log(msg)
            if ok:
                working.append(api)
        if not working:
            self.notes.append(f"gateway log tail:\n{self.procs.log_tail('gateway', 30)}")
        return working


def run_cache_bench(args: argparse.Namespace) -> bool:
    """bench.cache as a child process (it starts its own gateways and simulators), same shape."""
    cmd = [sys.executable, "-m", "bench.cache", "--db", args.db, "--out", args.out]
    if args.quick:
        cmd.append("--quick")
    if args.redis is not None:
        cmd.append("--redis" if args.redis else "--no-redis")
    cmd.append("--pin" if args.pin else "--no-pin")
    done = subprocess.run(cmd, cwd=Path(__file__).resolve().parent.parent, check=False)
    return done.returncode == 0


async def run(args: argparse.Namespace) -> int:
    plan = Plan.make(args.quick, args.memory_requests)
    procs = Procs(keep_tmp=args.keep_tmp)
    runner = Runner(args, plan, procs)
    if args.pin:
        pin(os.getpid(), runner.side_cpu)
    status = 0
    meta = run_options.machine_notes(args)  # the commit and time the run started with
    try:
        # A bounded lifetime even if this process is killed before it can stop the upstream.
        runner.up_port = procs.start_upstream(
            events=plan.long_stream, cpu=runner.side_cpu, max_seconds=args.max_minutes * 60
        )
        await yardstick.measure(runner)
        if "upstream" in args.targets:
            runner.log("upstream alone")
            await runner.run_upstream()
        if args.request_log_compare:
            await runner.compare_request_log()
        elif "gateway" in args.targets:
            try:
                await runner.run_gateway()
            except BenchError as exc:
                runner.notes.append(str(exc))
                runner.log(str(exc))
            if "matrix" in args.phases and not any(
                r["section"] == "matrix" and r["target"] == "gateway" for r in runner.rows
            ):
                status = 2
        if args.peers:
            try:
                await compare.peers(runner)
            except BenchError as exc:
                runner.notes.append(f"peers: {exc}")
                runner.log(str(exc))
                status = 2
        if "scale" in args.phases:
            try:
                await compare.scale(runner)
            except BenchError as exc:
                runner.notes.append(f"scale: {exc}")
                runner.log(str(exc))
                status = 2
    finally:
        procs.close()
    if "cache" in args.phases and "gateway" in args.targets:
        runner.log("prompt-cache benchmark (python -m bench.cache)")
        if not run_cache_bench(args):
            runner.notes.append("the prompt-cache benchmark failed: see its output above")
            status = status or 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    markdown = report.render(meta, plan, runner.rows, runner.notes)
    markdown += compare.render(meta, runner.rows)
    (out / "report.md").write_text(markdown)
    payload = {"meta": meta, "plan": plan.__dict__, "rows": runner.rows, "notes": runner.notes}
    (out / "results.json").write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    print(markdown)
    runner.log(f"wrote {out / 'report.md'} and {out / 'results.json'}")
    if args.update_readme:
        perf_readme.update_readme(out)
        runner.log("rewrote README.md's performance block")
    if any(r.get("errors") for r in runner.rows):
        runner.log("some cells had errors: see the Errors section")
    return status


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.readme_from:
        perf_readme.update_readme(Path(args.readme_from))
        return
    raise_nofile_limit()
    loadgen.install_fast_loop()
    try:
        status = asyncio.run(asyncio.wait_for(run(args), timeout=args.max_minutes * 60))
    except TimeoutError:
        sys.exit(f"bench: gave up after --max-minutes {args.max_minutes}")
    except BenchError as exc:
        sys.exit(f"bench: {exc}")
    sys.exit(status)


if __name__ == "__main__":
    main()
