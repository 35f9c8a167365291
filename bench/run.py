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
   `/openai/v1/responses` (store: false) on the Claude model, and (issue 30) the chat API and
   `/v1/messages` on a GPT model of an `openai`-kind deployment of the same upstream
   (`openai-relay`: the passthrough; `messages-gpt`: the Messages → Chat translation);
3. per target: the marginal CPU of one streamed event (64 vs 1,024 tokens per stream), N open
   streams against an upstream paced at D s to the first event, and (gateway) RSS across 1,000
   100k-token requests;
4. with --peers: EZAT and each peer in interleaved rounds (bench/compare.py, bench/peers.py);
   phase `scale` (full runs): 1 against 2 workers at the same p99, and granian with 2;
5. the prompt-cache benchmark (`python -m bench.cache`, its own gateways and simulators), after
   the others, into the same directory.
Writes `report.md` and `results.json` (and `cache.md`, `cache.json`) to --out and prints the
markdown. The cells each phase is made of (and the plan sizing them) are in bench/cells.py.

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
from functools import partial
from pathlib import Path

import orjson

from bench import compare, loadgen, perf_readme, report, run_options, yardstick
from bench.cells import Cells, Plan
from bench.fake_upstream import raise_nofile_limit
from bench.procs import GPT_MODEL, UPSTREAM_KEY, BenchError, Meter, Procs, memory_kb, pin
from bench.run_options import parse_args

APIS = {
    "messages": "/v1/messages",
    "openai": "/openai/v1/chat/completions",
    "responses": "/openai/v1/responses",
    # Issue 30: the same client APIs on the GPT model (bench/procs.py GPT_MODEL).
    "openai-relay": "/openai/v1/chat/completions",
    "messages-gpt": "/v1/messages",
}
# How the load generator speaks to each API (auth header, first-token and end markers).
LOADGEN_API = {
    "messages": "anthropic",
    "openai": "openai",
    "responses": "responses",
    "openai-relay": "openai",
    "messages-gpt": "anthropic",
}
# The model each target asks for when it is not the Claude one (loadgen.MODEL).
MODELS = {"openai-relay": GPT_MODEL, "messages-gpt": GPT_MODEL}
# Targets measured in the matrix and events phases only: what issue 30 compares is CPU per
# request and per event; the held-open shapes stay on the Claude APIs (the quick run's budget).
GPT_TARGETS = frozenset(MODELS)


def targets_for(port: int, key: str, apis: list[str] | None = None) -> dict[str, loadgen.Target]:
    """The gateway's targets (all of APIS, or those of --apis), each with its model."""
    return {
        api: loadgen.Target(
            "127.0.0.1", port, path, LOADGEN_API[api], key, model=MODELS.get(api, loadgen.MODEL)
        )
        for api, path in APIS.items()
        if apis is None or api in apis
    }


