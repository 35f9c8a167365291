"""The platform benchmark: the gateway's CPU on Bedrock and Vertex deployments beside the
Anthropic kind, and idle RSS, in one run against the same fake upstream.

    python -m bench.platforms [--quick] [--out DIR]

Three phases, one per deployment kind, each with a freshly started gateway (uvicorn, one worker,
pinned like bench.run) whose only enabled deployment is of that kind, all pointing at the same
`bench.fake_upstream` (which speaks the Bedrock and Vertex framings without checking signatures
or tokens). Per phase:

- idle RSS of the fresh worker, before its first request (botocore and google-auth are imported
  only by a worker that uses a Bedrock or Vertex deployment: tests/unit/test_platform_imports.py),
  and RSS after the phase;
- CPU per request, JSON and stream (C=16, 1k-token prompt, 64 output tokens), as bench.run
  measures it (Δ utime+stime of the server's process tree ÷ requests);
- CPU per streamed event, unpaced and paced 1 ms (bench.run's method: Δ CPU per stream between
  a short and a long stream ÷ the extra events).

The report states the ratios against the Anthropic kind (targets: Bedrock ≤ 1.3× per request,
≤ 2× per streamed event; idle RSS of a worker without Bedrock or Vertex deployments unchanged).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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


def _deployments(procs: Procs, env: dict[str, str], port: int) -> None:
    from gateway.simulator.platforms import make_service_account

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


def _only(procs: Procs, env: dict[str, str], kind: str) -> None:
    names = {"anthropic": "fake", "bedrock": "fake-bedrock", "vertex": "fake-vertex"}
    for other, name in names.items():
        procs.manage(env, "set_deployment", name, "--enable" if other == kind else "--disable")


async def _phase(
    runner: Runner, procs: Procs, env: dict[str, str], key: str, kind: str
) -> dict[str, Any]:
    _only(procs, env, kind)
    port, pid = procs.start_gateway(env, "uvicorn", runner.server_cpu)
    try:
        await asyncio.sleep(1.0)  # let start-up allocations settle
        idle = memory_kb(pid)["rss_kb"]
        target = loadgen.Target.from_url(f"http://127.0.0.1:{port}/v1/messages", key=key)
        row: dict[str, Any] = {"kind": kind, "idle_rss_kb": idle}
        for stream in (False, True):
            cell = await runner.cell(target, pid, stream=stream, conc=16, prompt=1000)
            name = "stream" if stream else "json"
            row[f"cpu_ms_{name}"] = cell["cpu_ms_per_req"]
            row[f"errors_{name}"] = cell["errors"]
            row[f"first_error_{name}"] = cell["first_error"]
        for paced in (False, True):
            before = len(runner.rows)
            await runner.event_cost(kind, "messages", target, pid, paced=paced)
            events = runner.rows[before]
            row["us_per_event_" + ("paced" if paced else "unpaced")] = events["us_per_event"]
            row["errors_events"] = row.get("errors_events", 0) + events["errors"]
        row["rss_after_kb"] = memory_kb(pid)["rss_kb"]
        return row
    finally:
        procs.stop(procs.children[-1])


def _ratio(value: float, base: float) -> float | None:
    return round(value / base, 2) if base > 0 else None


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    base = next(r for r in rows if r["kind"] == "anthropic")
    lines = [
        "# Platform benchmark (python -m bench.platforms)",
        "",
        f"Run {meta['stamp']} on {meta['cpus']} CPUs; uvicorn, one worker; C=16, 1k-token "
        "prompt, 64 output tokens; events: Δ CPU between a 64- and a long stream.",
        "",
        "| kind | idle RSS MB | CPU ms/req JSON | × | CPU ms/req stream | × | µs/event "
        "unpaced | × | µs/event paced 1 ms | × | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        errors = r["errors_json"] + r["errors_stream"] + r["errors_events"]
        lines.append(
            f"| {r['kind']} | {r['idle_rss_kb'] / 1024:.1f} | {r['cpu_ms_json']} | "
            f"{_ratio(r['cpu_ms_json'], base['cpu_ms_json'])} | {r['cpu_ms_stream']} | "
            f"{_ratio(r['cpu_ms_stream'], base['cpu_ms_stream'])} | "
            f"{r['us_per_event_unpaced']} | "
            f"{_ratio(r['us_per_event_unpaced'], base['us_per_event_unpaced'])} | "
            f"{r['us_per_event_paced']} | "
            f"{_ratio(r['us_per_event_paced'], base['us_per_event_paced'])} | {errors} |"
        )
    return "\n".join(lines) + "\n"


async def run(args: argparse.Namespace) -> int:
    plan = Plan.make(args.quick)
    procs = Procs(keep_tmp=args.keep_tmp)
    runner = Runner(args, plan, procs)
    if args.pin:
        pin(os.getpid(), runner.side_cpu)
    rows = []
    try:
        runner.up_port = procs.start_upstream(
            events=plan.long_stream, cpu=runner.side_cpu, max_seconds=args.max_minutes * 60
        )
        env = procs.gateway_env("sqlite", redis=False)
        key = procs.setup_gateway(env, runner.up_port)
        _deployments(procs, env, runner.up_port)
        for kind in ("anthropic", "bedrock", "vertex"):
            runner.log(f"phase {kind}")
            rows.append(await _phase(runner, procs, env, key, kind))
            runner.log(orjson.dumps(rows[-1]).decode())
    except BenchError as exc:
        runner.log(str(exc))
        return 2
    finally:
        procs.close()
    meta = {"stamp": time.strftime("%Y%m%d-%H%M%S"), "cpus": os.cpu_count(), "quick": args.quick}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    markdown = render(rows, meta)
    (out / "platforms.md").write_text(markdown)
    (out / "platforms.json").write_bytes(
        orjson.dumps(
            {"meta": meta, "rows": rows, "event_rows": runner.rows}, option=orjson.OPT_INDENT_2
        )
    )
    print(markdown)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--out", default=f"bench/results/platforms-{time.strftime('%Y%m%d-%H%M%S')}"
    )
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
