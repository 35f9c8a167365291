"""What the cache benchmark reports, computed from what each request did. Pure: no I/O.

Definitions (the same words in cache.md, the README and the dashboard):
- *cacheable input tokens* of a request: its input tokens at or before its last cache
  breakpoint, which the provider either reads from the cache or writes to it. The upstream reports
  them as `cache_read_input_tokens + cache_creation_input_tokens`; `input_tokens` are the ones
  after the last breakpoint, which no routing can make cacheable
  (https://platform.claude.com/docs/en/build-with-claude/prompt-caching, "Tracking cache
  performance"; protocol.md 1.12). The workload's breakpoints are the same for every policy, so
  the denominator is too.
- *hit rate*: cache read tokens / cacheable input tokens.
- *cost*: what the gateway billed the run's org, at the catalog prices (its usage records); the
  harness recomputes it request by request at the price tier of each prompt and checks.
- *cost with caching off*: the same requests' tokens, every input token at the plain input price
  and the output at the output price -- what an uncached request costs. Computed, not run: the
  token counts are the simulator's, and a request without breakpoints is billed exactly so.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from catalog.pricing import PriceSchedule, TokenCounts, cost_nano

RECOVERY_SHARE = 0.9  # "recovered": this share of an event's extra cache writes has happened


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request of one run: who served it and what that deployment's cache did."""

    conversation: int
    turn: int
    start: float  # simulated seconds
    deployment: int | None  # None: it failed
    input_tokens: int = 0  # after the last breakpoint
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    output_tokens: int = 0
    status: int = 200
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.deployment is not None and not self.error

    @property
    def cache_write(self) -> int:
        return self.cache_write_5m + self.cache_write_1h

    @property
    def cacheable(self) -> int:
        return self.cache_read + self.cache_write

    def tokens(self) -> TokenCounts:
        return TokenCounts(
            input=self.input_tokens,
            output=self.output_tokens,
            cache_read=self.cache_read,
            cache_write_5m=self.cache_write_5m,
            cache_write_1h=self.cache_write_1h,
        )

    def uncached_tokens(self) -> TokenCounts:
        every_input = self.input_tokens + self.cacheable
        return TokenCounts(input=every_input, output=self.output_tokens)

    @classmethod
    def from_usage(
        cls, conversation: int, turn: int, start: float, deployment: int, usage: dict[str, Any]
    ) -> Outcome:
        creation = usage.get("cache_creation") or {}
        return cls(
            conversation=conversation,
            turn=turn,
            start=start,
            deployment=deployment,
            input_tokens=int(usage.get("input_tokens") or 0),
            cache_read=int(usage.get("cache_read_input_tokens") or 0),
            cache_write_5m=int(creation.get("ephemeral_5m_input_tokens") or 0),
            cache_write_1h=int(creation.get("ephemeral_1h_input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
        )


@dataclass(slots=True)
class Totals:
    requests: int = 0
    errors: int = 0
    input_tokens: int = 0
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    output_tokens: int = 0
    cost_nano: int = 0  # at the catalog prices, request by request (as the gateway bills)
    uncached_cost_nano: int = 0

    @property
    def cache_write(self) -> int:
        return self.cache_write_5m + self.cache_write_1h

    @property
    def cacheable(self) -> int:
        return self.cache_read + self.cache_write

    @property
    def hit_rate(self) -> float:
        return self.cache_read / self.cacheable if self.cacheable else 0.0


def totals(outcomes: Iterable[Outcome], schedule: PriceSchedule) -> Totals:
    """Sums, and costs request by request at the tier each prompt falls in (as the gateway
    bills: the prompt is input + cache read + cache write tokens)."""
    out = Totals()
    for o in outcomes:
        out.requests += 1
        if not o.ok:
            out.errors += 1
            continue
        out.input_tokens += o.input_tokens
        out.cache_read += o.cache_read
        out.cache_write_5m += o.cache_write_5m
        out.cache_write_1h += o.cache_write_1h
        out.output_tokens += o.output_tokens
        tokens = o.tokens()
        prices = schedule.tier_for(tokens.prompt).prices  # caching does not change the prompt
        out.cost_nano += cost_nano(tokens, prices)
        out.uncached_cost_nano += cost_nano(o.uncached_tokens(), prices)
    return out


@dataclass(frozen=True, slots=True)
class Moves:
    conversations: int  # conversations served by more than one deployment
    moves: int  # turn-to-turn changes of deployment


def moves(outcomes: Iterable[Outcome], since: float = 0.0, until: float = float("inf")) -> Moves:
    """Moves of conversations whose later turn starts in [since, until)."""
    by_conv: dict[int, list[Outcome]] = {}
    for o in outcomes:
        if o.ok:
            by_conv.setdefault(o.conversation, []).append(o)
    moved = total = 0
    for turns in by_conv.values():
        turns.sort(key=lambda o: o.turn)
        changes = sum(
            1
            for a, b in itertools.pairwise(turns)
            if a.deployment != b.deployment and since <= b.start < until
        )
        total += changes
        moved += changes > 0
    return Moves(moved, total)


@dataclass(frozen=True, slots=True)
class Recovery:
    at: float  # simulated seconds of the event
    extra_writes: int  # cache write tokens above the same requests' in the base run
    minutes_to_recover: float | None  # to RECOVERY_SHARE of the extra writes; None: no extra


@dataclass(slots=True)
class Churn:
    phases: dict[str, float] = field(default_factory=dict)  # hit rate before/during/after
    base_phases: dict[str, float] = field(default_factory=dict)
    recoveries: list[Recovery] = field(default_factory=list)
    moved_out: Moves = Moves(0, 0)
    moved_back: Moves = Moves(0, 0)


Window = tuple[float, float]  # simulated seconds: the outage starts, the deployment is back


def phase_of(start: float, window: Window) -> str:
    if start < window[0]:
        return "before"
    return "during" if start < window[1] else "after"


def phase_hit_rates(outcomes: Iterable[Outcome], window: Window) -> dict[str, float]:
    reads: dict[str, int] = {"before": 0, "during": 0, "after": 0}
    cacheable = dict(reads)
    for o in outcomes:
        if o.ok:
            phase = phase_of(o.start, window)
            reads[phase] += o.cache_read
            cacheable[phase] += o.cacheable
    return {p: (reads[p] / cacheable[p] if cacheable[p] else 0.0) for p in reads}


def churn(churned: Sequence[Outcome], base: Sequence[Outcome], window: Window) -> Churn:
    """Hit rate per third, the extra cache writes each event caused compared with the same
    requests in the base run, and how long (simulated) until 90 % of them had happened."""
    out = Churn(
        phases=phase_hit_rates(churned, window),
        base_phases=phase_hit_rates(base, window),
        moved_out=moves(churned, window[0], window[1]),
        moved_back=moves(churned, window[1]),
    )
    base_writes = {(o.conversation, o.turn): o.cache_write for o in base if o.ok}
    for event, end in ((window[0], window[1]), (window[1], float("inf"))):
        window = sorted(
            (o for o in churned if o.ok and event <= o.start < end), key=lambda o: o.start
        )
        extra = [
            (o.start, o.cache_write - base_writes.get((o.conversation, o.turn), 0)) for o in window
        ]
        total = sum(e for _, e in extra)
        minutes = None
        if total > 0:
            running = 0
            for start, e in extra:
                running += e
                if running >= RECOVERY_SHARE * total:
                    minutes = (start - event) / 60
                    break
        out.recoveries.append(Recovery(event, total, minutes))
    return out
