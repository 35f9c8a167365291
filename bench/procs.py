"""Processes for a benchmark run: the fake upstream, the gateway (uvicorn or granian) and its setup.

Everything started here is a child of the harness, tracked by its Popen handle, bounded in
lifetime and stopped by `Procs.close()` — nothing is found or killed by name.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
MODEL = "anthropic/claude-sonnet-5-5"
UPSTREAM_KEY = "sk-bench"
# Issue 30: a GPT-like catalog model served by an `openai`-kind deployment on the same fake
# upstream (its /v1/chat/completions), so the OpenAI-kind paths are measured beside the Claude
# one. Made-up prices; thinking by native reasoning effort, as OpenAI's reasoning models.
GPT_MODEL = "bench/gpt-bench"
GPT_SERVER_MODEL = "gpt-bench"
GPT_CATALOG = {
    "models": [
        {
            "id": GPT_MODEL,
            "name": "GPT Bench (made-up prices)",
            "aliases": [],
            "contextWindow": 400000,
            "maxOutputTokens": 128000,
            "capabilities": {
                "sampling": True,
                "promptCaching": True,
                "vision": True,
                "pdf": False,
                "tools": True,
                "structuredOutputs": True,
                "thinking": "effort",
                "thinkingCanBeDisabled": True,
                "forcedToolChoice": True,
                "reasoningEfforts": ["none", "low", "medium", "high"],
                "defaultEffort": "medium",
            },
            "pricing": {
                "input": "1.25",
                "output": "10",
                "cacheRead": "0.125",
                "cacheWrite5m": "1.25",
                "cacheWrite1h": "1.25",
            },
            "source": {"url": "https://example.invalid/bench-prices", "checked": "2026-12-07"},
        }
    ]
}


# Procs.manage_many's script: each command's output, as JSON on one marked line.
_MANAGE_MANY = """
import io, json, os
from django.core.management import call_command
outs = []
for args in json.loads(os.environ["EZAT_BENCH_COMMANDS"]):
    out = io.StringIO()
    call_command(*args, stdout=out)
    outs.append(out.getvalue())
print("EZAT_BENCH_JSON" + json.dumps(outs))
"""


class BenchError(RuntimeError):
    """A setup step failed; the message says which and shows its output."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pinned(cpu: int | None):  # type: ignore[no-untyped-def]
    """preexec_fn pinning a child (and every thread/process it starts) to one CPU."""
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def pin(pid: int, cpu: int | None) -> None:
    if cpu is not None:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, {cpu})


def pin_threads(pid: int, cpu: int | None) -> None:
    """Every thread of pid onto one CPU (sched_setaffinity on a pid moves its main thread
    only); threads it starts later inherit it."""
    if cpu is None:
        return
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(task), {cpu})


# --- /proc accounting ---------------------------------------------------------------------------
def process_tree(pid: int) -> list[int]:
    """pid and its descendants (granian runs the app in a worker child; uvicorn in pid itself)."""
    found = [pid]
    i = 0
    while i < len(found):
        task_dir = Path(f"/proc/{found[i]}/task")
        with contextlib.suppress(OSError):
            for task in task_dir.iterdir():
                with contextlib.suppress(OSError):
                    found += [int(c) for c in (task / "children").read_text().split()]
        i += 1
    return found


def cpu_seconds(pid: int) -> float:
    """utime + stime of pid and its descendants, all threads included."""
    total = 0
    for p in process_tree(pid):
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{p}/stat").read_text()
            # Fields after the parenthesised command name; utime, stime are fields 14 and 15.
            fields = stat.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def all_process_cpu() -> dict[int, int]:
    """utime + stime in clock ticks of every process on the machine (to see who else is busy)."""
    out: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
                out[int(entry.name)] = int(fields[11]) + int(fields[12])
    return out


