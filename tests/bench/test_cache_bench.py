"""The prompt-cache benchmark (bench/cache*.py): a seeded, reproducible workload of the promised
shape, exact figures from outcomes, the README's claim regenerated from the committed results,
and (e2e) the whole thing through the real gateway twice with the same seed: same numbers.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.conf import settings

from bench import cache as cache_bench
from bench import cache_readme, cache_report
from bench.cache_metrics import Moves, Outcome, churn, moves, totals
from bench.cache_workload import MODEL, Profile, generate, parse_marker
from catalog.pricing import Prices, PriceSchedule, PriceTier
from simulator.tokens import split_segments, total_tokens

REPO = Path(__file__).resolve().parents[2]
PRICES = Prices(input=3_000_000, output=15_000_000, cache_read=300_000,
                cache_write_5m=3_750_000, cache_write_1h=6_000_000)  # fmt: skip
# Prompts over 20,000 tokens cost twice as much (the billing module's tiers, made small).
LONG = Prices(6_000_000, 30_000_000, 600_000, 7_500_000, 12_000_000)
SCHEDULE = PriceSchedule(0, (PriceTier(20_000, PRICES), PriceTier(None, LONG)))


@pytest.fixture(scope="module")
def full() -> Any:
    return generate(2026, Profile.named(quick=False))


def test_same_seed_same_requests_other_seed_others(full: Any) -> None:
    assert generate(2026, Profile.named(quick=False)).fingerprint() == full.fingerprint()
    assert generate(2027, Profile.named(quick=False)).fingerprint() != full.fingerprint()
    quick = Profile.named(quick=True)
    assert generate(5, quick).fingerprint() == generate(5, quick).fingerprint()


def _prefix_tokens(app: Any) -> int:
    """Tokens of the tools + system prompt, counted the simulator's way."""
    body = {"tools": list(app.tools), "system": app.system}
    return total_tokens(split_segments(body))


def test_the_workload_has_the_promised_shape(full: Any) -> None:
    convs = full.conversations
    assert len(convs) == 200
    turns = [len(c.turns) for c in convs]
    assert min(turns) >= 2 and max(turns) <= 30 and min(turns) <= 3 and max(turns) >= 28
    used = {c.app.index: c.app for c in convs}
    prefixes = [_prefix_tokens(app) for app in used.values()]
    assert all(1_900 <= p <= 42_000 for p in prefixes), prefixes
    assert min(prefixes) < 4_000 and max(prefixes) > 25_000
    assert sum(1 for c in convs if c.app.tools) > 100
    apis = {c.app.api for c in convs}
    assert apis == {"messages", "chat"}
    messages = [c for c in convs if c.app.api == "messages"]
    chat = [c for c in convs if c.app.api == "chat"]
    assert {c.app.system_ttl for c in messages} == {"5m", "1h"}
    assert {c.app.sends_cache_key for c in chat} == {True, False}
    assert {c.stream for c in convs} == {True, False}
    gaps = [b.start - a.end for c in convs for a, b in pairwise(c.turns)]
    assert all(g > 2.99 for g in gaps)  # 3 s at least (times are kept to the millisecond)
    assert 0.05 < sum(1 for g in gaps if g > 300) / len(gaps) < 0.2  # some outlive 5 minutes
    # Apps are shared: the popular ones carry many conversations.
    per_app = sorted((sum(1 for c in convs if c.app.index == i) for i in used), reverse=True)
    assert per_app[0] >= 20 and per_app[-1] <= 3


def test_own_prompts_workload_shares_nothing_between_conversations(full: Any) -> None:
    """`--prompts own`: the same shape, but every conversation a system prompt + tools of its
    own, so no request can read another conversation's writes."""
    own = generate(2026, Profile.named(quick=False, prompts="own"))
    assert own.fingerprint() == generate(2026, Profile.named(False, "own")).fingerprint()
    assert own.fingerprint() != full.fingerprint()
    convs = own.conversations
    assert len(convs) == 200 and len(own.apps) == 200
    assert len({c.app.system for c in convs}) == 200
    tool_texts = [t["description"] for c in convs for t in c.app.tools]
    assert len(set(tool_texts)) == len(tool_texts)
    first_blocks = {c.turns[0].user[:40] for c in convs}
    assert len(first_blocks) == 200
    prefixes = [_prefix_tokens(c.app) for c in convs]
    assert all(1_900 <= p <= 42_000 for p in prefixes)
    assert min(prefixes) < 4_000 and max(prefixes) > 25_000
    turns = [len(c.turns) for c in convs]
    assert min(turns) >= 2 and max(turns) <= 30
    assert {c.app.api for c in convs} == {"messages", "chat"}
    assert {c.app.system_ttl for c in convs if c.app.api == "messages"} == {"5m", "1h"}
    assert {c.app.sends_cache_key for c in convs if c.app.api == "chat"} == {True, False}
    gaps = [b.start - a.end for c in convs for a, b in pairwise(c.turns)]
    assert 0.05 < sum(1 for g in gaps if g > 300) / len(gaps) < 0.2
    with pytest.raises(ValueError):
        Profile.named(quick=False, prompts="some")


