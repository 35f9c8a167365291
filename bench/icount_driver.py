"""The workload `bench.icount` counts: the gateway's ASGI app driven in this one process.

    python -m bench.icount_driver --key K --requests R --short S --long L [--callgrind]

No HTTP server: each request is a synthetic ASGI scope (the bytes `bench.loadgen` sends,
parsed once) handed to `ezat.asgi.application`, whose handlers call the fake upstream (another
process, `bench.fake_upstream`, not counted) over loopback with the gateway's own client. The
ASGI server's share (uvicorn's parsing and writing) is therefore not counted; everything from
the gateway's first line to its last `send` is, and so are the database writes of the request
(its usage record, its request-log row) on whichever thread does them.

Order of a run (under `valgrind --tool=callgrind --instr-atstart=no --dump-before=getppid`):
Django's start-up and a warm-up of every cell run uninstrumented (fast: no counting), then
`--callgrind` switches instrumentation on (`callgrind_control -i on`), and from there every
`mark()` closes one section (one dump). Per cell: a collection (its own section, discarded:
each cell starts from an empty young generation, whatever ran before) and R requests,
followed by a drain of the request-log writer, so that a cell's section holds its requests'
deferred work and nothing of another cell's. The lifespan is not run (no reconcile loop, no
spool replay: periodic work that depends on the clock, not on the requests); the start-up's
garbage-collector tuning is.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench import loadgen
from bench.procs import GPT_MODEL, MODEL

WARM_UP = 3  # requests per cell before counting (lazy imports, caches, pooled connections)


@dataclass(frozen=True)
class ApiPath:
    """One API path the guard counts."""

    name: str
    api: str  # bench.loadgen's: anthropic, openai, responses
    url: str
    model: str
    json: bool = True  # JSON is counted too (every path but the Responses one, issue 35)


PATHS = (
    ApiPath("messages", "anthropic", "/v1/messages", MODEL),
    ApiPath("chat", "openai", "/openai/v1/chat/completions", MODEL),
    ApiPath("relay", "openai", "/openai/v1/chat/completions", GPT_MODEL),
    ApiPath("responses", "responses", "/openai/v1/responses", MODEL),
)


@dataclass(frozen=True)
class Cell:
    """R requests of one kind: a path, JSON or a stream of `tokens` events."""

    path: ApiPath
    stream: bool
    tokens: int
    scope: dict[str, Any]
    body: bytes

    @property
    def name(self) -> str:
        kind = f"stream{self.tokens}" if self.stream else "json"
        return f"{self.path.name}/{kind}"


def cells(key: str, short: int, long: int) -> list[Cell]:
    """Every counted cell, in the order they run: per path JSON, short stream, long stream."""
    out = []
    for path in PATHS:
        target = loadgen.Target("127.0.0.1", 80, path.url, path.api, key, model=path.model)
        kinds = [(False, short)] if path.json else []
        for stream, tokens in [*kinds, (True, short), (True, long)]:
            raw = loadgen.build_request(target, stream=stream, prompt_tokens=100, max_tokens=tokens)
            head, body = raw.split(b"\r\n\r\n", 1)
            headers = [
                (name.strip().lower(), value.strip())
                for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
            ]
            scope = {
                "type": "http",
                "asgi": {"version": "3.0", "spec_version": "2.3"},
                "http_version": "1.1",
                "method": "POST",
                "scheme": "http",
                "path": path.url,
                "raw_path": path.url.encode(),
                "query_string": b"",
                "root_path": "",
                "headers": headers,
                "client": ("127.0.0.1", 50000),
                "server": ("127.0.0.1", 80),
            }
            out.append(Cell(path, stream, tokens, scope, body))
    return out


def mark() -> None:
    """A section boundary: callgrind runs with `--dump-before=getppid`, so each call closes one
    dump (one section's instruction count) and starts the next."""
    os.getppid()


async def call(app: Any, cell: Cell) -> bytes:
    """One request through the ASGI app; the whole response body, checked to be complete."""
    delivered = False
    finished = asyncio.Event()
    status = 0
    body: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": cell.body, "more_body": False}
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            body.append(message.get("body", b""))

    await app(cell.scope, receive, send)
    finished.set()
    data = b"".join(body)
    # A stream must have reached its end (`message_stop`, `[DONE]`, `response.completed`).
    if status != 200 or (
        cell.stream and not any(end in data for end in loadgen.END[cell.path.api])
    ):
        raise SystemExit(f"{cell.name}: HTTP {status}, body {data[:600]!r}")
    return data


def instrumentation_on() -> None:
    """`callgrind_control -i on` for this process; polled rather than waited on, so valgrind's
    scheduler keeps running Python code and answers vgdb without needing ptrace."""
    proc = subprocess.Popen(
        ["callgrind_control", "-i", "on", str(os.getpid())],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("callgrind_control -i on did not answer within 120 s")
        sum(range(1000))
    output = proc.stdout.read() if proc.stdout else b""
    if proc.returncode != 0:
        raise SystemExit(f"callgrind_control -i on failed: {output!r}")


def run(args: argparse.Namespace) -> None:
    import uvloop

    from billing.recorder import writer
    from ezat.asgi import application
    from gateway.runtime import pin_mmap_threshold, tune_garbage_collector

    todo = cells(args.key, args.short, args.long)
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    tune_garbage_collector()
    pin_mmap_threshold()

    async def warm_up() -> None:
        for cell in todo:
            for _ in range(WARM_UP):
                await call(application, cell)
        await writer.drain_log()

    async def counted(cell: Cell) -> None:
        for _ in range(args.requests):
            await call(application, cell)
        await writer.drain_log()

    loop.run_until_complete(warm_up())
    if args.callgrind:
        instrumentation_on()
    gc.collect()
    mark()  # section 1: switching instrumentation on
    for cell in todo:
        gc.collect()
        mark()  # a collection: its own section, discarded
        loop.run_until_complete(counted(cell))
        mark()
    sys.stdout.write(",".join(cell.name for cell in todo) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--key", required=True, help="the gateway API key the requests carry")
    parser.add_argument("--requests", type=int, required=True, help="counted requests per cell")
    parser.add_argument("--short", type=int, required=True, help="events of the short stream")
    parser.add_argument("--long", type=int, required=True, help="events of the long stream")
    parser.add_argument("--callgrind", action="store_true", help="switch instrumentation on")
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
