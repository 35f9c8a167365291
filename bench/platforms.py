"""The platform benchmark: the gateway's CPU on Bedrock and Vertex deployments beside the
Anthropic kind, and idle RSS, in one run against the same fake upstream.

    python -m bench.platforms [--quick] [--rounds N] [--out DIR]

One gateway (uvicorn, one worker, pinned like bench.run) with three deployments of the same
fake upstream (`bench.fake_upstream`, which speaks the Bedrock and Vertex framings without
checking signatures or tokens): `fake` (anthropic), `fake-bedrock` (SigV4 with static keys) and
`fake-vertex` (a service-account key; the fake is its token endpoint). Each kind is reached with
an `x-ezat-session` found to route to it (probed against the fake's per-platform counters).
The kinds are measured interleaved, round after round, in the same process: the machine is shared
and its load drifts, so a kind is never measured only in a busier minute than another. A figure is
the median over the rounds.

- CPU per request, JSON and stream (C=16, 1k-token prompt, 64 output tokens), as bench.run
  measures it (Δ utime+stime of the server's process tree ÷ requests);
- CPU per streamed event, unpaced and paced 1 ms (bench.run's method: Δ CPU per stream between
  a 64-token and a long stream ÷ the extra events);
- idle RSS of the worker before any request (botocore and google-auth not loaded: they load
  with the first Bedrock / Vertex request,
  tests/gateway/providers/test_platform_imports.py), and after each kind's first request.

Targets (issue 15): Bedrock ≤ 1.3× the Anthropic kind per request, ≤ 2× per streamed event; idle
RSS of a worker without Bedrock or Vertex deployments unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from bench import loadgen
from bench.procs import BenchError, Procs, memory_kb, pin
from bench.run import Plan, Runner

AWS_KEY_ID = "AKIAEZATBENCHKEY0001"
AWS_SECRET = "ezatBenchSecret/0123456789+abcdefghijkl"
KINDS = ("anthropic", "bedrock", "vertex")


def _deployments(procs: Procs, env: dict[str, str], port: int) -> None:
    from simulator.platforms import make_service_account

    upstream = f"http://127.0.0.1:{port}"
    key_file = procs.tmp / "sa.json"
    key_file.write_text(json.dumps(make_service_account(f"{upstream}/token", "ezat-bench")))
    procs.manage(
        env, "add_deployment", "fake-bedrock", "--kind", "bedrock", "--region", "us-east-1",
        "--url", upstream, "--aws-access-key-id", AWS_KEY_ID,
        "--aws-secret-access-key", AWS_SECRET, "--max-concurrency", "100000",
    )  # fmt: skip
    procs.manage(
        env, "add_deployment", "fake-vertex", "--kind", "vertex", "--project", "ezat-bench",
        "--region", "us-east5", "--url", f"{upstream}/v1", "--service-account-file",
        str(key_file), "--max-concurrency", "100000",
    )  # fmt: skip


def _target(port: int, key: str, session: str) -> loadgen.Target:
    # The session rides in the key's header line: loadgen writes `x-api-key: {key}\r\n`, so the
    # request carries `x-ezat-session` without a change to the load generator.
    return loadgen.Target.from_url(
        f"http://127.0.0.1:{port}/v1/messages", key=f"{key}\r\nx-ezat-session: {session}"
    )


def _kind_of(counts: dict[str, int]) -> str:
    if counts["bedrock"]:
        return "bedrock"
    return "vertex" if counts["vertex"] else "anthropic"


async def _sessions(
    runner: Runner, port: int, pid: int, key: str, rss: list[tuple[str, int]]
) -> dict[str, str]:
    """A session key per kind, found by asking and watching which route of the fake moved."""
    found: dict[str, str] = {}
    for n in range(200):
        session = f"bench-{n}"
        before = runner.upstream_stats()
        res = await loadgen.run_closed(
            _target(port, key, session), stream=False, concurrency=1, requests=1, duration=10
        )
        if res.errors:
            raise BenchError(f"probe failed: {res.summary().get('first_error')}")
        after = runner.upstream_stats()
        kind = _kind_of({k: after[k] - before[k] for k in ("bedrock", "vertex")})
        if kind not in found:
            found[kind] = session
            # RSS after the first request of each kind, in the order they are found.
            rss.append((kind, memory_kb(pid)["rss_kb"]))
        if len(found) == len(KINDS):
            return found
    raise BenchError(f"no session reaches every kind (found {sorted(found)})")


async def _round(
    runner: Runner, pid: int, targets: dict[str, loadgen.Target]
) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for kind, target in targets.items():
        row: dict[str, Any] = {"errors": 0}
        for stream in (False, True):
            cell = await runner.cell(target, pid, stream=stream, conc=16, prompt=1000)
            row["cpu_ms_" + ("stream" if stream else "json")] = cell["cpu_ms_per_req"]
            row["errors"] += cell["errors"]
        for paced in (False, True):
            before = len(runner.rows)
            await runner.event_cost(kind, "messages", target, pid, paced=paced)
            events = runner.rows[before]
            row["us_per_event_" + ("paced" if paced else "unpaced")] = events["us_per_event"]
            row["errors"] += events["errors"]
        rows[kind] = row
        runner.log(f"{kind}: {orjson.dumps(row).decode()}")
    return rows


def _ratio(value: float, base: float) -> float | None:
    return round(value / base, 2) if base > 0 else None


FIELDS = ("cpu_ms_json", "cpu_ms_stream", "us_per_event_unpaced", "us_per_event_paced")


def summarise(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        summary[kind] = {f: round(statistics.median(r[kind][f] for r in rounds), 3) for f in FIELDS}
        summary[kind]["errors"] = sum(r[kind]["errors"] for r in rounds)
    return summary


def render(summary: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    base = summary["anthropic"]
    lines = [
        "# Platform benchmark (python -m bench.platforms)",
        "",
        f"Run {meta['stamp']} on {meta['cpus']} CPUs; one uvicorn worker with the three kinds' "
        f"deployments, measured interleaved, median of {meta['rounds']} rounds; C=16, "
        "1k-token prompt, 64 output tokens; per event: Δ CPU between a 64-token and a long "
        "stream ÷ the extra events.",
        "",
        "| kind | CPU ms/req JSON | × | CPU ms/req stream | × | µs/event unpaced | × "
        "| µs/event paced 1 ms | × | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, r in summary.items():
        cells = []
        for f in FIELDS:
            cells += [str(r[f]), str(_ratio(r[f], base[f]))]
        lines.append(f"| {kind} | {' | '.join(cells)} | {r['errors']} |")
    firsts = ", ".join(
        f"after the first {kind} request {kb / 1024:.1f} MB"
        for kind, kb in meta["rss_after_first_kb"]
    )
    lines += [
        "",
        f"Worker RSS: idle before any request {meta['idle_rss_kb'] / 1024:.1f} MB (botocore and "
        f"google-auth not loaded); {firsts} (each kind's libraries load with its first request).",
    ]
    return "\n".join(lines) + "\n"


async def run(args: argparse.Namespace) -> int:
    plan = Plan.make(args.quick)
    procs = Procs(keep_tmp=args.keep_tmp)
    runner = Runner(args, plan, procs)
    if args.pin:
        pin(os.getpid(), runner.side_cpu)
    rounds: list[dict[str, dict[str, Any]]] = []
    rss: list[tuple[str, int]] = []
    idle = 0
    try:
        runner.up_port = procs.start_upstream(
            events=plan.long_stream, cpu=runner.side_cpu, max_seconds=args.max_minutes * 60
        )
        env = procs.gateway_env("sqlite", redis=False)
        key = procs.setup_gateway(env, runner.up_port)
        _deployments(procs, env, runner.up_port)
        port, pid = procs.start_gateway(env, "uvicorn", runner.server_cpu)
        await asyncio.sleep(1.0)  # start-up allocations settle
        idle = memory_kb(pid)["rss_kb"]
        sessions = await _sessions(runner, port, pid, key, rss)
        targets = {kind: _target(port, key, sessions[kind]) for kind in KINDS}
        for n in range(args.rounds):
            runner.log(f"round {n + 1} of {args.rounds}")
            rounds.append(await _round(runner, pid, targets))
    except BenchError as exc:
        runner.log(str(exc))
        return 2
    finally:
        procs.close()
    summary = summarise(rounds)
    meta = {
        "stamp": time.strftime("%Y%m%d-%H%M%S"),
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "rounds": args.rounds,
        "idle_rss_kb": idle,
        "rss_after_first_kb": rss,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    markdown = render(summary, meta)
    (out / "platforms.md").write_text(markdown)
    payload = {"meta": meta, "summary": summary, "rounds": rounds, "rows": runner.rows}
    (out / "platforms.json").write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    print(markdown)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    parser.add_argument("--out", default=f"bench/results/platforms-{stamp}")
    parser.add_argument("--keep-tmp", action="store_true")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--max-minutes", type=float, default=30.0)
    parser.add_argument("--quiet-wait", type=float, default=0.0)
    parser.add_argument("--no-pin", dest="pin", action="store_false")
    args = parser.parse_args(argv)
    if (os.cpu_count() or 1) < 2:
        args.pin = False
    return args


def main(argv: list[str] | None = None) -> None:
    loadgen.install_fast_loop()
    sys.exit(asyncio.run(run(parse_args(argv))))


if __name__ == "__main__":
    main()