def test_both_workloads_run_every_policy_the_fallback_ab_only_shared() -> None:
    specs = cache_bench.run_specs(None, ("shared", "own"))
    shared = [s for s in specs if s.prompts == "shared"]
    own = [s for s in specs if s.prompts == "own"]
    assert len(shared) == 12 and len(own) == 10
    assert {s.name for s in own} == {"ezat", "modulo", "round_robin", "random", "least_busy"}
    assert len({s.org for s in specs}) == len(specs)
    args = cache_bench.parse_args(["--out", "/nonexistent"])
    assert args.prompts == ["shared", "own"]
    assert cache_bench.parse_args(["--quick", "--out", "/x"]).prompts == ["shared"]


def test_request_bodies_carry_the_apps_breakpoints(full: Any) -> None:
    reqs = full.requests()
    assert [r.start for r in reqs] == sorted(r.start for r in reqs)
    seen_messages = seen_chat = False
    for req in reqs[:400]:
        body = req.body()
        conv = req.conversation
        newest = body["messages"][-1]
        text = (
            newest["content"]
            if isinstance(newest["content"], str)
            else newest["content"][0]["text"]
        )
        assert parse_marker(text) == (conv.id, req.turn)
        assert len(body["messages"]) == 2 * req.turn + 1 + (conv.app.api == "chat")
        assert body["stream"] is conv.stream
        if conv.app.api == "messages":
            seen_messages = True
            assert req.path == "/v1/messages"
            system_cc = body["system"][0]["cache_control"]
            assert system_cc == (
                {"type": "ephemeral", "ttl": "1h"}
                if conv.app.system_ttl == "1h"
                else {"type": "ephemeral"}
            )
            assert newest["content"][0]["cache_control"] == {"type": "ephemeral"}
            earlier = [b for m in body["messages"][:-1] for b in m["content"]]
            assert all("cache_control" not in b for b in earlier)
        else:
            seen_chat = True
            assert req.path == "/openai/v1/chat/completions"
            assert b"cache_control" not in orjson.dumps(body)  # the gateway adds them
            assert ("prompt_cache_key" in body) is conv.app.sends_cache_key
    assert seen_messages and seen_chat


def test_churn_window_is_a_third_and_two_thirds_of_the_requests(full: Any) -> None:
    reqs = full.requests()
    outage, back = full.churn_window()
    assert sum(1 for r in reqs if r.start < outage) == len(reqs) // 3
    assert sum(1 for r in reqs if r.start < back) == 2 * len(reqs) // 3


def test_totals_hit_rate_and_costs_are_exact() -> None:
    outcomes = [
        # 10,000 cacheable written (5m), 100 after the breakpoint, 50 out: the first tier.
        Outcome(1, 0, 0.0, 2, input_tokens=100, cache_write_5m=10_000, output_tokens=50),
        # 20,000 read, 2,000 written (1h), 100 after, 50 out: a 22,100-token prompt, tier two.
        Outcome(
            1,
            1,
            60.0,
            2,
            input_tokens=100,
            cache_read=20_000,
            cache_write_1h=2_000,
            output_tokens=50,
        ),
        Outcome(2, 0, 70.0, None, status=529, error="overloaded"),
    ]
    t = totals(outcomes, SCHEDULE)
    assert (t.requests, t.errors) == (3, 1)
    assert t.cacheable == 32_000
    assert t.hit_rate == 20_000 / 32_000
    # USD per M × tokens × 1,000 = nano-USD; the second request at the long-prompt prices.
    first = 100 * 3 + 50 * 15 + 10_000 * 3.75
    second = 100 * 6 + 50 * 30 + 20_000 * 0.6 + 2_000 * 12
    assert t.cost_nano == (first + second) * 1000
    # Caching off: every input token at the input price of the same tier.
    assert t.uncached_cost_nano == (10_100 * 3 + 50 * 15 + 22_100 * 6 + 50 * 30) * 1000


def test_moves_count_conversations_and_changes() -> None:
    def o(conv: int, turn: int, dep: int, start: float) -> Outcome:
        return Outcome(conv, turn, start, dep)

    outcomes = [o(1, 0, 0, 0), o(1, 1, 0, 10), o(1, 2, 1, 20), o(1, 3, 0, 30),
                o(2, 0, 3, 5), o(2, 1, 3, 15)]  # fmt: skip
    assert moves(outcomes) == Moves(1, 2)
    assert moves(outcomes, since=25) == Moves(1, 1)
    assert moves(outcomes, since=0, until=25) == Moves(1, 1)


