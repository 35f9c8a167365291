"""Load generator: closed-loop concurrency and "open streams", loopback only.

Raw asyncio Protocol + httptools rather than aiohttp: on a 2-core machine the load generator
shares CPUs with what it measures, so each request should cost it as little as possible. Request
bytes are built once per run; responses are never JSON-parsed — markers are found with `find`.

Every run is bounded by a request count AND a wall-clock deadline, and every request by a timeout.

    python -m bench.loadgen --url http://127.0.0.1:P/v1/messages [--stream] [--api openai]
        [--concurrency C] [--requests N] [--duration S] [--prompt-tokens T] [--key K]
    python -m bench.loadgen --url … --open-streams 1000 [--timeout S]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httptools
import orjson

MODEL = "anthropic/claude-sonnet-5-5"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_WORDS = (
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
)
# First content in a stream. Anthropic: the first text delta event. OpenAI: the first chunk whose
# delta carries non-empty content (the role-only first chunk has `"content":""`).
_ANTHROPIC_FIRST = re.compile(rb"event: content_block_delta")
_OPENAI_FIRST = re.compile(rb'"(?:content|reasoning_content)":"[^"]')
# Responses API: the first text delta event (response.created/in_progress carry no content).
_RESPONSES_FIRST = re.compile(rb"event: response\.output_text\.delta")
_FIRST = {"anthropic": _ANTHROPIC_FIRST, "openai": _OPENAI_FIRST, "responses": _RESPONSES_FIRST}
# The end of a stream; a Responses stream cut at max_output_tokens ends with response.incomplete.
END = {
    "anthropic": (b"event: message_stop",),
    "openai": (b"[DONE]",),
    "responses": (b"event: response.completed", b"event: response.incomplete"),
}
_TAIL = 64  # bytes kept across body chunks so a marker split between reads is still found


def prompt_text(tokens: int) -> str:
    """About `tokens` tokens of text at ≈4 characters per token."""
    target = tokens * 4
    parts: list[str] = []
    size = 0
    i = 0
    while size < target:
        word = _WORDS[i % len(_WORDS)] + str(i % 97)
        parts.append(word)
        size += len(word) + 1
        i += 1
    return " ".join(parts)[:target]


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    path: str
    # "anthropic" (x-api-key, Messages events), "openai" (Bearer, chunks + [DONE]) or
    # "responses" (Bearer, Responses events ending with response.completed)
    api: str
    key: str = ""
    # Extra request header lines, each ending in CRLF (a peer's routing headers).
    headers: str = ""
    # The model asked for (bench.run's GPT targets ask for the bench catalog's OpenAI-kind one).
    model: str = MODEL

    @classmethod
    def from_url(cls, url: str, api: str = "anthropic", key: str = "") -> Target:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname not in _LOOPBACK:
            raise ValueError(f"loopback http URLs only, got {url!r}")
        return cls(parts.hostname, parts.port or 80, parts.path or "/", api, key)


def build_request(
    target: Target, *, stream: bool, prompt_tokens: int, max_tokens: int = 64
) -> bytes:
    if target.api == "responses":
        # store: false, as stateless clients (Codex, the Agents SDK with encrypted reasoning)
        # send it: the comparison with chat completions is the translation, not the storage.
        payload = {
            "model": target.model,
            "max_output_tokens": max_tokens,
            "input": prompt_text(prompt_tokens),
            "stream": stream,
            "store": False,
        }
    else:
        payload = {
            "model": target.model,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt_text(prompt_tokens)}],
            "stream": stream,
        }
    body = orjson.dumps(payload)
    if target.api in ("openai", "responses"):
        auth = f"authorization: Bearer {target.key}\r\n"
    else:
        auth = f"x-api-key: {target.key}\r\nanthropic-version: 2023-06-01\r\n"
    head = (
        f"POST {target.path} HTTP/1.1\r\nhost: {target.host}:{target.port}\r\n"
        f"content-type: application/json\r\n{auth}{target.headers}"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


@dataclass
class Outcome:
    ok: bool
    latency: float
    ttft: float | None
    status: int
    error: str = ""


class _Client(asyncio.Protocol):
    """One keep-alive connection; one request in flight at a time."""

    def __init__(self, stream: bool, api: str) -> None:
        self.stream = stream
        self.first_re = _FIRST[api]
        self.end_markers = END[api]
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[Outcome] | None = None
        self.lost = False
        self._reset(0.0)

    def _reset(self, started: float) -> None:
        self.started = started
        self.ttft: float | None = None
        self.tail = b""
        self.ended = False
        self.stream_error = False
        self.error_body = bytearray()
        self.nbytes = 0

    def send(self, data: bytes, stream: bool) -> asyncio.Future[Outcome]:
        assert self.transport is not None
        self.stream = stream
        self._reset(time.perf_counter())
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self.done

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.done is not None and not self.done.done():
            self.done.set_result(
                Outcome(False, time.perf_counter() - self.started, None, 0, "connection lost")
            )

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.done is not None and not self.done.done():
                self.done.set_result(Outcome(False, 0.0, None, 0, f"bad HTTP: {exc}"))
            if self.transport is not None:
                self.transport.close()

    def on_body(self, body: bytes) -> None:
        status = self.parser.get_status_code()
        self.nbytes += len(body)
        if status != 200:
            if len(self.error_body) < 2000:
                self.error_body += body[:2000]
            return
        if not self.stream:
            return
        window = self.tail + body
        if self.ttft is None and self.first_re.search(window):
            self.ttft = time.perf_counter() - self.started
        if not self.ended and any(marker in window for marker in self.end_markers):
            self.ended = True
        if not self.stream_error and b"event: error" in window:
            self.stream_error = True
            self.error_body += window[-2000:]
        self.tail = window[-_TAIL:]

    def on_message_complete(self) -> None:
        latency = time.perf_counter() - self.started
        status = self.parser.get_status_code()
        if status != 200:
            outcome = Outcome(
                False, latency, None, status, self.error_body.decode(errors="replace")
            )
        elif self.stream and (self.stream_error or not self.ended or self.ttft is None):
            why = "error event" if self.stream_error else "stream ended early or had no content"
            detail = self.error_body.decode(errors="replace") or self.tail.decode(errors="replace")
            outcome = Outcome(False, latency, self.ttft, status, f"{why}: {detail}")
        elif not self.stream and self.nbytes == 0:
            outcome = Outcome(False, latency, None, status, "empty body")
        else:
            outcome = Outcome(True, latency, self.ttft, status)
        if not self.parser.should_keep_alive() and self.transport is not None:
            self.transport.close()
            self.lost = True
        if self.done is not None and not self.done.done():
            self.done.set_result(outcome)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no data."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


@dataclass
class LoadResult:
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list, repr=False)
    ttfts: list[float] = field(default_factory=list, repr=False)
    first_error: str = ""
    error_kinds: dict[str, int] = field(default_factory=dict)

    def record(self, outcome: Outcome) -> None:
        self.requests += 1
        if outcome.ok:
            self.latencies.append(outcome.latency)
            if outcome.ttft is not None:
                self.ttfts.append(outcome.ttft)
            return
        self.errors += 1
        kind = f"{outcome.status}" if outcome.status else outcome.error[:40]
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1
        if not self.first_error:
            self.first_error = f"status {outcome.status}: {outcome.error[:1500]}"

    def summary(self) -> dict[str, object]:
        def ms(v: float | None) -> float | None:
            return None if v is None else round(v * 1000, 3)

        ok = len(self.latencies)
        return {
            "requests": self.requests,
            "errors": self.errors,
            "seconds": round(self.seconds, 3),
            "rps": round(ok / self.seconds, 1) if self.seconds > 0 else 0.0,
            "p50_ms": ms(percentile(self.latencies, 50)),
            "p99_ms": ms(percentile(self.latencies, 99)),
            "ttft_p50_ms": ms(percentile(self.ttfts, 50)),
            "ttft_p99_ms": ms(percentile(self.ttfts, 99)),
            "first_error": self.first_error,
            "error_kinds": dict(self.error_kinds),
        }


async def _connect(target: Target, stream: bool) -> _Client:
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_connection(
        lambda: _Client(stream, target.api), target.host, target.port
    )
    return proto


async def _one(
    target: Target, request: bytes, stream: bool, client: _Client | None, timeout: float
) -> tuple[Outcome, _Client | None]:
    """One request; returns the connection for reuse, or None when it must not be reused."""
    started = time.perf_counter()
    try:
        if client is None or client.lost:
            client = await asyncio.wait_for(_connect(target, stream), timeout)
        outcome = await asyncio.wait_for(client.send(request, stream), timeout)
    except (TimeoutError, OSError) as exc:
        if client is not None and client.transport is not None:
            client.transport.close()
        kind = "timeout" if isinstance(exc, TimeoutError) else f"connect: {exc}"
        return Outcome(False, time.perf_counter() - started, None, 0, kind), None
    return outcome, (None if client.lost else client)


def _take(pool: list[_Client] | None) -> _Client | None:
    while pool:
        client = pool.pop()
        if not client.lost:
            return client
    return None


def close_pool(pool: list[_Client]) -> None:
    while pool:
        client = pool.pop()
        if client.transport is not None:
            client.transport.close()


async def run_closed(
    target: Target,
    *,
    stream: bool,
    concurrency: int,
    requests: int,
    duration: float,
    prompt_tokens: int = 1000,
    max_tokens: int = 64,
    timeout: float = 30.0,
    request: bytes | None = None,
    on_done: Callable[[int], None] | None = None,
    pool: list[_Client] | None = None,
) -> LoadResult:
    """Closed loop: `concurrency` workers, each sending its next request when the last answered.

    Stops issuing at `requests` in total or at `duration` seconds, whichever comes first. With a
    `pool`, connections are taken from it and given back (still open) at the end, so a warm-up run
    leaves the measured run warm connections; without one they are closed.
    """
    data = request or build_request(
        target, stream=stream, prompt_tokens=prompt_tokens, max_tokens=max_tokens
    )
    result = LoadResult()
    issued = 0
    deadline = time.perf_counter() + duration

    async def worker() -> None:
        nonlocal issued
        client = _take(pool)
        while issued < requests and time.perf_counter() < deadline:
            issued += 1
            outcome, client = await _one(target, data, stream, client, timeout)
            result.record(outcome)
            if on_done is not None:
                on_done(result.requests)
        if client is None or client.transport is None:
            return
        if pool is not None and not client.lost:
            pool.append(client)
        else:
            client.transport.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.seconds = time.perf_counter() - started
    return result


async def run_open_streams(
    target: Target,
    *,
    streams: int,
    prompt_tokens: int = 1000,
    max_tokens: int = 64,
    timeout: float = 60.0,
    connect_batch: int = 200,
) -> LoadResult:
    """`streams` concurrent streaming requests, each on its own connection, all held open at once.

    Connections are opened first (in batches, so the listen backlog is not overrun), then every
    request is written in one go; TTFT is measured from each request's own write.
    """
    data = build_request(target, stream=True, prompt_tokens=prompt_tokens, max_tokens=max_tokens)
    result = LoadResult()
    clients: list[_Client] = []
    deadline = time.perf_counter() + timeout
    try:
        for start in range(0, streams, connect_batch):
            n = min(connect_batch, streams - start)
            opened = await asyncio.gather(
                *(asyncio.wait_for(_connect(target, True), timeout) for _ in range(n)),
                return_exceptions=True,
            )
            for item in opened:
                if isinstance(item, BaseException):
                    result.record(Outcome(False, 0.0, None, 0, f"connect: {item!r}"))
                else:
                    clients.append(item)
        started = time.perf_counter()
        futures = [c.send(data, True) for c in clients]
        remaining = max(0.1, deadline - time.perf_counter())
        done, pending = await asyncio.wait(futures, timeout=remaining)
        for fut in done:
            result.record(fut.result())
        for _ in pending:
            result.record(Outcome(False, timeout, None, 0, "timeout"))
        result.seconds = time.perf_counter() - started
    finally:
        for c in clients:
            if c.transport is not None:
                c.transport.close()
    return result


@dataclass
class SustainedResult:
    """Streams held open at a steady level: every stream, and those started at that level."""

    all: LoadResult
    steady: LoadResult  # started while at least 90 % of the target level was open
    max_open: int
    arrivals_per_s: float


async def run_sustained_streams(
    target: Target,
    *,
    level: int,
    stream_seconds: float,
    duration: float,
    prompt_tokens: int = 1000,
    max_tokens: int = 64,
    timeout: float = 60.0,
) -> SustainedResult:
    """`level` streams open at once, held there: streams start at a steady rate of
    level / stream_seconds per second (each on a new connection) for `duration` seconds, so once
    the first ones have run their course, every new stream starts while ~`level` others are open
    (the upstream must pace a stream to last `stream_seconds`). TTFT from each request's write.
    """
    data = build_request(target, stream=True, prompt_tokens=prompt_tokens, max_tokens=max_tokens)
    rate = level / stream_seconds
    everything, steady = LoadResult(), LoadResult()
    state = {"open": 0, "max": 0}
    loop = asyncio.get_running_loop()

    async def one() -> None:
        state["open"] += 1
        state["max"] = max(state["max"], state["open"])
        at_level = state["open"] >= 0.9 * level
        try:
            outcome, client = await _one(target, data, True, None, timeout)  # a new connection
        finally:
            state["open"] -= 1
        if client is not None and client.transport is not None:
            client.transport.close()
        everything.record(outcome)
        if at_level:
            steady.record(outcome)

    started = time.perf_counter()
    tasks: list[asyncio.Task[None]] = []
    for i in range(int(duration * rate)):
        delay = started + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(loop.create_task(one()))
    await asyncio.gather(*tasks)
    everything.seconds = steady.seconds = time.perf_counter() - started
    return SustainedResult(everything, steady, state["max"], round(rate, 1))


def install_fast_loop() -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="EZAT bench load generator (loopback only)")
    parser.add_argument("--url", required=True)
    parser.add_argument("--api", choices=("anthropic", "openai", "responses"), default="anthropic")
    parser.add_argument("--key", default="sk-bench")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--open-streams", type=int, default=0, metavar="N")
    args = parser.parse_args(argv)
    try:
        target = Target.from_url(args.url, args.api, args.key)
    except ValueError as exc:
        sys.exit(str(exc))
    from bench.fake_upstream import raise_nofile_limit

    raise_nofile_limit()
    install_fast_loop()
    if args.open_streams:
        coro = run_open_streams(
            target,
            streams=args.open_streams,
            prompt_tokens=args.prompt_tokens,
            max_tokens=args.max_tokens,
            timeout=args.timeout,
        )
    else:
        coro = run_closed(
            target,
            stream=args.stream,
            concurrency=args.concurrency,
            requests=args.requests,
            duration=args.duration,
            prompt_tokens=args.prompt_tokens,
            max_tokens=args.max_tokens,
            timeout=args.timeout,
        )
    result = asyncio.run(coro)
    print(orjson.dumps(result.summary(), option=orjson.OPT_INDENT_2).decode())
    # For scripts: a run with errors exits non-zero.
    sys.exit(1 if result.errors else 0)


if __name__ == "__main__":
    main()
