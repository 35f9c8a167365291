"""The prompt-cache benchmark: EZAT's routing against naive routing, through the real gateway.

    python -m bench.cache [--quick] [--seed N] [--db sqlite|postgres] [--redis/--no-redis]
                          [--out DIR] [--update-readme]
    python -m bench.cache --readme-from bench/results/<stamp>   # rewrite the README block only

One run replays the seeded workload of bench/cache_workload.py (200 conversations, both APIs)
through a real gateway (uvicorn, `ezat.asgi`) to 4 deployments of one model, each an instance of
the project's upstream simulator with its own prompt cache (bench/cache_upstreams.py), all on one
simulated clock that this harness advances: hours of conversation take seconds. The same
workload is replayed once per routing policy (`EZAT_ROUTING_POLICY`, a fresh gateway process and
fresh caches each time), in two scenarios:

- base: every deployment healthy;
- churn: from the run's 1/3 request on, one deployment answers 529 overloaded to
  everything (a scripted fault), so the gateway's own failure counting cools it down; at 2/3 the
  fault is cleared and, once the cooldown has run out, the gateway finds it healthy again.

The runs are listed in bench/cache_runs.py; each is replayed by bench/cache_replay.py, an event
loop in simulated time that makes every policy's run deterministic (the same seed gives the same
numbers: tests/bench/test_cache_bench.py). bench/cache_report.py turns the outcomes into cache.json
and renders cache.md; bench/cache_readme.py renders the README block from a committed cache.json.

Writes `cache.md` and `cache.json` to --out (default bench/results/<stamp>[-quick]/).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import gzip
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench import cache_readme, cache_report
from bench.cache_gateways import Gateways
from bench.cache_replay import Replay, RunResult
from bench.cache_runs import (
    COOLDOWN_FAILURES,
    DEFAULT_POLICY,
    DEPLOYMENTS,
    PREFIX_AWARE_DEFAULT,
    RunSpec,
    ab_specs,
    run_specs,
)
from bench.cache_upstreams import Upstreams
from bench.cache_workload import MODEL, PROMPTS, Profile, Workload, generate
from bench.procs import REPO, UPSTREAM_KEY, BenchError, Procs, cpu_seconds, pin
from simulator.cache import PromptCache

# --- the gateway's set-up, in one Django process each way -----------------------------------
SETUP = """
import io, json, os
from django.core.management import call_command
spec = json.loads(os.environ["EZAT_BENCH_CACHE"])
for args in spec.get("commands", []):  # migrate and load the catalog, the first time only
    call_command(*args, stdout=io.StringIO())
for i, url in enumerate(spec["urls"]):  # none when only orgs are added
    call_command("add_deployment", f"sim-{i}", url=url, api_key=spec["key"], models=[spec["model"]],
                 max_concurrency=100000, stdout=io.StringIO())
keys = {}
for org in spec["orgs"]:
    call_command("create_org", org, credit_usd="1000000", stdout=io.StringIO())
    out = io.StringIO()
    call_command("create_key", org, rpm=100000000, stdout=out)
    keys[org] = out.getvalue().strip().splitlines()[-1].strip()
