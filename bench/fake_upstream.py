"""A fast fake Anthropic upstream for benchmarks.

`python -m bench.fake_upstream --port P [--first-event-delay S] [--event-delay S] [--events N]`

Why not the full simulator in `simulator`: that one checks requests the way the real API
does, which costs far more CPU than the gateway overhead we want to measure. This one is a raw
asyncio Protocol with httptools (keep-alive, uvloop when installed); replies are prebuilt bytes and
the request body is never JSON-parsed — only `"stream"`, `"model"` and `"max_tokens"` are found
with `bytes.find`, so a request costs a few tens of microseconds whatever its size.

Routes:
- `POST /v1/messages`: a JSON message, or (when the body has `"stream": true`) an SSE stream with
  `event:` lines: message_start, ping, content_block_start, K text deltas, content_block_stop,
  message_delta (cumulative usage), message_stop. K = min(max_tokens, --events), so one upstream
  serves short and long streams (the harness varies `max_tokens` to price one streamed event).
- `POST /v1/messages/count_tokens`: `{"input_tokens": len(body) // 4}`.
- `POST /v1/chat/completions` (an `openai`-kind deployment's base URL is `…/v1`): the same K
  tokens in OpenAI's shape, a `chat.completion` or `chat.completion.chunk` SSE ending
  `data: [DONE]`, with the usage chunk when `stream_options.include_usage` (bench/fake_openai.py).
  The key is checked as `Authorization: Bearer` there, as `x-api-key` on the Anthropic routes.
- `POST /_bench/config`: `{"first_event_delay": S, "event_delay": S, "events": N,
  "reset_max_open": true}` changes pacing
  at run time (the harness switches phases without restarting, so the gateway's pool stays valid).
- Claude on Bedrock (`POST /model/{id}/invoke`, `/invoke-with-response-stream` as
  `application/vnd.amazon.eventstream` chunk frames, `/count-tokens`) and on Vertex
  (`POST …/publishers/anthropic/models/{id}:rawPredict` / `:streamRawPredict`, SSE;
  `POST /token`, a fixed OAuth2 token): the same replies in each platform's framing, with no
  signature or token check (the simulator checks those; this one is for measuring the gateway).
- `GET /stats`: counters, to check that load really reached the upstream (and how many streams
  were open at once).

Pacing: `--first-event-delay` waits before `message_start` (the response headers go out at once,
as the real API does). With `--event-delay`, `message_start` … the first text delta go out
together after the first delay, then one event per delay (so TTFT is the first delay). A non-stream
reply waits for the whole generation: first delay + one event delay per token.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import re
import resource
import sys
from collections import deque
from dataclasses import asdict, dataclass

import httptools
import orjson

from bench.fake_openai import ChatReplies
from simulator import eventstream

DEFAULT_MODEL = b"claude-sonnet-5-5"
_MODEL_RE = re.compile(rb'"model"\s*:\s*"([^"\\]{1,128})"')
_MAX_TOKENS_RE = re.compile(rb'"max_tokens"\s*:\s*(\d{1,9})')
_STREAM_RE = re.compile(rb'"stream"\s*:\s*true')
_TEXT = b"tok "  # each text delta is one "token"
# Which header carried the right key (UpstreamProtocol._key_via); ANY_HEADER: none is required.
ANY_HEADER, X_API_KEY, BEARER = b"*", b"x-api-key", b"bearer"


@dataclass
class Config:
    first_event_delay: float = 0.0
    event_delay: float = 0.0
    events: int = 64  # upper bound of text deltas per reply (and of output_tokens)
    api_key: str | None = None  # when set, other x-api-key values get a 401


@dataclass
class Stats:
    requests: int = 0
    streams: int = 0
    errors: int = 0
    open_streams: int = 0
    max_open_streams: int = 0
    connections: int = 0
    bytes_in: int = 0
    bedrock: int = 0  # requests on the Bedrock routes
    vertex: int = 0  # requests on the Vertex routes
    chat: int = 0  # requests on /v1/chat/completions


def _wants_stream(body: bytes) -> bool:
    idx = body.find(b'"stream"')
    return idx >= 0 and _STREAM_RE.match(body, idx) is not None


def _chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk (the real API streams with chunked transfer encoding)."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(name: bytes, data: bytes) -> bytes:
    return _chunk(b"event: " + name + b"\ndata: " + data + b"\n\n")


class Replies:
    """Prebuilt reply fragments; only ids and token counts are filled in per request."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.ids = itertools.count(1)
        self.ping = _event(b"ping", b'{"type": "ping"}')
        self.block_start = _event(
            b"content_block_start",
            b'{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
        )
        self.delta = _event(
            b"content_block_delta",
            b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"'
            + _TEXT
            + b'"}}',
        )
        self.block_stop = _event(b"content_block_stop", b'{"type":"content_block_stop","index":0}')
        self.stop = _event(b"message_stop", b'{"type":"message_stop"}')
        self.stream_head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n"
            b"request-id: req_bench\r\n\r\n"
        )
        # The middle of a stream is the same for every request of a given length: cache it.
        self._middle: dict[int, bytes] = {}
        self._bedrock: dict[bytes, bytes] = {}
        self.chat = ChatReplies(config)

    bedrock_head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\n"
        b"x-amzn-bedrock-content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    )

    def bedrock(self, chunked: bytes) -> bytes:
        """HTTP chunks of SSE events → one HTTP chunk of event-stream `chunk` frames (cached:
        the middle of a stream repeats; only message_start, with its id, is converted anew)."""
        cache = self._bedrock
        found = cache.get(chunked)
        if found is not None:
            return found
        frames = []
        pos = 0
        while pos < len(chunked):
            line_end = chunked.index(b"\r\n", pos)
            size = int(chunked[pos:line_end], 16)
            payload = chunked[line_end + 2 : line_end + 2 + size]
            pos = line_end + 2 + size + 2
            for block in payload.split(b"\n\n"):
                if b"\ndata: " in block:
                    frames.append(eventstream.chunk(block.split(b"\ndata: ", 1)[1]))
        converted = _chunk(b"".join(frames)) if frames else b""
        if chunked.endswith(b"0\r\n\r\n"):
            converted += b"0\r\n\r\n"
        if b"message_start" not in chunked and len(cache) < 4096:
            cache[chunked] = converted
        return converted

    def tokens_for(self, body: bytes) -> int:
        idx = body.find(b'"max_tokens"')
        if idx >= 0:
            m = _MAX_TOKENS_RE.match(body, idx)
            if m:
                return max(1, min(int(m.group(1)), self.config.events))
        return self.config.events

    @staticmethod
    def model_for(body: bytes) -> bytes:
        idx = body.find(b'"model"')
        if idx >= 0:
            m = _MODEL_RE.match(body, idx)
            if m:
                return m.group(1)
        return DEFAULT_MODEL

    @staticmethod
    def usage(input_tokens: int, output_tokens: int) -> bytes:
        return (
            b'{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,'
            b'"output_tokens":%d,"service_tier":"standard"}' % (input_tokens, output_tokens)
        )

    def message_json(self, body: bytes) -> bytes:
        tokens = self.tokens_for(body)
        payload = (
            b'{"id":"msg_bench%d","type":"message","role":"assistant","model":"%s",'
            b'"content":[{"type":"text","text":"%s"}],"stop_reason":"%s","stop_sequence":null,'
            b'"usage":%s}'
            % (
                next(self.ids),
                self.model_for(body),
                _TEXT * tokens,
                b"max_tokens" if tokens < self.config.events else b"end_turn",
                self.usage(len(body) // 4, tokens),
            )
        )
        return (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"request-id: req_bench\r\n\r\n%s" % (len(payload), payload)
        )

    def stream_events(self, body: bytes) -> list[bytes]:
        """Events after the headers; index 0 is message_start (the one the first delay precedes)."""
        tokens = self.tokens_for(body)
        input_tokens = len(body) // 4
        start = _event(
            b"message_start",
            b'{"type":"message_start","message":{"id":"msg_bench%d","type":"message",'
            b'"role":"assistant","model":"%s","content":[],"stop_reason":null,'
            b'"stop_sequence":null,"usage":%s}}'
            % (next(self.ids), self.model_for(body), self.usage(input_tokens, 1)),
        )
        reason = b"max_tokens" if tokens < self.config.events else b"end_turn"
        delta = _event(
            b"message_delta",
            b'{"type":"message_delta","delta":{"stop_reason":"%s","stop_sequence":null},'
            b'"usage":%s}' % (reason, self.usage(input_tokens, tokens)),
        )
        if self.config.event_delay > 0:
            # Paced: one write per token after the first; what precedes the first token goes
            # with it, so the first token comes `first_event_delay` after the request.
            head = start + self.ping + self.block_start + (self.delta if tokens else b"")
            rest = [self.delta] * max(0, tokens - 1)
            return [head, *rest, self.block_stop, delta, self.stop + b"0\r\n\r\n"]
        cached = self._middle.get(tokens)
        if cached is None:
            cached = self.ping + self.block_start + self.delta * tokens + self.block_stop
            self._middle[tokens] = cached
        return [start, cached + delta + self.stop + b"0\r\n\r\n"]


def _simple(status: int, payload: bytes, keep_alive: bool = True) -> bytes:
    reason = {200: b"OK", 401: b"Unauthorized", 404: b"Not Found", 400: b"Bad Request"}
    return b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (
        status,
        reason.get(status, b"Error"),
        len(payload),
        b"" if keep_alive else b"connection: close\r\n",
        payload,
    )


def _openai_error(status: int, code: str, message: str) -> bytes:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    return _simple(status, orjson.dumps({"error": error}))


def _error(status: int, kind: str, message: str) -> bytes:
    return _simple(
        status, orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})
    )


