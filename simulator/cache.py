"""A small, deterministic model of Anthropic prompt caching (protocol.md 1.12).

Breakpoints are the segments (tools -> system -> message blocks) that carry `cache_control`,
plus the last segment when the request has a top-level `cache_control` (automatic placement).
Each prefix is identified by a running hash over the model and the segments with their
`cache_control` stripped, so moving a breakpoint later in the next turn can still read the
earlier prefix -- the same reason multi-turn caching works on the real API.

An entry is readable only by requests that arrive after the instant it was written: concurrent
requests do not see each other's writes (the real API makes an entry readable only once the first
response has begun, protocol.md 1.12). With the wall clock that instant is a nanosecond; on a
simulated clock (`simulator/clock.py`) every request at the same simulated time pays its
own write, whatever order they arrive in -- which keeps a benchmark's numbers independent of the
order of concurrent requests.

Deliberately left out: per-model minimum cacheable lengths, and the "1h before 5m" ordering rule.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from simulator.tokens import Segment, prefix_tokens, split_segments, total_tokens

TTL_5M = 300.0
TTL_1H = 3600.0
# The real API looks back at most 20 blocks from each breakpoint for an earlier entry.
LOOKBACK_BLOCKS = 20
MAX_ENTRIES = 100_000


@dataclass(slots=True, frozen=True)
class InputUsage:
    input_tokens: int
    cache_creation_5m: int = 0
    cache_creation_1h: int = 0
    cache_read: int = 0

    @property
    def cache_creation(self) -> int:
        return self.cache_creation_5m + self.cache_creation_1h

    @property
    def total(self) -> int:
        return self.input_tokens + self.cache_creation + self.cache_read


@dataclass(slots=True)
class _Entry:
    written_at: float
    expires_at: float
    ttl: float

    def readable(self, now: float) -> bool:
        return self.written_at < now < self.expires_at


def count_breakpoints(body: Mapping[str, Any]) -> int:
    segments = split_segments(body)
    explicit = sum(1 for s in segments if s.cache_control is not None)
    return explicit + (1 if isinstance(body.get("cache_control"), Mapping) else 0)


def _ttl_of(cache_control: Mapping[str, Any]) -> float:
    return TTL_1H if cache_control.get("ttl") == "1h" else TTL_5M


def _breakpoints(body: Mapping[str, Any], segments: list[Segment]) -> list[tuple[int, float]]:
    points: dict[int, float] = {}
    for index, segment in enumerate(segments):
        if segment.cache_control is not None:
            points[index] = _ttl_of(segment.cache_control)
    top = body.get("cache_control")
    if isinstance(top, Mapping) and segments:
        last = len(segments) - 1
        points[last] = max(points.get(last, 0.0), _ttl_of(top))
    return sorted(points.items())


def _canonical(obj: Any) -> bytes:
    if isinstance(obj, Mapping) and "cache_control" in obj:
        obj = {k: v for k, v in obj.items() if k != "cache_control"}
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


class PromptCache:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[bytes, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def account(self, model: str, body: Mapping[str, Any]) -> InputUsage:
        """Split the request's input tokens into uncached / cache write / cache read."""
        segments = split_segments(body)
        total = total_tokens(segments)
        points = _breakpoints(body, segments)
        if not points:
            return InputUsage(input_tokens=total)

        last = points[-1][0]
        hasher = hashlib.blake2b(model.encode(), digest_size=16)
        digests: list[bytes] = []
        cumulative: list[int] = []
        chars = media = 0
        for segment in segments[: last + 1]:
            hasher.update(_canonical(segment.obj))
            hasher.update(b"\x1e")  # separator: ["ab"] and ["a","b"] must differ
            digests.append(hasher.copy().digest())
            chars += segment.chars
            media += segment.media_tokens
            cumulative.append(prefix_tokens(chars, media))

        now = self._clock()
        read_at = self._longest_cached(points, digests, now)
        read = cumulative[read_at] if read_at >= 0 else 0

        created = {TTL_5M: 0, TTL_1H: 0}
        boundary = read
        for index, ttl in points:
            if index > read_at:
                # Tokens between the previous boundary and this breakpoint are written at
                # this breakpoint's TTL.
                created[ttl] += cumulative[index] - boundary
                boundary = cumulative[index]
            self._store(digests[index], ttl, now)
        if read_at >= 0:
            entry = self._entries.get(digests[read_at])
            if entry is not None and entry.expires_at > now:
                self._store(digests[read_at], entry.ttl, now)  # a hit refreshes the TTL

        creation = created[TTL_5M] + created[TTL_1H]
        return InputUsage(
            input_tokens=max(0, total - read - creation),
            cache_creation_5m=created[TTL_5M],
            cache_creation_1h=created[TTL_1H],
            cache_read=read,
        )

    def account_prefix(self, scope: str, segments: list[Segment], ttl: float = TTL_5M) -> int:
        """Automatic prefix caching (OpenAI's kind: no breakpoints): every segment boundary is a
        prefix a later request can read. Returns the tokens of the longest readable cached
        prefix (not rounded: the front applies its provider's granularity) and stores every
        prefix of this request. `scope` seeds the hash (model, cache key), so entries of another
        scope, or of the Messages front, are never read."""
        hasher = hashlib.blake2b(b"prefix\x1f" + scope.encode(), digest_size=16)
        digests: list[bytes] = []
        cumulative: list[int] = []
        chars = media = 0
        for segment in segments:
            hasher.update(_canonical(segment.obj))
            hasher.update(b"\x1e")
            digests.append(hasher.copy().digest())
            chars += segment.chars
            media += segment.media_tokens
            cumulative.append(prefix_tokens(chars, media))
        now = self._clock()
        read = 0
        for pos in range(len(digests) - 1, -1, -1):
            entry = self._entries.get(digests[pos])
            if entry is not None and entry.readable(now):
                read = cumulative[pos]
                break
        for digest in digests:
            self._store(digest, ttl, now)  # a hit refreshes the TTL, a miss writes
        return read

    def _longest_cached(
        self, points: list[tuple[int, float]], digests: list[bytes], now: float
    ) -> int:
        best = -1
        for index, _ttl in points:
            for pos in range(index, max(best, index - LOOKBACK_BLOCKS), -1):
                entry = self._entries.get(digests[pos])
                if entry is not None and entry.readable(now):
                    best = pos
                    break
        return best

    def _store(self, digest: bytes, ttl: float, now: float) -> None:
        # Re-insert so dict order stays "least recently used first" for eviction. A live entry
        # keeps the instant it was first written (a refresh does not hide it again).
        old = self._entries.pop(digest, None)
        written_at = old.written_at if old is not None and old.expires_at > now else now
        self._entries[digest] = _Entry(written_at=written_at, expires_at=now + ttl, ttl=ttl)
        if len(self._entries) > MAX_ENTRIES:
            self._evict(now)

    def _evict(self, now: float) -> None:
        for key in [k for k, e in self._entries.items() if e.expires_at <= now]:
            del self._entries[key]
        excess = len(self._entries) - MAX_ENTRIES // 2
        if excess > 0 and len(self._entries) > MAX_ENTRIES:
            for key in list(self._entries)[:excess]:
                del self._entries[key]