print("EZAT_BENCH_JSON" + json.dumps(keys))
"""

READ_BACK = """
import json, os
from accounts.models import Organization
from billing.selectors import usage_summary
spec = json.loads(os.environ["EZAT_BENCH_CACHE"])
usage = {org: usage_summary(Organization.objects.get(name=org)) for org in spec["orgs"]}
print("EZAT_BENCH_JSON" + json.dumps({"usage": usage}))
"""


def django_json(procs: Procs, env: dict[str, str], script: str, spec: dict[str, Any]) -> Any:
    payload = {**env, "EZAT_BENCH_CACHE": orjson.dumps(spec).decode()}
    out = procs.manage(payload, "shell", "-c", script)
    for line in out.splitlines():
        if line.startswith("EZAT_BENCH_JSON"):
            return orjson.loads(line[len("EZAT_BENCH_JSON") :])
    raise BenchError(f"no result from the Django shell:\n{out[-2000:]}")


# --- the whole benchmark --------------------------------------------------------------------
# A client's command in `redis-cli monitor` output: `<time> [<db> <ip>:<port>] "cmd" ...`.
_CLIENT_COMMAND = re.compile(rb"^\d+\.\d+ \[\d+ \d")


class CacheBench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self._workloads: dict[tuple[str, int], Workload] = {}
        self.procs = Procs(keep_tmp=args.keep_tmp)
        self.ups = Upstreams(DEPLOYMENTS, UPSTREAM_KEY)
        self.results: list[RunResult] = []
        self.notes: list[str] = []
        self.server_cpu = 0 if args.pin else None
        self.redis_url = ""
        self.ceilings: dict[str, dict[str, float]] = {}  # by Profile.prompts
        self.price_tiers: list[dict[str, Any]] | None = None  # the model's, from /api/models
        self.next_spec: RunSpec | None = None  # the run after the current one
        self.gateways = Gateways(self.procs, self.server_cpu)

    def log(self, msg: str) -> None:
        print(f"[bench.cache {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    async def run(self) -> dict[str, Any]:
        args = self.args
        redis = args.redis if args.redis is not None else args.db == "postgres"
        specs = run_specs(self.args.runs, self.args.prompts)
        extra = ab_specs(self.args.ab_seeds) if "shared" in self.args.prompts else []
        started = time.monotonic()
        # Stopped with a signal, clean up all the same (gateway, Redis, Postgres database).
        main = asyncio.current_task()
        assert main is not None
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, main.cancel)
        await self.ups.start()
        try:
            env = self.procs.gateway_env(args.db, redis)
            self.redis_url = env["REDIS_URL"]
            spec = {
                "urls": self.ups.urls(),
                "key": UPSTREAM_KEY,
                "model": MODEL,
                "orgs": [s.org for s in specs + extra],
            }
            # One Django process for the whole set-up (each start costs ~1 s of CPU).
            first = {**spec, "commands": [["migrate", "--noinput"], ["load_catalog"]]}
            keys = await asyncio.to_thread(django_json, self.procs, env, SETUP, first)
            connector = aiohttp.TCPConnector(limit=0, force_close=False)
            # No read timeout: replies are held for as long as the harness waits (a cooldown
            # running out can take minutes); arrivals have their own deadline.
            timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
                runs = specs + extra
                for i, run in enumerate(runs):
                    self.next_spec = runs[i + 1] if i + 1 < len(runs) else None
                    result = await self.one_deterministic(run, env, keys, http)
                    self.results.append(result)
                await self.gateways.discard()
            orgs = [r.spec.org for r in self.results]
            read_back = await asyncio.to_thread(
                django_json, self.procs, env, READ_BACK, {**spec, "urls": [], "orgs": orgs}
            )
        finally:
            await self.ups.stop()
            self.procs.close()
        return self.summary(read_back, time.monotonic() - started, redis)

    def workload_for(self, spec: RunSpec) -> Workload:
        key = (spec.prompts, spec.seed_offset)
        if key not in self._workloads:
            seed = self.args.seed + spec.seed_offset
            profile = Profile.named(self.args.quick, spec.prompts)
            self._workloads[key] = generate(seed, profile)
        return self._workloads[key]

    def cooldown_for(self, spec: RunSpec) -> float:
        """EZAT_COOLDOWN_SECONDS for a churn run: longer than the outage takes in real time,
        estimated from the same policy's base run. The harness waits out the rest at the
        return, so a generous value costs real time on every churn run."""
        name = "ezat" if spec.seed_offset else spec.name
        windows = [
            r.window_real_s
            for r in self.results
            if r.spec.scenario == "base"
            and r.spec.prompts == spec.prompts
            and (r.spec.name == name or r.spec.name == "ezat")
        ]
        return round(max(1.5, 1.5 * max(windows or [10.0]) + 1.5), 1)

    async def one_deterministic(
        self, spec: RunSpec, env: dict[str, str], keys: dict[str, str], http: Any
    ) -> RunResult:
        """One run; a churn run whose cooldown ran out mid-outage is run again (fresh gateway,
        fresh caches, a new org) with twice the cooldown. A cooldown running out makes the
        gateway re-probe the failing deployment -- as it would in production -- at a moment that
        depends on the machine's load, and the numbers must not."""
        cooldown = self.cooldown_for(spec) if spec.scenario == "churn" else 30.0
        result = await self.one(spec, env, keys[spec.org], http, cooldown)
        retry = 0
        while spec.scenario == "churn" and result.fault_hits != COOLDOWN_FAILURES and retry < 3:
            retry += 1
            cooldown *= 2
            self.log(f"{spec.org}: the cooldown ran out mid-outage; again with {cooldown} s")
            again = replace(spec, attempt=retry)
            made = await asyncio.to_thread(
                django_json, self.procs, env, SETUP, {"urls": [], "orgs": [again.org]}
            )
            result = await self.one(again, env, made[again.org], http, cooldown)
            result.notes.insert(0, f"run {retry + 1}: the earlier ones had a cooldown run out")
        return result

    async def one(
        self,
        spec: RunSpec,
        env: dict[str, str],
        key: str,
        http: aiohttp.ClientSession,
        cooldown: float,
    ) -> RunResult:
        self.ups.reset()
        if spec.scenario == "base" and spec.name == "ezat" and not spec.seed_offset:
            self.ups.shadow = PromptCache(clock=self.ups.clock)
        self._flush_private_redis()
        port, pid = await self.gateways.start(spec, self._gateway_env(env, spec, cooldown))
        proc = next(p for p in self.procs.children if p.pid == pid)
        if self.price_tiers is None:
            self.price_tiers = await self._price_tiers(http, port)
        replay = Replay(
            self.workload_for(spec), self.ups, http, f"http://127.0.0.1:{port}", key,
            churn=spec.scenario == "churn", cooldown_s=cooldown,
        )  # fmt: skip
        monitor = await asyncio.to_thread(self._start_monitor)
        cpu_before = cpu_seconds(pid)
        t0 = time.monotonic()
        try:
            self._prestart(env)
            await replay.run()
            elapsed = time.monotonic() - t0
            cpu = cpu_seconds(pid) - cpu_before
        finally:
            self.procs.stop(proc)
            if monitor is not None:
                self.procs.stop(monitor)
        redis_commands = self._count_monitored() if monitor is not None else None
        fault_hits = replay.fault_hits
        notes = list(replay.notes)
        if spec.scenario == "churn" and fault_hits != COOLDOWN_FAILURES:
            notes.append(
                f"{fault_hits} requests hit the failing deployment (expected "
                f"{COOLDOWN_FAILURES}: a cooldown ran out before the fault was cleared, so the "
                "gateway tried the deployment again)"
            )
        if self.ups.shadow is not None:
            read = sum(u.cache_read for u in self.ups.shadow_usage.values())
            cacheable = read + sum(u.cache_creation for u in self.ups.shadow_usage.values())
            self.ceilings[spec.prompts] = {
                "hit_rate": round(read / cacheable, 6) if cacheable else 0.0
            }
        errors = sum(1 for o in replay.outcomes if not o.ok)
        self.log(
            f"{spec.prompts:6} {spec.scenario:5} {spec.name:28} {len(replay.outcomes)} "
            f"requests, {errors} errors, {elapsed:.1f} s"
        )
        return RunResult(
            spec=spec,
            outcomes=replay.outcomes,
            real_seconds=elapsed,
            gateway_cpu_s=cpu,
            redis_commands=redis_commands,
            window_real_s=max(0.0, replay.recover_at - replay.fault_at),
            fault_hits=fault_hits,
            cooldown_s=cooldown,
            unexpected=self.ups.unexpected,
            notes=notes,
        )

    def _gateway_env(self, env: dict[str, str], spec: RunSpec, cooldown: float) -> dict[str, str]:
        return {
            **env,
            **spec.env(),
            "EZAT_ROUTING_SEED": str(self.args.seed),
            "EZAT_COOLDOWN_FAILURES": str(COOLDOWN_FAILURES),
            "EZAT_COOLDOWN_SECONDS": str(cooldown),
        }

    def _prestart(self, env: dict[str, str]) -> None:
        """The next run's gateway, started while this run replays (bench/cache_gateways.py).
        Only without Redis: with it, the next gateway would start beside state this run leaves
        there, which _flush_private_redis clears before each run."""
        nxt = self.next_spec
        if nxt is not None and not self.redis_url:
            cooldown = self.cooldown_for(nxt) if nxt.scenario == "churn" else 30.0
            self.gateways.prestart(nxt, self._gateway_env(env, nxt, cooldown))

    async def _price_tiers(self, http: aiohttp.ClientSession, port: int) -> list[dict[str, Any]]:
        """The catalog prices as the gateway publishes them (GET /api/models)."""
        async with http.get(f"http://127.0.0.1:{port}/api/models") as resp:
            payload = await resp.json(content_type=None)
        models = payload.get("data", payload) if isinstance(payload, dict) else payload
        for model in models:
            if model.get("id") == MODEL:
                return list(model["pricingTiers"])
        raise BenchError(f"GET /api/models does not list {MODEL}")

    def _flush_private_redis(self) -> None:
        """Cooldowns and the prefix digest must not carry over from one run to the next. This
        is the run's own redis-server (bench/procs.py starts it), never a shared one."""
        if self.redis_url:
            import redis

            with contextlib.closing(redis.Redis.from_url(self.redis_url)) as client:
                client.flushall()

    def _start_monitor(self) -> subprocess.Popen[bytes] | None:
        """`redis-cli monitor` on the run's private Redis, into a file: every command a client
        sends, one line each, and the commands run inside scripts marked `[db lua]`. Counting
        the client lines gives the gateway's round trips (INFO's command counts include the
        commands inside the limiter's scripts, ~30 per request, which are not round trips)."""
        if not self.redis_url:
            return None
        cli = shutil.which("redis-cli")
        if cli is None:
            self.notes.append("redis-cli not found: Redis commands per request not measured")
            return None
        proc = self.procs.spawn("monitor", [cli, "-u", self.redis_url, "monitor"])
        log = self.procs.tmp / "monitor.log"
        deadline = time.monotonic() + 10
        while b"OK" not in (log.read_bytes() if log.exists() else b""):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise BenchError(
                    f"redis-cli monitor did not start:\n{self.procs.log_tail('monitor')}"
                )
            time.sleep(0.02)
        return proc

    def _count_monitored(self) -> int:
        lines = (self.procs.tmp / "monitor.log").read_bytes().splitlines()
        return sum(1 for line in lines if _CLIENT_COMMAND.match(line))

    def summary(self, read_back: dict[str, Any], real_s: float, redis: bool) -> dict[str, Any]:
        """cache.json: the first workload's figures at the top level (the shared-prompt one
        when it ran), each other workload's in the same shape under `workloads`."""
        meta = machine_notes(self.args, redis, real_s)
        first, *others = self.args.prompts
        data = self.workload_summary(first, read_back, meta)
        if others:
            data["workloads"] = {w: self.workload_summary(w, read_back, meta) for w in others}
        return data

    def workload_summary(
        self, prompts: str, read_back: dict[str, Any], meta: dict[str, Any]
    ) -> dict[str, Any]:
        assert self.price_tiers is not None, "no gateway answered GET /api/models"
        prices = cache_report.schedule_from(self.price_tiers)
        workload = self.workload_for(RunSpec("base", DEFAULT_POLICY, None, prompts=prompts))
        conversations = len(workload.conversations)
        mine = [r for r in self.results if r.spec.prompts == prompts]
        base_of = {r.spec.name: r for r in mine if r.spec.scenario == "base"}
        runs = []
        for r in mine:
            if r.spec.seed_offset:
                continue
            figures = cache_report.run_figures(
                r.outcomes, prices, conversations, read_back["usage"][r.spec.org]
            )
            run: dict[str, Any] = {
                "org": r.spec.org,
                "scenario": r.spec.scenario,
                "policy": r.spec.policy,
                "name": r.spec.name,
                "prefix_aware": (
                    PREFIX_AWARE_DEFAULT if r.spec.prefix_aware is None else r.spec.prefix_aware
                ),
                **figures,
                "real_seconds": round(r.real_seconds, 2),
                "gateway_cpu_ms_per_request": round(
                    r.gateway_cpu_s * 1000 / max(1, len(r.outcomes)), 3
                ),
                "redis_commands_per_request": (
                    round(r.redis_commands / max(1, len(r.outcomes)), 2)
                    if r.redis_commands is not None
                    else None
                ),
                "fault_hits": r.fault_hits,
                "cooldown_seconds": r.cooldown_s,
                "unexpected_requests": r.unexpected,
                "notes": r.notes,
            }
            base = base_of.get(r.spec.name)
            if r.spec.scenario == "churn" and base is not None:
                base_rate = cache_report.run_figures(
                    base.outcomes, prices, conversations, read_back["usage"][base.spec.org]
                )["hit_rate"]
                run["churn"] = cache_report.churn_figures(
                    r.outcomes,
                    base.outcomes,
                    workload.churn_window(),
                    base_rate,
                    figures["hit_rate"],
                )
            runs.append(run)
        return {
            "meta": meta,
            "model": MODEL,
            "fallback_ab": self.fallback_ab(prices, read_back) if prompts == "shared" else [],
            "workload": cache_report.describe_workload(workload),
            "prices": self.price_tiers,
            "ceiling": self.ceilings.get(prompts),
            "runs": runs,
            "notes": self.notes,
        }

    def fallback_ab(self, prices: Any, read_back: dict[str, Any]) -> list[dict[str, Any]]:
        """Per seed, the churn scenario's rendezvous runs with the fallback on and off."""
        out = []
        for offset in sorted({r.spec.seed_offset for r in self.results}):
            pair = {}
            for r in self.results:
                if (r.spec.seed_offset, r.spec.scenario, r.spec.policy, r.spec.prompts) != (
                    offset,
                    "churn",
                    DEFAULT_POLICY,
                    "shared",
                ):
                    continue
                on = PREFIX_AWARE_DEFAULT if r.spec.prefix_aware is None else r.spec.prefix_aware
                conversations = len(self.workload_for(r.spec).conversations)
                figures = cache_report.run_figures(
                    r.outcomes, prices, conversations, read_back["usage"][r.spec.org]
                )
                pair["on" if on else "off"] = {
                    k: figures[k] for k in ("hit_rate", "cost_nano", "errors", "bill_matches")
                } | {"fault_hits": r.fault_hits}
            if len(pair) == 2:
                out.append({"seed": self.args.seed + offset, **pair})
        return out

    def requests_dump(self) -> bytes:
        """Every request of every run (for whoever wants to dig; not committed)."""
        return orjson.dumps(
            {r.spec.org: [cache_report.outcome_row(o) for o in r.outcomes] for r in self.results}
        )