class Meter:
    """CPU over one measured window: the server under test, the upstream, the gateway's database
    and Redis, this harness, and every other process (other people's work on a shared machine)."""

    def __init__(self, procs: Procs, server_pid: int) -> None:
        self.procs = procs
        self.server_pid = server_pid
        self.start()

    def start(self) -> None:
        self.services = self.procs.service_pids()
        self.table = all_process_cpu()
        self.t0 = time.perf_counter()

    def stop(self) -> dict[str, float]:
        table = all_process_cpu()
        elapsed = time.perf_counter() - self.t0
        services = self.services | self.procs.service_pids()
        server = set(process_tree(self.server_pid))
        upstream = {self.procs.upstream_pid} - server
        harness = {os.getpid()}

        def used(pids: set[int] | list[int]) -> float:
            # A process born inside the window counts from zero.
            ticks = sum(max(0, table.get(p, 0) - self.table.get(p, 0)) for p in pids)
            return ticks / CLK_TCK

        ours = server | upstream | harness | services
        return {
            "elapsed": elapsed,
            "server": used(server),
            "upstream": used(upstream),
            "services": used(services - server),
            "harness": used(harness),
            "other": used([p for p in table if p not in ours]),
        }


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) summed over the process tree, in kB."""
    out = {"rss_kb": 0, "hwm_kb": 0}
    for p in process_tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    out["rss_kb"] += int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    out["hwm_kb"] += int(line.split()[1])
    return out


# --- HTTP helpers (setup only; the load itself goes through bench.loadgen) --------------------
def http(
    method: str, url: str, body: dict | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    data = orjson.dumps(body) if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@dataclass
class Procs:
    """The child processes of one run and the temp dir they live in."""

    keep_tmp: bool = False
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ezat-bench-")))
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    cleanups: list[tuple[str, object]] = field(default_factory=list)
    upstream_pid: int = 0
    pg_db: str = ""
    redis_pid: int = 0

    def spawn(
        self,
        name: str,
        cmd: list[str],
        *,
        env: dict[str, str] | None = None,
        cpu: int | None = None,
    ) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"{name}.log").open("wb")
        # Output to a file, never a pipe nobody reads: a full pipe would stall the server.
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_pinned(cpu),
            start_new_session=True,
        )
        self.children.append(proc)
        return proc

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.tmp / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            # SIGINT first: uvicorn and granian shut down cleanly (lifespan) on it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def close(self) -> None:
        for proc in reversed(self.children):
            self.stop(proc)
        for kind, arg in self.cleanups:
            if kind == "drop_pg":
                with contextlib.suppress(Exception):
                    _drop_pg(str(arg))
        if not self.keep_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- fake upstream ---------------------------------------------------------------------------
    def start_upstream(self, *, events: int, cpu: int | None, max_seconds: float) -> int:
        port = free_port()
        cmd = [
            sys.executable,
            "-m",
            "bench.fake_upstream",
            "--port",
            str(port),
            "--events",
            str(events),
            "--api-key",
            UPSTREAM_KEY,
            "--max-seconds",
            str(max_seconds),
        ]
        proc = self.spawn("upstream", cmd, cpu=cpu)
        wait_http(f"http://127.0.0.1:{port}/stats", proc, self, "upstream", timeout=15)
        self.upstream_pid = proc.pid
        return port

    # -- gateway ---------------------------------------------------------------------------------
    def gateway_env(self, db: str, redis: bool) -> dict[str, str]:
        env = dict(os.environ)
        # Explicit values for everything the repo's .env could otherwise supply.
        env.update(
            SECRET_KEY=secrets.token_urlsafe(48),
            DEBUG="0",
            REDIS_URL=self.start_redis() if redis else "",
            EZAT_SQLITE_PATH=str(self.tmp / "bench.sqlite3"),
            DJANGO_SETTINGS_MODULE="ezat.settings",
            PYTHONUNBUFFERED="1",
        )
        if db == "sqlite":
            env["DATABASE_URL"] = f"sqlite:///{self.tmp / 'bench.sqlite3'}"
        else:
            name = f"ezat_bench_{os.getpid()}_{secrets.token_hex(3)}"
            _create_pg(name)
            self.cleanups.append(("drop_pg", name))
            self.pg_db = name
            env["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{name}"
        return env

    def start_redis(self) -> str:
        """A private redis-server for this run (no persistence): the run's Redis CPU is its own,
        stale counters of an earlier run cannot land on this run's orgs, and a Redis holding
        someone's data is never touched."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise BenchError("--redis needs `redis-server` on PATH (apt-get install redis-server)")
        port = free_port()
        proc = self.spawn(
            "redis",
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--dir", str(self.tmp)],
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise BenchError(f"redis-server exited:\n{self.log_tail('redis')}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", port), timeout=1) as sock,
            ):
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    break
            if time.monotonic() > deadline:
                raise BenchError(f"redis-server did not answer:\n{self.log_tail('redis')}")
            time.sleep(0.05)
        self.redis_pid = proc.pid
        return f"redis://127.0.0.1:{port}/0"

    def service_pids(self) -> set[int]:
        """Postgres backends serving this run's database, and the run's own Redis server."""
        pids = {self.redis_pid} if self.redis_pid else set()
        if self.pg_db:
            with contextlib.suppress(Exception), _pg_admin() as conn:
                rows = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.pg_db,)
                ).fetchall()
                pids |= {int(r[0]) for r in rows}
        return pids

    def setup_gateway(self, env: dict[str, str], upstream_port: int) -> str:
        """migrate, load the catalog, create org + key + deployments; returns the API key.

        Two deployments of the one fake upstream: `fake` (anthropic kind, every Claude model)
        and `fake-gpt` (openai kind, base URL `…/v1`, Bearer key) serving GPT_MODEL.
        All in one Django process: each `manage.py` start costs about a second of CPU, which on
        a loaded machine was a good part of the quick run."""
        catalog = self.tmp / "gpt_bench_catalog.json"
        catalog.write_bytes(orjson.dumps(GPT_CATALOG))
        model_ids = orjson.dumps({GPT_MODEL: GPT_SERVER_MODEL}).decode()
        outs = self.manage_many(
            env,
            [
                ["migrate", "--noinput"],
                ["load_catalog"],
                ["create_org", "Bench", "--credit-usd", "1000000"],
                ["create_key", "Bench", "--rpm", "100000000"],
                ["add_deployment", "fake", "--url", f"http://127.0.0.1:{upstream_port}",
                 "--api-key", UPSTREAM_KEY, "--max-concurrency", "100000"],
                ["load_catalog", "--file", str(catalog)],
                ["add_deployment", "fake-gpt", "--kind", "openai",
                 "--url", f"http://127.0.0.1:{upstream_port}/v1", "--api-key", UPSTREAM_KEY,
                 "--model", GPT_MODEL, "--model-ids", model_ids, "--max-concurrency", "100000"],
            ],
        )  # fmt: skip
        return outs[3].strip().splitlines()[-1].strip()

    def manage_many(self, env: dict[str, str], commands: list[list[str]]) -> list[str]:
        """Management commands run one after the other in one `manage.py shell` (parsed as on
        the command line); returns each one's output."""
        payload = {**env, "EZAT_BENCH_COMMANDS": orjson.dumps(commands).decode()}
        out = self.manage(payload, "shell", "-c", _MANAGE_MANY)
        for line in out.splitlines():
            if line.startswith("EZAT_BENCH_JSON"):
                return list(orjson.loads(line[len("EZAT_BENCH_JSON") :]))
        raise BenchError(f"no result from the Django shell:\n{out[-2000:]}")

    def manage(self, env: dict[str, str], *args: str) -> str:
        cmd = [sys.executable, "manage.py", *args]
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, timeout=300, check=False)
        if done.returncode != 0:
            raise BenchError(
                f"`manage.py {' '.join(args)}` failed ({done.returncode}):\n"
                f"{done.stdout.decode(errors='replace')[-2000:]}"
                f"{done.stderr.decode(errors='replace')[-4000:]}"
            )
        return done.stdout.decode()

    def start_gateway(
        self,
        env: dict[str, str],
        server: str,
        cpu: int | None,
        workers: int = 1,
        name: str = "gateway",
    ) -> tuple[int, int]:
        """Start the server, wait for /healthz; returns (port, pid)."""
        port = free_port()
        if server == "uvicorn":
            # The production server: `python -m ezat.serve` (uvicorn with the graceful drain
            # and batched accept, ezat/graceful.py), its worker count given.
            cmd = [sys.executable, "-m", "ezat.serve", "--host", "127.0.0.1", "--port", str(port)]
            env = {**env, "EZAT_WORKERS": str(workers)}
        elif server == "granian":
            # Backlog/backpressure above the default 1,024 so 1,000 open streams plus the
            # harness's own requests are not refused by the server itself.
            cmd = [
                sys.executable,
                "-m",
                "granian",
                "--interface",
                "asgi",
                "ezat.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(workers),
                "--loop",
                "uvloop",
                "--no-access-log",
                "--backlog",
                "4096",
                "--backpressure",
                "4096",
            ]
        elif server == "daphne":
            # Twisted; no ASGI lifespan, so the gateway's start-up tuning does not run under it.
            cmd = [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "ezat.asgi:application",
            ]
        else:
            raise BenchError(f"unknown server {server!r}")
        proc = self.spawn(name, cmd, env=env, cpu=cpu)
        wait_http(f"http://127.0.0.1:{port}/healthz", proc, self, name, timeout=90)
        return port, proc.pid


def wait_http(
    url: str, proc: subprocess.Popen[bytes], procs: Procs, name: str, timeout: float
) -> None:
    """Poll url until it answers 200; fail fast (with the log) if the process died."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{name} exited with {proc.returncode}:\n{procs.log_tail(name)}")
        try:
            status, body = http("GET", url)
        except OSError as exc:
            last = str(exc)
        else:
            if status == 200:
                return
            last = f"HTTP {status}: {body[:500]!r}"
        time.sleep(0.1)
    raise BenchError(f"{name} not healthy after {timeout}s ({last}):\n{procs.log_tail(name)}")


def _pg_admin():  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True)


def _create_pg(name: str) -> None:
    try:
        with _pg_admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:
        raise BenchError(f"cannot create Postgres database {name}: {exc}") from exc


def _drop_pg(name: str) -> None:
    with _pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
