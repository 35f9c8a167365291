"""Command-line options of `python -m bench.run` (see its docstring)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

QUIET_CPUS = 0.3  # other processes' load (in CPUs) below which a cell counts as undisturbed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="EZAT Router benchmark matrix")
    parser.add_argument("--quick", action="store_true", help="smoke run (under 2 minutes), for CI")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--redis",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="use Redis db 13 (default: with --db postgres)",
    )
    parser.add_argument("--server", choices=("uvicorn", "granian", "daphne"), default="uvicorn")
    parser.add_argument(
        "--targets", default="upstream,gateway", help="comma list of upstream, gateway"
    )
    parser.add_argument(
        "--apis",
        default=None,
        metavar="A,A",
        help="gateway APIs to measure (default all: messages, openai, responses, openai-relay, "
        "messages-gpt; bench/run.py APIS)",
    )
    parser.add_argument("--out", default=None, help="directory (default bench/results/<stamp>)")
    parser.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="server on CPU 0, load + upstream on CPU 1 (default: if 2+ CPUs)",
    )
    parser.add_argument(
        "--phases",
        default=None,
        help="comma list of matrix, events, memory, open, cache, scale "
        "(default: all; quick: all but scale)",
    )
    parser.add_argument(
        "--memory-requests",
        type=int,
        default=None,
        metavar="N",
        help="100k-token requests per memory check (default 1,000; quick 24), in batches of 100",
    )
    parser.add_argument(
        "--open-levels",
        default=None,
        metavar="N,N",
        help="held-open levels of the sustained open-streams shape (default: 1,000; quick 30); "
        "the report names the largest whose TTFT p99 stays within 1.5x the bare upstream's",
    )
    parser.add_argument(
        "--peers",
        default="",
        help="comma list of litellm, portkey, floor: installed into bench/.peers/ on first use, "
        "measured in rounds interleaved with EZAT against the same fake upstream (floor: the "
        "least a Python gateway costs on EZAT's server, bench/floor_proxy.py)",
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="rounds of the peers comparison (3; quick 1)"
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="per request, seconds")
    parser.add_argument("--max-minutes", type=float, default=45.0, help="hard cap on the run")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=0.0,
        metavar="S",
        help=f"before each cell wait up to S s for other load < {QUIET_CPUS} CPU",
    )
    parser.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (logs, db)")
    parser.add_argument(
        "--request-log-compare",
        action="store_true",
        help="the matrix on two gateways, request log on and off (EZAT_REQUEST_LOG=false), "
        "cell by cell, with their ratios (issue 16's 5 %% check); other gateway phases skipped",
    )
    parser.add_argument(
        "--update-readme",
        action="store_true",
        help="after the run, rewrite README.md's performance block from its results",
    )
    parser.add_argument(
        "--readme-from",
        default=None,
        metavar="DIR",
        help="only rewrite README.md's performance block from DIR/results.json, then exit",
    )
    args = parser.parse_args(argv)
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if bad := set(args.targets) - {"upstream", "gateway"}:
        parser.error(f"unknown targets: {', '.join(sorted(bad))}")
    if args.phases is None:  # the workers' scaling is left out of the CI smoke
        args.phases = "matrix,events,memory,open,cache" + ("" if args.quick else ",scale")
    args.phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    if bad := args.phases - {"matrix", "events", "memory", "open", "cache", "scale"}:
        parser.error(f"unknown phases: {', '.join(sorted(bad))}")
    if args.open_levels is not None:
        try:
            args.open_levels = [int(n) for n in args.open_levels.split(",") if n.strip()]
        except ValueError:
            parser.error("--open-levels takes whole numbers, e.g. 250,500,1000")
        if not args.open_levels or min(args.open_levels) < 1:
            parser.error("--open-levels takes positive numbers")
    if args.apis is not None:  # checked against bench/run.py's APIS there (it imports us)
        args.apis = [a.strip() for a in args.apis.split(",") if a.strip()]
        if not args.apis:
            parser.error("--apis takes a comma list of API names")
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    if bad := set(args.peers) - {"litellm", "portkey", "floor"}:
        parser.error(f"unknown peers: {', '.join(sorted(bad))}")
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.pin is None:
        args.pin = len(os.sched_getaffinity(0)) >= 2
    if args.out is None:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        args.out = str(
            Path(__file__).parent / "results" / f"{stamp}{'-quick' if args.quick else ''}"
        )
    return args


def machine_notes(args: argparse.Namespace) -> dict[str, Any]:
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parent,
    ).stdout.strip()
    redis = args.redis if args.redis is not None else args.db == "postgres"
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "server": args.server,
        "db": args.db,
        "redis": redis,
        "quick": args.quick,
        "pinned": args.pin,
        "peers": args.peers,
        "rounds": args.rounds,
        "ram_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        # A shared machine's load at the start (the end's is added by bench.run): the report
        # prints both; CPU per request holds up under load, wall throughput does not.
        "loadavg_start": [round(v, 2) for v in os.getloadavg()],
    }