def machine_notes(args: argparse.Namespace, redis: bool, real_s: float) -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False, cwd=REPO,
    ).stdout.strip()  # fmt: skip
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "db": args.db,
        "redis": redis,
        "quick": args.quick,
        "seed": args.seed,
        "real_seconds": round(real_s, 1),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="EZAT prompt-cache routing benchmark")
    parser.add_argument("--quick", action="store_true", help="small workload (CI smoke)")
    parser.add_argument("--seed", type=int, default=2026, help="workload seed (default 2026)")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--redis",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the gateway with a private Redis (default: with --db postgres)",
    )
    parser.add_argument(
        "--prompts",
        default=None,
        help="the workloads, comma list: shared (an app's system prompt shared by its "
        "conversations), own (every conversation its own); default shared,own (quick: shared)",
    )
    parser.add_argument("--out", default=None, help="directory (default bench/results/<stamp>)")
    parser.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the gateway on CPU 0, this harness on CPU 1 (default: if 2+ CPUs)",
    )
    parser.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (logs, db)")
    parser.add_argument(
        "--runs",
        default="",
        help="comma list of runs to keep (ezat is always run): rendezvous-fallback-off, "
        "modulo, round_robin, random, least_busy; default all",
    )
    parser.add_argument(
        "--ab-seeds",
        type=int,
        default=None,
        metavar="N",
        help="also run the fallback's A/B (churn, on and off) on N other seeds (default 2; "
        "quick 0)",
    )
    parser.add_argument(
        "--update-readme", action="store_true", help="rewrite README.md's cache block from this run"
    )
    parser.add_argument(
        "--readme-from",
        metavar="DIR",
        default=None,
        help="only rewrite README.md's cache block from DIR/cache.json",
    )
    args = parser.parse_args(argv)
    args.runs = {r.strip() for r in args.runs.split(",") if r.strip()}
    default_prompts = "shared" if args.quick else ",".join(PROMPTS)
    args.prompts = [p.strip() for p in (args.prompts or default_prompts).split(",") if p.strip()]
    if (
        not args.prompts
        or set(args.prompts) - set(PROMPTS)
        or len(set(args.prompts)) < len(args.prompts)
    ):
        parser.error(f"--prompts: a comma list of {', '.join(PROMPTS)}")
    if args.update_readme and args.prompts != list(PROMPTS):
        parser.error(f"--update-readme needs every workload (--prompts {','.join(PROMPTS)})")
    if args.ab_seeds is None:
        args.ab_seeds = 0 if args.quick or args.runs else 2
    known = {spec.name for spec in run_specs()}
    if bad := args.runs - known:
        parser.error(f"unknown runs: {', '.join(sorted(bad))} (known: {', '.join(sorted(known))})")
    if args.update_readme and args.runs:
        parser.error("--update-readme needs every run (no --runs)")
    if args.pin is None:
        args.pin = len(os.sched_getaffinity(0)) >= 2
    if args.out is None:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        suffix = "-quick" if args.quick else ""
        args.out = str(Path(__file__).parent / "results" / f"{stamp}{suffix}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.readme_from:
        cache_readme.update_readme(Path(args.readme_from))
        return
    if args.pin:
        pin(os.getpid(), 1)
    bench = CacheBench(args)
    try:
        data = asyncio.run(bench.run())
    except BenchError as exc:
        sys.exit(f"bench.cache: {exc}")
    except asyncio.CancelledError:
        sys.exit("bench.cache: stopped by a signal (everything it started was stopped)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cache.json").write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    (out / "requests.json.gz").write_bytes(gzip.compress(bench.requests_dump()))
    markdown = cache_report.render(data)
    (out / "cache.md").write_text(markdown)
    print(markdown)
    print(f"wrote {out / 'cache.md'} and {out / 'cache.json'}", file=sys.stderr)
    if args.update_readme:
        cache_readme.update_readme(out)
    every = [data, *data.get("workloads", {}).values()]
    if any(r["errors"] or not r["bill_matches"] for d in every for r in d["runs"]):
        sys.exit(2)


if __name__ == "__main__":
    main()
