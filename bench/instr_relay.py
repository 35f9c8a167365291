"""The relay's stream reading beside the Claude path's, in instructions (issue 30 item 11).

    python -m bench.instr_relay                 # under callgrind (needs valgrind), ~1 min
    python -m bench.instr_relay --streams 3 --no-callgrind   # the workload once, no counts

Per upstream event, what a gateway worker does with the fake upstream's bytes between reading
them and writing them to the client, on each path: the Claude path's `SSEParser.feed`, the
exchange's `event.json()` and `pump_anthropic`'s loop (gateway/handlers/messages.py: absorb,
pass the raw bytes on); the relay's `RelayDecoder.feed`, `event.json()` and `_pump`'s loop
(gateway/handlers/chat_relay.py: absorb, drop the usage chunk the client did not ask for,
rename the model). Two read patterns: back to back (the stream's middle in one read, as
bench.run's `events` cells and bench.instructions get it) and paced (one event per read). The
gateway phase of `python -m bench.instructions --apis messages,openai-relay` measures the whole
worker; this one isolates the part the relay changes, so a change to it shows in seconds.

One process under `valgrind --tool=callgrind --dump-before=getppid`: a `mark()` closes each
section (the `bench.instr_translators` technique); per event = Δ between streams of 64 and
1,024 deltas ÷ 960 ÷ streams.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import orjson

from gateway.protocols.anthropic.sse import SSEParser
from gateway.providers.openai.relay import ModelRename, RelayDecoder
from gateway.usage import UsageTracker

SHORT, LONG = 64, 1024


def _dechunk(parts: list[bytes]) -> bytes:
    """The body of HTTP/1.1 chunks (what gateway/upstream.py hands the decoder)."""
    data, out, i = b"".join(parts), [], 0
    while True:
        j = data.index(b"\r\n", i)
        size = int(data[i:j], 16)
        if size == 0:
            return b"".join(out)
        out.append(data[j + 2 : j + 2 + size])
        i = j + 2 + size + 2


def streams(tokens: int) -> dict[str, bytes]:
    """The fake upstream's two streams of `tokens` text deltas (include_usage asked, as the
    relay always asks)."""
    from bench.fake_upstream import Config, Replies  # aiohttp: before the first section

    replies = Replies(Config(events=tokens))
    body = {"model": "claude", "max_tokens": tokens, "stream": True, "messages": []}
    claude = _dechunk(replies.stream_events(orjson.dumps(body)))
    body |= {"model": "gpt-bench", "stream_options": {"include_usage": True}}
    chat = _dechunk(replies.chat.stream_events(orjson.dumps(body), paced=False))
    return {"messages": claude, "openai-relay": chat}


def reads(stream: bytes, paced: bool) -> list[bytes]:
    if not paced:
        return [stream]
    return [block + b"\n\n" for block in stream.split(b"\n\n") if block]


def claude_path(parts: list[bytes]) -> int:
    """As gateway.exchange.event_batches and gateway.handlers.messages.pump_anthropic."""
    parser, tracker, size = SSEParser(), UsageTracker(), 0
    for chunk in parts:
        out: list[bytes] = []
        for event, data in [(e, e.json()) for e in parser.feed(chunk)]:
            name = event.name
            tracker.absorb(name, data)
            out.append(event.raw)
        size += len(b"".join(out))
    return size


def relay_path(parts: list[bytes]) -> int:
    """As gateway.exchange.event_batches and gateway.handlers.chat_relay._pump (a client that
    did not ask for the usage chunk)."""
    decoder, tracker, size = RelayDecoder(250), UsageTracker(), 0
    rename = ModelRename("gpt-bench", "bench/gpt-bench")
    for chunk in parts:
        out: list[bytes] = []
        for event, data in [(e, e.json()) for e in decoder.feed(chunk)]:
            name = event.name
            tracker.absorb(name, data)
            if event.raw and name != "message_delta":
                out.append(event.raw)
        size += len(rename(b"".join(out)))
    return size


PATHS: dict[str, Callable[[list[bytes]], int]] = {
    "messages": claude_path,
    "openai-relay": relay_path,
}
PATTERNS = ("back_to_back", "paced")


def mark() -> None:
    os.getppid()  # a section boundary under --dump-before=getppid


def workload(count: int) -> None:
    inputs = {k: streams(k) for k in (SHORT, LONG)}
    cells = [
        (pattern, api, k, reads(inputs[k][api], pattern == "paced"))
        for pattern in PATTERNS
        for api in PATHS
        for k in (SHORT, LONG)
    ]
    for _, api, _, parts in cells:  # first-call costs are not per-stream costs
        PATHS[api](parts)
    mark()
    for _, api, _, parts in cells:
        run = PATHS[api]
        gc.collect()
        mark()
        for _ in range(count):
            run(parts)
        mark()


def measure(count: int) -> dict[str, dict[str, float]]:
    """Per event and per stream (of 64 deltas) instructions, by read pattern and path."""
    from bench.instructions import totals  # the callgrind file reader (not in the child)

    with tempfile.TemporaryDirectory(prefix="ezat-instr-relay-") as tmp:
        out = Path(tmp) / "cg.out"
        cmd = ["valgrind", "--tool=callgrind", "--dump-instr=no", "--dump-before=getppid",
               f"--callgrind-out-file={out}", sys.executable, "-m", "bench.instr_relay",
               "--child", "--streams", str(count)]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(cmd, env=env, capture_output=True, check=True, timeout=3600)
        counts, n = [], 1
        while (path := Path(f"{out}.{n}")).exists():
            counts.append(totals(path))
            n += 1
    sections = iter(counts[2::2])  # after start-up + warm-up: (collection, streams) pairs
    results: dict[str, dict[str, float]] = {}
    for pattern in PATTERNS:
        for api in PATHS:
            short, long = next(sections), next(sections)
            results[f"{pattern} {api}"] = {
                "per_event": round((long - short) / (LONG - SHORT) / count, 1),
                "per_stream": round(short / count),
            }
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-callgrind", action="store_true")
    args = parser.parse_args(argv)
    if args.child or args.no_callgrind:
        workload(args.streams)
        return
    results = measure(args.streams)
    print("| read pattern | path | per event | per stream of 64 | ÷ Claude (event) |")
    print("|---|---|---|---|---|")
    for pattern in PATTERNS:
        base = results[f"{pattern} messages"]["per_event"]
        for api in PATHS:
            row = results[f"{pattern} {api}"]
            ratio = row["per_event"] / base if base else 0.0
            print(f"| {pattern} | {api} | {row['per_event']:,.0f} | {row['per_stream']:,.0f} "
                  f"| {ratio:.2f}× |")  # fmt: skip


if __name__ == "__main__":
    main()