def test_churn_counts_extra_writes_and_recovery_from_each_event() -> None:
    base = [Outcome(c, t, 100.0 * t, 0, cache_read=900, cache_write_5m=100)
            for c in range(3) for t in range(6)]  # fmt: skip
    churned = [
        Outcome(o.conversation, o.turn, o.start, 1 if 200 <= o.start < 400 else 0,
                cache_read=o.cache_read, cache_write_5m=o.cache_write_5m)
        for o in base
    ]  # fmt: skip
    # At the outage (t=200) each conversation writes 900 more once; 60 more at t=300.
    for i, o in enumerate(churned):
        if o.start == 200:
            churned[i] = Outcome(o.conversation, o.turn, o.start, 1, cache_write_5m=1_000)
        if o.start == 300 and o.conversation == 0:
            churned[i] = Outcome(o.conversation, o.turn, o.start, 1, cache_read=840,
                                 cache_write_5m=160)  # fmt: skip
    c = churn(churned, base, (200.0, 400.0))
    assert c.phases["before"] == c.base_phases["before"] == 0.9
    assert c.phases["during"] == (2 * 900 + 840) / 6_000  # nothing read at t=200
    assert c.moved_out == Moves(3, 3) and c.moved_back == Moves(3, 3)
    out, back = c.recoveries
    assert out.extra_writes == 3 * 900 + 60
    assert math.isclose(out.minutes_to_recover or 0, 0.0)  # 2,700 of 2,760 at the event itself
    assert back.extra_writes == 0 and back.minutes_to_recover is None


def test_the_gateways_defaults_are_the_benchmarks() -> None:
    assert settings.EZAT_ROUTING_POLICY == cache_bench.DEFAULT_POLICY
    assert settings.EZAT_ROUTING_PREFIX_AWARE is cache_bench.PREFIX_AWARE_DEFAULT
    assert settings.EZAT_COOLDOWN_FAILURES == cache_bench.COOLDOWN_FAILURES
    assert MODEL in {"anthropic/claude-sonnet-5-5"}


def test_readme_block_is_generated_from_the_committed_results() -> None:
    """The README's claim is a rendering of a committed cache.json, and so is its cache.md."""
    source = cache_readme.readme_source()
    assert source is not None, "README.md has no cache-bench block"
    results = REPO / source
    data = orjson.loads((results / "cache.json").read_bytes())
    readme = (REPO / "README.md").read_text()
    assert cache_readme.readme_block(data, source) in readme
    assert (results / "cache.md").read_text() == cache_report.render(data)
    assert not data["meta"]["quick"]
    assert cache_report.complete(data)
    ezat = cache_report.find(data, "base", "ezat")
    assert f"EZAT routing: {cache_report.pct(ezat['hit_rate'])} hit rate" in readme
    targets = cache_report.targets(data)
    assert targets is not None
    if not targets["ratio_met"] and data.get("ceiling"):
        # The target, stated plainly with its reason: the one-cache ceiling.
        ceiling = cache_report.pct(data["ceiling"]["hit_rate"])
        assert "The 3× target is not met" in readme
        assert f"what one cache serving every request reads: {ceiling}" in readme
    assert all(r["errors"] == 0 and r["bill_matches"] for r in data["runs"])
    for name, sub in cache_report.workloads(data).items():
        assert cache_report.complete(sub, at_least=5), name
        assert all(r["errors"] == 0 and r["bill_matches"] for r in sub["runs"]), name


def test_a_second_workload_is_rendered_beside_the_first() -> None:
    """cache.json with `workloads.own` (the same shape): cache.md gets its section and
    targets, the README block its line, from the same file."""
    source = cache_readme.readme_source()
    assert source is not None
    data = orjson.loads((REPO / source / "cache.json").read_bytes())
    own = {**data, "fallback_ab": [], "ceiling": {"hit_rate": 0.8}}
    own["runs"] = [
        {**r, "hit_rate": r["hit_rate"] * 0.9 if r["name"] == "ezat" else r["hit_rate"] / 4}
        for r in data["runs"]
        if r["name"] != "rendezvous-fallback-off"
    ]
    data = {**data, "workloads": {"own": own}}
    markdown = cache_report.render(data)
    section = markdown[markdown.index("# Second workload: every conversation") :]
    ezat = cache_report.find(own, "base", "ezat")["hit_rate"]
    rr = cache_report.find(own, "base", "round_robin")["hit_rate"]
    assert f"{ezat / rr:.2f}× — **met**" in section
    assert "Ceiling (every request in one cache): 80.0 %" in section
    assert "### Checks, workload `own`" in section
    block = cache_readme.readme_block(data, source)
    own_claim = "Every conversation with a system prompt of its own: **EZAT routing: "
    assert f"{own_claim}{cache_report.pct(ezat)} hit rate" in block
    assert f"{ezat / rr:.2f}× (own prompts)" in block
    assert "The 3× target is met with own prompts only" in block
    own["runs"] = [r for r in own["runs"] if r["name"] != "random"]
    with pytest.raises(ValueError, match="own"):
        cache_readme.readme_block(data, source)