class Runner(Cells):
    """The phases of one run, over the cells of bench/cells.py."""

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
        targets = targets_for(port, key, self.args.apis)
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
        # Cell by cell, every API back to back (not API after API): the report compares APIs
        # with each other (issue 30: the GPT paths against the Claude one), and on a shared
        # machine a drift in others' load then lands on all of them alike.
        plan = self.plan
        cells = [
            (stream, conc, prompt)
            for stream in (False, True)
            for conc in plan.concurrency
            for prompt in plan.prompts
        ]
        first = len(self.rows)
        for stream, conc, prompt in cells if "matrix" in phases else []:
            for api in working:
                await self.matrix_cell("gateway", api, targets[api], pid, stream, conc, prompt)
        for paced in (False, True) if "events" in phases else ():
            for api in working:
                await self.event_cost("gateway", api, targets[api], pid, paced=paced)
        # Reported API after API, as before: matrix rows, then event rows (a stable sort keeps
        # each API's cells in their order).
        self.rows[first:] = sorted(
            self.rows[first:], key=lambda r: (r["section"] != "matrix", working.index(r["api"]))
        )
        # Memory before open streams: 1,000 held streams raise RSS for good (the allocator keeps
        # its arenas), which would hide growth from the 100k-token requests.
        self.rows.append(
            {"section": "rss", "target": "gateway", "when": "after matrix", **memory_kb(pid)}
        )
        if "messages" in working and "memory" in phases:
            await self.memory("messages", targets["messages"], pid, stream=False)
        if "openai" in working and "memory" in phases:
            await self.memory("openai", targets["openai"], pid, stream=True)
        for api in [a for a in working if a not in GPT_TARGETS] if "open" in phases else []:
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
        apis = list(args.apis or APIS)
        for name, variant_env in variants.items():
            port, pid = await asyncio.to_thread(
                partial(self.procs.start_gateway, name=name),
                variant_env,
                args.server,
                self.server_cpu,
            )
            targets = targets_for(port, key, self.args.apis)
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
                            await self.matrix_cell(
                                name, api, targets[api], pid, stream, conc, prompt
                            )

    async def smoke(self, targets: dict[str, loadgen.Target]) -> list[str]:
        """One request per API and mode; an API that answers errors is reported and skipped,
        and so is a GPT target whose requests did not reach the upstream's Chat Completions
        route (the model would then be measured on the Claude path, under the wrong name)."""
        working = []
        for api, target in targets.items():
            ok = True
            chat_before = self.upstream_stats()["chat"]
            for stream in (False, True):
                res = await loadgen.run_closed(
                    target, stream=stream, concurrency=1, requests=1, duration=30, timeout=30
                )
                if res.errors:
                    ok = False
                    msg = f"gateway {api} stream={stream} failed: {res.first_error}"
                    self.notes.append(msg)
                    self.log(msg)
            chat_calls = self.upstream_stats()["chat"] - chat_before
            if ok and (chat_calls == 2) != (api in GPT_TARGETS):
                ok = False
                msg = f"gateway {api}: {chat_calls} of its 2 calls reached /v1/chat/completions"
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
    # Wall seconds of each phase, and of the whole run (the quick run's budget: issue 22).
    phases: dict[str, float] = {}
    mark = started = time.monotonic()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        phases[name] = round(now - mark, 1)
        mark = now

    try:
        # A bounded lifetime even if this process is killed before it can stop the upstream.
        runner.up_port = procs.start_upstream(
            events=plan.long_stream, cpu=runner.side_cpu, max_seconds=args.max_minutes * 60
        )
        await yardstick.measure(runner)
        lap("yardstick")
        if "upstream" in args.targets:
            runner.log("upstream alone")
            await runner.run_upstream()
            lap("upstream")
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
            lap("gateway")
        if args.peers:
            try:
                await compare.peers(runner)
            except BenchError as exc:
                runner.notes.append(f"peers: {exc}")
                runner.log(str(exc))
                status = 2
            lap("peers")
        if "scale" in args.phases:
            try:
                await compare.scale(runner)
            except BenchError as exc:
                runner.notes.append(f"scale: {exc}")
                runner.log(str(exc))
                status = 2
            lap("scale")
    finally:
        procs.close()
    if "cache" in args.phases and "gateway" in args.targets:
        runner.log("prompt-cache benchmark (python -m bench.cache)")
        if not run_cache_bench(args):
            runner.notes.append("the prompt-cache benchmark failed: see its output above")
            status = status or 2
        lap("cache")
    meta["phase_seconds"] = phases
    meta["wall_seconds"] = round(time.monotonic() - started, 1)
    meta["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    markdown = report.render(meta, plan, runner.rows, runner.notes)
    markdown += compare.render(meta, runner.rows)
    (out / "report.md").write_text(markdown)
    payload = {"meta": meta, "plan": plan.__dict__, "rows": runner.rows, "notes": runner.notes}
    (out / "results.json").write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    print(markdown)
    runner.log(f"wrote {out / 'report.md'} and {out / 'results.json'}")
    runner.log(
        f"took {meta['wall_seconds']} s: " + ", ".join(f"{k} {v} s" for k, v in phases.items())
    )
    if args.update_readme:
        perf_readme.update_readme(out)
        runner.log("rewrote README.md's performance block")
    if any(r.get("errors") for r in runner.rows):
        runner.log("some cells had errors: see the Errors section")
    return status


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.apis and (bad := set(args.apis) - set(APIS)):
        sys.exit(f"bench: unknown --apis {', '.join(sorted(bad))} (known: {', '.join(APIS)})")
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
