"""Redis CPU and system calls per request of the limiter alone, coalesced writes on and off.

    python -m bench.limiter [--requests N] [--rounds R] [--concurrency 1,16]

What one request costs Redis: each request makes the two limiter calls a gateway request makes
(admission with a hold, a key cap and a deployment slot; settlement releasing the slot), through
`RedisLimiter` and its lean client, against a private `redis-server` (no persistence) started
for the run. C workers run requests back to back. Per cell it reports Redis's CPU per request
(/proc/<pid>/schedstat: ns on CPU, not 10 ms ticks), Redis's read and write system calls per
request (/proc/<pid>/io syscr, syscw), the client's transport writes per request, and the
client process's CPU per request. Both modes (`coalesce` off = one write per command, the
client before issue 35; on = one write per loop turn) run in every round, interleaved, so a
shared machine's load lands on both alike. Needs Django settings (the limiter reads its
timings from them); no database: the money source is a fixed balance.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.procs import free_port


class _FixedMoney:
    """A balance and a spend nobody reaches: the benchmark measures admission, not refusals."""

    async def org_available(self, org_id: int) -> int:
        return 10**18

    async def key_month_spent(self, key_id: int, start: datetime, end: datetime) -> int:
        return 0

    def close(self) -> None:
        pass


def _cpu_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def _syscalls(pid: int) -> int:
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines() if line)
    return int(io["syscr"]) + int(io["syscw"])


def _start_redis(tmp: str) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("needs `redis-server` on PATH")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", tmp],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not answer")


async def _cell(url: str, redis_pid: int, coalesce: bool, concurrency: int, n: int) -> dict:
    from gateway.limits.base import AdmitRequest
    from gateway.limits.redis import RedisLimiter

    limiter = RedisLimiter(url, prefix=f"bench-{uuid.uuid4().hex[:8]}:", money=_FixedMoney())
    per_worker = max(1, n // concurrency)

    def request(worker: int) -> AdmitRequest:
        return AdmitRequest(
            request_id=uuid.uuid4().hex,
            key_id=worker + 1,
            org_id=1,
            rpm_limit=10**9,
            spend_cap_nano=10**15,
            hold_nano=1_000_000,
            candidates=((1, 10_000),),
        )

    async def one(worker: int) -> None:
        req = request(worker)
        admitted = await limiter.admit(req)
        await limiter.settle(
            req.request_id,
            key_id=req.key_id,
            org_id=1,
            hold_nano=req.hold_nano,
            cost_nano=1_234,
            deployment_id=admitted.deployment_id,
        )

    async def worker(i: int, count: int) -> None:
        for _ in range(count):
            await one(i)

    try:
        await asyncio.gather(*(worker(i, 20) for i in range(concurrency)))  # warm: seeds, scripts
        fast = limiter._redis().fast
        assert fast is not None, "the lean client is needed (a redis:// URL)"
        fast.coalesce = coalesce
        writes0, cpu0, sys0 = fast.writes, _cpu_ns(redis_pid), _syscalls(redis_pid)
        own0, wall0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker(i, per_worker) for i in range(concurrency)))
        wall, own = time.perf_counter() - wall0, time.process_time() - own0
        done = per_worker * concurrency
        return {
            "coalesce": coalesce,
            "concurrency": concurrency,
            "requests": done,
            "redis_cpu_us": (_cpu_ns(redis_pid) - cpu0) / done / 1000,
            "redis_syscalls": (_syscalls(redis_pid) - sys0) / done,
            "client_writes": (fast.writes - writes0) / done,
            "client_cpu_us": own / done * 1e6,
            "rps": done / wall,
        }
    finally:
        await limiter.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000, help="per cell")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,16")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ezat.settings")
    import django

    django.setup()
    try:
        import uvloop

        run: Any = uvloop.run
    except ImportError:
        run = asyncio.run
    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory(prefix="ezat-bench-limiter-") as tmp:
        proc, url = _start_redis(tmp)
        cells: list[dict] = []
        try:
            for _ in range(args.rounds):
                for concurrency in levels:
                    for coalesce in (False, True):
                        cells.append(
                            run(_cell(url, proc.pid, coalesce, concurrency, args.requests))
                        )
        finally:
            proc.kill()
            proc.wait()
    print(f"limiter benchmark, {args.rounds} rounds × {args.requests} requests per cell (medians)")
    print("| C | coalesced | Redis CPU µs/req | Redis syscalls/req | client writes/req "
          "| client CPU µs/req | req/s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for concurrency in levels:
        for coalesce in (False, True):
            mine = [
                c for c in cells if (c["concurrency"], c["coalesce"]) == (concurrency, coalesce)
            ]

            def med(field: str, cells: list[dict] = mine) -> float:
                return statistics.median(c[field] for c in cells)

            spread = "–".join(f"{v:.1f}" for v in sorted(c["redis_cpu_us"] for c in mine)[::2])
            print(
                f"| {concurrency} | {'on' if coalesce else 'off'} | {med('redis_cpu_us'):.1f} "
                f"({spread}) | {med('redis_syscalls'):.2f} | {med('client_writes'):.2f} "
                f"| {med('client_cpu_us'):.1f} | {med('rps'):.0f} |"
            )


if __name__ == "__main__":
    main()