def _quick_both(tmp_path: Path, *args: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two quick runs with the same arguments, side by side (each its own gateways, simulators
    and database): half the wall time of one after the other, and two runs whose timing
    differs all the more."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    procs = {}
    for name in ("one", "two"):
        out = tmp_path / name
        cmd = [sys.executable, "-m", "bench.cache", "--quick", "--out", str(out), *args]
        with (tmp_path / f"{name}.log").open("w") as log:  # the child keeps its own descriptor
            procs[name] = subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )
    try:
        for name, proc in procs.items():
            code = proc.wait(timeout=400)
            assert code == 0, (tmp_path / f"{name}.log").read_text()[-6000:]
    finally:
        for proc in procs.values():
            if proc.poll() is None:  # bench.cache stops what it started on SIGTERM
                proc.terminate()
                proc.wait(timeout=60)
    one, two = (orjson.loads((tmp_path / n / "cache.json").read_bytes()) for n in ("one", "two"))
    return one, two


TIMING = {"real_seconds", "gateway_cpu_ms_per_request", "redis_commands_per_request",
          "cooldown_seconds", "notes"}  # fmt: skip


@pytest.mark.e2e
@pytest.mark.timeout(600)  # two quick runs side by side, up to 400 s (a loaded 2-core box)
def test_same_seed_same_numbers_through_the_gateway(tmp_path: Path) -> None:
    """Two quick runs with one seed: every figure equal (no timings are asserted). The runs
    chosen are the ones whose routing could depend on timing: random and least busy draw from
    the gateway's own state, and churn depends on the gateway's cooldown."""
    runs = ("--runs", "random,least_busy", "--seed", "11")
    one, two = _quick_both(tmp_path, *runs)
    assert one["workload"] == two["workload"]
    assert one["ceiling"] == two["ceiling"]
    assert len(one["runs"]) == 6
    for a, b in zip(one["runs"], two["runs"], strict=True):
        assert {k: v for k, v in a.items() if k not in TIMING} == {
            k: v for k, v in b.items() if k not in TIMING
        }, (a["scenario"], a["name"])
    for run in one["runs"]:
        assert run["errors"] == 0 and run["bill_matches"], run
        if run["scenario"] == "churn":
            assert run["fault_hits"] == cache_bench.COOLDOWN_FAILURES
    ezat = cache_report.find(one, "base", "ezat")
    assert ezat["moves"] == 0  # sticky
    assert ezat["hit_rate"] > cache_report.find(one, "base", "random")["hit_rate"]
    markdown = (tmp_path / "one" / "cache.md").read_text()
    assert "## Churn" in markdown and "## Targets" not in markdown  # no round-robin run


def test_cache_sources_split_reads_by_where_the_conversation_went_before() -> None:
    """bench.cache_sources: one conversation, turns at 0, 60, 120, 600 and 700 s on
    deployments 0, 0, 1 (never used), 0 (last used 540 s before) and 2 (never used)."""
    from bench.cache_sources import KINDS, sources
    from bench.cache_workload import Conversation, Turn

    turns = tuple(Turn(s, 1.0, "", "") for s in (0, 60, 120, 600, 700))
    conv = Conversation(0, None, False, turns)  # type: ignore[arg-type]
    rows = [
        [0, 0, 0.0, 0, 0, 0, 100, 0],
        [0, 1, 60.0, 0, 0, 100, 20, 0],
        [0, 2, 120.0, 1, 0, 0, 120, 0],
        [0, 3, 600.0, 0, 0, 100, 60, 0],
        [0, 4, 700.0, 2, 0, 0, 200, 0],
    ]
    found = sources(rows, {0: conv})
    assert [found[k][0] for k in KINDS] == [1, 1, 0, 1, 2]
    assert found[KINDS[1]][1] == pytest.approx(100 * 100 / 700)
    assert found[KINDS[3]][1] == pytest.approx(100 * 100 / 700)  # the 1h entry on deployment 0
    rows[3][3] = 1  # turn 3 on deployment 1, where turn 2 went: the previous turn's
    assert sources(rows, {0: conv})[KINDS[1]][0] == 2