class UpstreamProtocol(asyncio.Protocol):
    """One client connection. Requests are answered in order (HTTP/1.1 keep-alive, pipelining)."""

    __slots__ = (
        "_body",
        "_busy",
        "_closed",
        "_header_name",
        "_key_via",
        "_parser",
        "_pending",
        "_transport",
        "_url",
        "loop",
        "replies",
        "stats",
    )

    def __init__(self, replies: Replies, stats: Stats) -> None:
        self.replies = replies
        self.stats = stats
        self.loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._body: list[bytes] = []
        self._key_via = self._no_key()
        self._header_name = b""
        self._pending: deque[tuple[bytes, bytes, bytes, bool, bytes]] = deque()
        self._busy = False
        self._closed = False

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self.stats.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.stats.connections -= 1

    def data_received(self, data: bytes) -> None:
        self.stats.bytes_in += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            self.stats.errors += 1
            if self._transport is not None:
                self._transport.write(_simple(400, b'{"type":"error"}', keep_alive=False))
                self._transport.close()

    # -- httptools callbacks -----------------------------------------------------------------
    def on_url(self, url: bytes) -> None:
        self._url += url

    def _no_key(self) -> bytes:
        """`_key_via` before the headers: ANY_HEADER when no key is required."""
        return ANY_HEADER if self.replies.config.api_key is None else b""

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._key_via:
            return
        lowered = name.lower()
        key = self.replies.config.api_key
        # Which header carried the right key: each route takes its API's own (Anthropic's
        # x-api-key, OpenAI's Bearer), so a gateway that sends the wrong one gets a 401.
        if lowered == b"x-api-key" and value.decode("latin-1") == key:
            self._key_via = X_API_KEY
        elif lowered == b"authorization" and value.decode("latin-1") == f"Bearer {key}":
            self._key_via = BEARER

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self._body)
        request = (
            self._parser.get_method(),
            self._url,
            body,
            self._parser.should_keep_alive(),
            self._key_via,
        )
        self._url = b""
        self._body = []
        self._key_via = self._no_key()
        if self._busy:
            self._pending.append(request)
        else:
            self._handle(*request)

    # -- routing -----------------------------------------------------------------------------
    def _handle(
        self, method: bytes, url: bytes, body: bytes, keep_alive: bool, key_via: bytes
    ) -> None:
        transport = self._transport
        if transport is None or self._closed:
            return
        stats = self.stats
        stats.requests += 1
        path = url.split(b"?", 1)[0]
        if method == b"POST" and path == b"/v1/messages":
            if key_via not in (ANY_HEADER, X_API_KEY):
                stats.errors += 1
                self._finish(_error(401, "authentication_error", "invalid x-api-key"), keep_alive)
            elif _wants_stream(body):
                self._stream(body, keep_alive)
            else:
                self._reply_json(body, keep_alive)
        elif method == b"POST" and path == b"/v1/chat/completions":
            stats.chat += 1
            if key_via not in (ANY_HEADER, BEARER):
                stats.errors += 1
                self._finish(_openai_error(401, "invalid_api_key", "Incorrect API key"), keep_alive)
            elif _wants_stream(body):
                chat = self.replies.chat
                paced = self.replies.config.event_delay > 0
                self._stream(body, keep_alive, events=chat.stream_events(body, paced=paced))
            else:
                self._reply_json(body, keep_alive, chat=True)
        elif method == b"POST" and path == b"/v1/messages/count_tokens":
            self._finish(_simple(200, b'{"input_tokens":%d}' % (len(body) // 4)), keep_alive)
        elif method == b"POST" and path.startswith(b"/model/"):
            stats.bedrock += 1
            if path.endswith(b"/invoke-with-response-stream"):
                self._stream(body, keep_alive, bedrock=True)
            elif path.endswith(b"/count-tokens"):
                self._finish(_simple(200, b'{"inputTokens":%d}' % (len(body) // 4)), keep_alive)
            else:
                self._reply_json(body, keep_alive)
        elif method == b"POST" and b"/publishers/anthropic/models/" in path:
            stats.vertex += 1
            if path.endswith(b"count-tokens:rawPredict"):
                self._finish(_simple(200, b'{"input_tokens":%d}' % (len(body) // 4)), keep_alive)
            elif _wants_stream(body):
                self._stream(body, keep_alive)
            else:
                self._reply_json(body, keep_alive)
        elif method == b"POST" and path == b"/token":
            token = b'{"access_token":"ya29.bench","expires_in":3600,"token_type":"Bearer"}'
            self._finish(_simple(200, token), keep_alive)
        elif method == b"POST" and path == b"/_bench/config":
            self._finish(self._configure(body), keep_alive)
        elif method == b"GET" and path == b"/stats":
            payload = orjson.dumps(asdict(stats))
            self._finish(_simple(200, payload), keep_alive)
        else:
            stats.errors += 1
            self._finish(_error(404, "not_found_error", f"no route {path!r}"), keep_alive)

    def _configure(self, body: bytes) -> bytes:
        """Change pacing at run time: one upstream (one gateway deployment) serves every phase."""
        config = self.replies.config
        try:
            changes = orjson.loads(body)
            for name in ("first_event_delay", "event_delay"):
                if name in changes:
                    setattr(config, name, max(0.0, float(changes[name])))
            if "events" in changes:
                config.events = max(1, int(changes["events"]))
            if changes.get("reset_max_open"):
                self.stats.max_open_streams = self.stats.open_streams
        except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError) as exc:
            return _error(400, "invalid_request_error", f"bad config: {exc}")
        shown = {k: v for k, v in asdict(config).items() if k != "api_key"}
        return _simple(200, orjson.dumps(shown))

    def _finish(self, data: bytes, keep_alive: bool) -> None:
        transport = self._transport
        if transport is None or self._closed:
            return
        transport.write(data)
        if not keep_alive:
            transport.close()
            return
        self._busy = False
        if self._pending:
            self._handle(*self._pending.popleft())

    def _reply_json(self, body: bytes, keep_alive: bool, chat: bool = False) -> None:
        config = self.replies.config
        if chat:
            reply, tokens = (
                self.replies.chat.completion_json(body),
                self.replies.chat.tokens_for(body),
            )
        else:
            reply, tokens = self.replies.message_json(body), self.replies.tokens_for(body)
        delay = config.first_event_delay + config.event_delay * tokens
        if delay > 0:
            self._busy = True
            self.loop.call_later(delay, self._finish, reply, keep_alive)
        else:
            self._finish(reply, keep_alive)

    def _stream(
        self,
        body: bytes,
        keep_alive: bool,
        bedrock: bool = False,
        events: list[bytes] | None = None,
    ) -> None:
        """`events` given: a chat stream's chunks (bench/fake_openai.py), same pacing."""
        stats = self.stats
        stats.streams += 1
        config = self.replies.config
        head = self.replies.stream_head
        if events is None:
            events = self.replies.stream_events(body)
        else:
            head = self.replies.chat.stream_head
        if bedrock:
            events = [self.replies.bedrock(e) for e in events]
            head = self.replies.bedrock_head
        if config.first_event_delay <= 0 and config.event_delay <= 0:
            self._finish(head + b"".join(events), keep_alive)
            return
        assert self._transport is not None
        self._transport.write(head)
        self._busy = True
        stats.open_streams += 1
        stats.max_open_streams = max(stats.max_open_streams, stats.open_streams)
        # Timer callbacks, not a coroutine per stream: 1,000 paced streams stay cheap.
        state = _Paced(self, events, keep_alive)
        self.loop.call_later(config.first_event_delay, state.step)


class _Paced:
    __slots__ = ("events", "keep_alive", "pos", "proto")

    def __init__(self, proto: UpstreamProtocol, events: list[bytes], keep_alive: bool) -> None:
        self.proto = proto
        self.events = events
        self.keep_alive = keep_alive
        self.pos = 0

    def step(self) -> None:
        proto = self.proto
        if proto._closed or proto._transport is None:
            proto.stats.open_streams -= 1
            return
        event = self.events[self.pos]
        self.pos += 1
        if self.pos == len(self.events):
            proto.stats.open_streams -= 1
            proto._finish(event, self.keep_alive)
            return
        proto._transport.write(event)
        delay = proto.replies.config.event_delay
        if delay > 0:
            proto.loop.call_later(delay, self.step)
        else:
            self.step()


async def start_server(host: str, port: int, config: Config) -> tuple[asyncio.Server, Stats]:
    """Start serving on the running loop (tests run it in-process); returns the server and stats."""
    replies = Replies(config)
    stats = Stats()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: UpstreamProtocol(replies, stats), host, port, backlog=4096, reuse_address=True
    )
    return server, stats


def raise_nofile_limit() -> None:
    """1,000 open streams need more descriptors than a 1,024 soft limit allows."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _serve(args: argparse.Namespace) -> None:
    config = Config(
        first_event_delay=args.first_event_delay,
        event_delay=args.event_delay,
        events=args.events,
        api_key=args.api_key,
    )
    server, _ = await start_server(args.host, args.port, config)
    port = server.sockets[0].getsockname()[1]
    # The harness reads this line to learn the port when started with --port 0.
    print(f"listening on {args.host}:{port}", flush=True)
    async with server:
        if args.max_seconds > 0:
            # Bounded lifetime: a forgotten upstream does not outlive the run.
            await asyncio.sleep(args.max_seconds)
        else:
            await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--first-event-delay", type=float, default=0.0, metavar="S")
    parser.add_argument("--event-delay", type=float, default=0.0, metavar="S")
    parser.add_argument("--events", type=int, default=64, help="max text deltas per reply")
    parser.add_argument("--api-key", default=None, help="require this x-api-key")
    parser.add_argument(
        "--max-seconds", type=float, default=3600.0, help="exit after this long (0: never)"
    )
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("fake_upstream: loopback only")
    raise_nofile_limit()
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve(args))
    else:
        uvloop.run(_serve(args))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
