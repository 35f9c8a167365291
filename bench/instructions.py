"""Instruction counts (valgrind's callgrind) of the Responses API against chat completions.

    python -m bench.instructions                        # both phases (~10 min on a busy 2-core box)
    python -m bench.instructions --phases translators   # the pure translators only (~3 min)
    python -m bench.instructions --update-readme        # and rewrite README.md's block
    python -m bench.instructions --readme-from bench/results/instructions-<stamp>

CPU time on a shared machine moves with everyone else's load (the wall-clock benchmark saw the
Responses/chat ratio swing between 0.86 and 1.73 from cell to cell); the number of instructions
a piece of code executes does not. Two phases, each a ratio of Responses to chat completions on
the same upstream events:

- *translators*: the pure stream translators (`gateway/protocols/`) in a child process
  (`bench.instr_translators`), R streams of K upstream deltas each, minus a run doing
  everything but the streams. Per event = Δ instructions between K=64 and K=1,024 ÷ 960 ÷ R;
  per stream = the K=64 count ÷ R (construction, the opening and closing events, 64 deltas).
- *gateway*: one uvicorn worker under callgrind (the production command line) with the fake
  upstream, the counters zeroed before and dumped after N requests of each kind
  (`callgrind_control`), each API in turn; an idle window of the same process gives the
  background threads' instructions per second, subtracted in proportion to each window's
  length. Per request for JSON and a 64-event stream; per event = Δ per stream between 64
  and 1,024 events ÷ 960.

Under callgrind the code runs ~50× slower, so the windows are long and the absolute counts
include the interpreter's own work (dispatch, allocation, GC): they are the cost on this build
of CPython, and the ratios are what carries to another machine.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench import instr_report, loadgen
from bench.instr_translators import SHAPES, STREAMS
from bench.procs import GPT_MODEL, BenchError, Procs, free_port, wait_http
from ezat.serve import command as serve_command

REPO = Path(__file__).resolve().parent.parent
SHORT, LONG = 64, 1024
APIS = {  # name: (bench.loadgen api, path, model)
    "chat": ("openai", "/openai/v1/chat/completions", loadgen.MODEL),
    "responses": ("responses", "/openai/v1/responses", loadgen.MODEL),
    # Issue 30 item 11: the Chat Completions passthrough on the OpenAI-kind model against the
    # Claude path (bench.run's `messages` and `openai-relay` targets, the same fake upstream).
    "messages": ("anthropic", "/v1/messages", loadgen.MODEL),
    "openai-relay": ("openai", "/openai/v1/chat/completions", GPT_MODEL),
}
GATEWAY_APIS = "chat,responses"  # the default pair (issue 14); --apis messages,openai-relay
CALLGRIND = ["valgrind", "--tool=callgrind", "--dump-instr=no", "--compress-strings=no"]
# Same hashing in every run: dict layouts (and so instruction counts) do not vary with the seed.
CHILD_ENV = {"PYTHONHASHSEED": "0"}


def totals(path: Path) -> int:
    """The event count (instructions) of one callgrind output file."""
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise BenchError(f"{path}: no totals line")


def _env() -> dict[str, str]:
    return {**os.environ, **CHILD_ENV}


# --- phase: the pure translators ---------------------------------------------------------------


def _sections(out: Path) -> list[int]:
    """The counts of a run with `--dump-before`: dump files .1, .2, ... in order (the last
    section, after the final mark, is the exit, in the file without a number)."""
    counts = []
    n = 1
    while (path := Path(f"{out}.{n}")).exists():
        counts.append(totals(path))
        n += 1
    return counts


def translators(tmp: Path, streams: int, shapes: list[str], log: Any) -> list[dict[str, Any]]:
    rows = []
    for shape in shapes:
        files = []
        for k in (SHORT, LONG):
            path = tmp / f"{shape}-{k}.json"
            path.write_bytes(orjson.dumps(SHAPES[shape](k)))
            files += ["--events-file", str(path)]
        out = tmp / f"cg-{shape}.out"
        cmd = [*CALLGRIND, "--dump-before=getppid", f"--callgrind-out-file={out}", sys.executable,
               "-m", "bench.instr_translators", *files, "--streams", str(streams)]  # fmt: skip
        done = subprocess.run(
            cmd, cwd=REPO, env=_env(), capture_output=True, timeout=3600, check=False
        )
        if done.returncode != 0:
            raise BenchError(
                f"{' '.join(cmd)} failed:\n{done.stderr.decode(errors='replace')[-3000:]}"
            )
        # Section 0 is start-up and warm-up; then per (short, long) x STREAMS: a collection
        # (discarded) and the streams.
        sections = _sections(out)[2::2]
        apis = list(STREAMS)
        if len(sections) != 2 * len(apis):
            raise BenchError(f"{out}: {len(sections)} sections, expected {2 * len(apis)}")
        for i, api in enumerate(apis):
            short, long = sections[i], sections[len(apis) + i]
            log(f"translators {shape} {api}: {short:,} (K={SHORT}) {long:,} (K={LONG})")
            rows.append(
                {
                    "shape": shape,
                    "api": api,
                    "streams": streams,
                    "per_stream": round(short / streams),
                    "per_event": round((long - short) / (LONG - SHORT) / streams, 1),
                    "sections": {str(SHORT): short, str(LONG): long},
                }
            )
    return rows


# --- phase: the gateway process --------------------------------------------------------------


class _Callgrind:
    """The gateway under callgrind: zero the counters, run a window, dump and read its total."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid = pid
        self.out = out
        self.dumps = 0

    def _control(self, *args: str) -> None:
        done = subprocess.run(
            ["callgrind_control", *args, str(self.pid)],
            capture_output=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise BenchError(f"callgrind_control {args} failed: {done.stdout!r} {done.stderr!r}")

    def zero(self) -> None:
        self._control("-z")

    def dump(self) -> int:
        self._control("-d")
        self.dumps += 1
        path = Path(f"{self.out}.{self.dumps}")
        deadline = time.monotonic() + 120
        while not path.exists() or "totals:" not in path.read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise BenchError(f"callgrind dump {path} not written")
            time.sleep(0.2)
        return totals(path)


def _load(target: loadgen.Target, stream: bool, tokens: int, n: int) -> float:
    result = asyncio.run(
        loadgen.run_closed(
            target, stream=stream, concurrency=1, requests=n, duration=3600,
            prompt_tokens=1000, max_tokens=tokens, timeout=600,
        )
    )  # fmt: skip
    if result.errors:
        raise BenchError(f"{target.path} stream={stream} K={tokens}: {result.first_error}")
    return result.seconds


def gateway(
    tmp: Path,
    requests: int,
    idle_seconds: float,
    log: Any,
    apis: list[str] | None = None,
    rounds: int = 1,
) -> dict[str, Any]:
    if shutil.which("callgrind_control") is None:
        raise BenchError("needs valgrind (apt-get install valgrind)")
    procs = Procs(tmp=tmp / "procs", keep_tmp=True)
    procs.tmp.mkdir()
    try:
        up_port = procs.start_upstream(events=LONG, cpu=None, max_seconds=7200)
        env = {**procs.gateway_env("sqlite", redis=False), **CHILD_ENV}
        key = procs.setup_gateway(env, up_port)
        port = free_port()
        out = tmp / "gateway.cg"
        # One worker: uvicorn serves in the process valgrind started (no children to trace).
        cmd = [*CALLGRIND, f"--callgrind-out-file={out}", *serve_command("127.0.0.1", port, 1, [])]
        proc = procs.spawn("gateway", cmd, env=env)
        cg = _Callgrind(proc.pid, out)
        wait_http(f"http://127.0.0.1:{port}/healthz", proc, procs, "gateway", timeout=1800)
        targets = {
            api: loadgen.Target(
                "127.0.0.1", port, APIS[api][1], APIS[api][0], key, model=APIS[api][2]
            )
            for api in apis or GATEWAY_APIS.split(",")
        }
        cells = [("json", False, SHORT), ("stream", True, SHORT), ("stream_long", True, LONG)]
        for target in targets.values():  # warm-up: lazy imports, caches, connections
            for _, stream, tokens in cells:
                _load(target, stream, tokens, 3)
        log("gateway: warmed up")
        cg.zero()
        time.sleep(idle_seconds)
        idle = cg.dump()
        idle_rate = idle / idle_seconds
        log(f"gateway idle: {idle_rate:,.0f} instructions/s")
        # Rounds, and within a round each cell for every API back to back: a window's count
        # includes what the worker's loop and threads do per second of wall time, which the
        # machine's load stretches, so each figure is the least of its rounds.
        found: dict[str, dict[str, list[dict[str, Any]]]] = {a: {} for a in targets}
        for _ in range(rounds):
            for cell, stream, tokens in cells:
                for api, target in targets.items():
                    cg.zero()
                    seconds = _load(target, stream, tokens, requests)
                    count = cg.dump()
                    net = count - idle_rate * seconds
                    found[api].setdefault(cell, []).append(
                        {
                            "raw": count,
                            "seconds": round(seconds, 2),
                            "per_request": round(net / requests),
                        }
                    )
                    log(
                        f"gateway {api} {cell}: {net / requests:,.0f} per request ({seconds:.1f} s)"
                    )
        rows = []
        for api, windows in found.items():
            row: dict[str, Any] = {"api": api, "requests": requests}
            for cell, runs in windows.items():
                row[cell] = {**min(runs, key=lambda w: w["per_request"]), "rounds": runs}
            row["per_event"] = round(
                (row["stream_long"]["per_request"] - row["stream"]["per_request"]) / (LONG - SHORT),
                1,
            )
            rows.append(row)
        return {"idle_per_second": round(idle_rate), "idle_seconds": idle_seconds, "rows": rows}
    finally:
        procs.close()


# --- run -------------------------------------------------------------------------------------


def _meta() -> dict[str, Any]:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    valgrind = subprocess.run(
        ["valgrind", "--version"], capture_output=True, text=True, check=False
    )
    return {
        "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git("rev-parse", "--short", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "python": sys.version.split()[0],
        "valgrind": valgrind.stdout.strip(),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", default="translators,gateway")
    parser.add_argument("--streams", type=int, default=20, help="translator streams per run")
    parser.add_argument("--requests", type=int, default=20, help="gateway requests per window")
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1, help="gateway windows per figure (least)")
    parser.add_argument(
        "--apis",
        default=GATEWAY_APIS,
        metavar="A,B",
        help=f"the gateway phase's pair, base first (of {', '.join(APIS)})",
    )
    parser.add_argument("--out", default=None)
    parser.add_argument("--update-readme", action="store_true")
    parser.add_argument("--readme-from", default=None, metavar="DIR")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.readme_from:
        instr_report.update_readme(Path(args.readme_from))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("bench.instructions needs valgrind (apt-get install valgrind)")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or REPO / "bench" / "results" / f"instructions-{stamp}")
    out.mkdir(parents=True, exist_ok=True)
    phases = args.phases.split(",")
    results: dict[str, Any] = {"meta": _meta(), "short": SHORT, "long": LONG}

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    with tempfile.TemporaryDirectory(prefix="ezat-instr-") as tmp:
        if "translators" in phases:
            results["translators"] = translators(Path(tmp), args.streams, list(SHAPES), log)
        if "gateway" in phases:
            results["gateway"] = gateway(
                Path(tmp), args.requests, args.idle_seconds, log, args.apis.split(","), args.rounds
            )
    (out / "instructions.json").write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    (out / "report.md").write_text(instr_report.render(results))
    print(instr_report.render(results))
    if args.update_readme:
        instr_report.update_readme(out)


if __name__ == "__main__":
    main()
