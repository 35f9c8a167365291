"""The cache benchmark's numbers (cache.json) and its report (cache.md).

The compute functions turn the runs' per-request outcomes into the figures; everything after
that reads only those figures, so cache.md (here) and the README block (bench/cache_readme.py)
are pure renderings of cache.json, and a test checks both against the committed cache.json.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from itertools import pairwise
from typing import Any

from bench.cache_metrics import Outcome, churn, moves, totals
from bench.cache_workload import Workload
from catalog.pricing import PRICE_KINDS, Prices, PriceSchedule, PriceTier

LABELS = {
    "ezat": "EZAT routing",
    "rendezvous-fallback-on": "rendezvous, breakpoint-aware fallback on",
    "rendezvous-fallback-off": "rendezvous, breakpoint-aware fallback off",
    "modulo": "modulo hash",
    "round_robin": "round-robin",
    "random": "random",
    "least_busy": "least busy",
}


# --- compute (from outcomes) ------------------------------------------------------------------
def describe_workload(workload: Workload) -> dict[str, Any]:
    reqs = workload.requests()
    apis = Counter(c.app.api for c in workload.conversations)
    keyed = sum(1 for c in workload.conversations if c.app.sends_cache_key)
    hour = sum(1 for c in workload.conversations if c.app.system_ttl == "1h")
    turns = [len(c.turns) for c in workload.conversations]
    gaps = [b.start - a.end for c in workload.conversations for a, b in pairwise(c.turns)]
    return {
        "seed": workload.seed,
        "conversations": len(workload.conversations),
        "requests": len(reqs),
        "apps": len(workload.apps),
        "apps_used": len({c.app.index for c in workload.conversations}),
        "turns_min": min(turns),
        "turns_max": max(turns),
        "messages_api_conversations": apis.get("messages", 0),
        "chat_conversations": apis.get("chat", 0),
        "chat_with_prompt_cache_key": keyed,
        "messages_with_1h_system_breakpoint": hour,
        "streamed_conversations": sum(1 for c in workload.conversations if c.stream),
        "gaps": len(gaps),
        "gaps_over_5_minutes": sum(1 for g in gaps if g > 300),
        "gaps_over_1_hour": sum(1 for g in gaps if g > 3600),
        "span_minutes": round(workload.span / 60, 1),
        "churn_minutes": [round(t / 60, 1) for t in workload.churn_window()],
        "fingerprint": workload.fingerprint(),
    }


def schedule_from(tiers: list[dict[str, Any]]) -> PriceSchedule:
    """The model's price tiers as GET /api/models publishes them (`pricingTiers`)."""
    return PriceSchedule(
        version=0,
        tiers=tuple(
            PriceTier(
                t["upToPromptTokens"],
                Prices.from_decimals(*(Decimal(t[kind]) for kind in PRICE_KINDS)),
            )
            for t in tiers
        ),
    )


def run_figures(
    outcomes: Sequence[Outcome],
    schedule: PriceSchedule,
    conversations: int,
    billed: dict[str, int],
) -> dict[str, Any]:
    t = totals(outcomes, schedule)
    moved = moves(outcomes)
    per_1000 = t.cost_nano * 1000 // max(1, conversations)
    return {
        "requests": t.requests,
        "errors": t.errors,
        "hit_rate": round(t.hit_rate, 6),
        "cacheable_tokens": t.cacheable,
        "cache_read_tokens": t.cache_read,
        "cache_write_5m_tokens": t.cache_write_5m,
        "cache_write_1h_tokens": t.cache_write_1h,
        "uncached_input_tokens": t.input_tokens,
        "output_tokens": t.output_tokens,
        "cost_nano": t.cost_nano,
        "billed_cost_nano": billed["cost_nano"],
        "bill_matches": billed["cost_nano"] == t.cost_nano
        and billed["cache_read_tokens"] == t.cache_read
        and billed["cache_write_tokens"] == t.cache_write
        and billed["requests"] == t.requests - t.errors,
        "uncached_cost_nano": t.uncached_cost_nano,
        "saved_nano": t.uncached_cost_nano - t.cost_nano,
        "cost_per_1000_conversations_nano": per_1000,
        "uncached_per_1000_conversations_nano": (
            t.uncached_cost_nano * 1000 // max(1, conversations)
        ),
        "moved_conversations": moved.conversations,
        "moves": moved.moves,
    }


def churn_figures(
    churned: Sequence[Outcome], base: Sequence[Outcome], window: tuple[float, float],
    base_hit_rate: float, hit_rate: float,
) -> dict[str, Any]:  # fmt: skip
    c = churn(churned, base, window)
    return {
        "loss_points": round((base_hit_rate - hit_rate) * 100, 2),
        "phases": {k: round(v, 6) for k, v in c.phases.items()},
        "base_phases": {k: round(v, 6) for k, v in c.base_phases.items()},
        "moved_out": {"conversations": c.moved_out.conversations, "moves": c.moved_out.moves},
        "moved_back": {"conversations": c.moved_back.conversations, "moves": c.moved_back.moves},
        "recoveries": [
            {
                "at_minute": round(r.at / 60, 1),
                "extra_write_tokens": r.extra_writes,
                "minutes_to_recover": (
                    round(r.minutes_to_recover, 1) if r.minutes_to_recover is not None else None
                ),
            }
            for r in c.recoveries
        ],
    }


def outcome_row(o: Outcome) -> list[Any]:
    return [o.conversation, o.turn, o.start, o.deployment, o.input_tokens, o.cache_read,
            o.cache_write_5m, o.cache_write_1h, o.output_tokens, o.status, o.error]  # fmt: skip


# --- render -----------------------------------------------------------------------------------
def usd(nano: int, places: int = 2) -> str:
    return f"${Decimal(nano) / 1_000_000_000:,.{places}f}"


def pct(rate: float) -> str:
    return f"{rate * 100:.1f} %"


def mtok(tokens: int) -> str:
    return f"{tokens / 1e6:,.2f} M"


def label(run: dict[str, Any]) -> str:
    return LABELS.get(run["name"], run["name"])


def scenario_runs(data: dict[str, Any], scenario: str) -> list[dict[str, Any]]:
    return [r for r in data["runs"] if r["scenario"] == scenario]


def find(data: dict[str, Any], scenario: str, name: str) -> dict[str, Any]:
    found = find_opt(data, scenario, name)
    if found is None:
        raise KeyError(f"no {scenario} run of {name}")
    return found


def find_opt(data: dict[str, Any], scenario: str, name: str) -> dict[str, Any] | None:
    return next((r for r in data["runs"] if r["scenario"] == scenario and r["name"] == name), None)


def complete(data: dict[str, Any], at_least: int = 6) -> bool:
    """Every policy in both scenarios (a `--runs` subset is not)."""
    names = {r["name"] for r in scenario_runs(data, "base")}
    return len(names) >= at_least and names == {r["name"] for r in scenario_runs(data, "churn")}


def workloads(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The other workloads of the run (each in cache.json's shape), by Profile.prompts."""
    return dict(data.get("workloads") or {})


OWN = "own"
OWN_TITLE = "every conversation with a system prompt of its own"


def targets(data: dict[str, Any]) -> dict[str, Any] | None:
    ezat, rr = find_opt(data, "base", "ezat"), find_opt(data, "base", "round_robin")
    ezat_churn = find_opt(data, "churn", "ezat")
    if ezat is None or rr is None or ezat_churn is None or "churn" not in ezat_churn:
        return None
    ratio = ezat["hit_rate"] / rr["hit_rate"] if rr["hit_rate"] else float("inf")
    miss_ratio = (1 - rr["hit_rate"]) / (1 - ezat["hit_rate"]) if ezat["hit_rate"] < 1 else 0.0
    return {
        "hit_rate_ratio_vs_round_robin": round(ratio, 2),
        "miss_ratio_round_robin_vs_ezat": round(miss_ratio, 2),
        "ratio_met": ratio >= 3.0,
        "cost_ratio_round_robin_vs_ezat": round(rr["cost_nano"] / max(1, ezat["cost_nano"]), 2),
        "churn_loss_points": ezat_churn["churn"]["loss_points"],
        "churn_met": ezat_churn["churn"]["loss_points"] < 10.0,
    }


def _rendezvous(data: dict[str, Any], scenario: str, on: bool) -> dict[str, Any] | None:
    return next(
        (
            r
            for r in scenario_runs(data, scenario)
            if r["policy"] == "rendezvous" and bool(r["prefix_aware"]) == on
        ),
        None,
    )


def fallback_verdict(data: dict[str, Any]) -> dict[str, Any] | None:
    """The breakpoint-aware fallback's A/B on the churn scenario, over every seed measured: it
    wins when it is never worse (hit rate and cost) and better on at least one seed."""
    on, off = _rendezvous(data, "churn", True), _rendezvous(data, "churn", False)
    base_on, base_off = _rendezvous(data, "base", True), _rendezvous(data, "base", False)
    if on is None or off is None or base_on is None or base_off is None:
        return None
    seeds = data.get("fallback_ab") or [{"seed": data["meta"]["seed"], "on": on, "off": off}]
    gains = [(s["on"]["hit_rate"] - s["off"]["hit_rate"]) * 100 for s in seeds]
    savings = [s["off"]["cost_nano"] - s["on"]["cost_nano"] for s in seeds]
    never_worse = all(g >= 0 for g in gains) and all(v >= 0 for v in savings)
    return {
        "seeds": seeds,
        "mean_gain_points": round(sum(gains) / len(gains), 3),
        "total_saving_nano": sum(savings),
        "wins": never_worse and (any(g > 0 for g in gains) or any(v > 0 for v in savings)),
        "cpu_on": base_on["gateway_cpu_ms_per_request"],
        "cpu_off": base_off["gateway_cpu_ms_per_request"],
        "redis_on": base_on["redis_commands_per_request"],
        "redis_off": base_off["redis_commands_per_request"],
    }


def _base_table(data: dict[str, Any]) -> list[str]:
    lines = [
        "| routing | hit rate | cache reads | cache writes 5m / 1h | cost | per 1,000 conversations"
        " | saved vs caching off | conversations moved (moves) | gateway CPU ms/request"
        " | Redis commands/request |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in scenario_runs(data, "base"):
        redis = r["redis_commands_per_request"]
        saved = r["saved_nano"] / r["uncached_cost_nano"] if r["uncached_cost_nano"] else 0.0
        lines.append(
            f"| {label(r)} | **{pct(r['hit_rate'])}** | {mtok(r['cache_read_tokens'])} "
            f"| {mtok(r['cache_write_5m_tokens'])} / {mtok(r['cache_write_1h_tokens'])} "
            f"| {usd(r['cost_nano'])} | {usd(r['cost_per_1000_conversations_nano'])} "
            f"| {usd(r['saved_nano'])} ({pct(saved)}) "
            f"| {r['moved_conversations']} ({r['moves']}) | {r['gateway_cpu_ms_per_request']:.3f} "
            f"| {'–' if redis is None else f'{redis:.2f}'} |"
        )
    return lines


def _churn_table(data: dict[str, Any]) -> list[str]:
    lines = [
        "| routing | hit rate | change vs base | before / during / after | moved at the outage"
        " (conversations / moves) | moved at the return | extra cache writes: outage / return"
        " | 90 % of them within (simulated min) | cost |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in scenario_runs(data, "churn"):
        c = r["churn"]
        ph = c["phases"]
        out, back = c["recoveries"]

        def minutes(rec: dict[str, Any]) -> str:
            return "–" if rec["minutes_to_recover"] is None else f"{rec['minutes_to_recover']}"

        lines.append(
            f"| {label(r)} | **{pct(r['hit_rate'])}** | {-c['loss_points']:+.2f} points "
            f"| {pct(ph['before'])} / {pct(ph['during'])} / {pct(ph['after'])} "
            f"| {c['moved_out']['conversations']} / {c['moved_out']['moves']} "
            f"| {c['moved_back']['conversations']} / {c['moved_back']['moves']} "
            f"| {mtok(out['extra_write_tokens'])} / {mtok(back['extra_write_tokens'])} "
            f"| {minutes(out)} / {minutes(back)} | {usd(r['cost_nano'])} |"
        )
    return lines


def render(data: dict[str, Any]) -> str:
    out = [
        *_head(data),
        *_base_section(data),
        *_churn_section(data),
        *_fallback_section(data),
        *_targets_section(data),
    ]
    for name, sub in workloads(data).items():
        out += _other_workload_section(name, sub)
    out += _checks_section(data)
    for name, sub in workloads(data).items():
        out += _checks_section(sub, heading=f"### Checks, workload `{name}`")
    return "\n".join(out) + "\n"


def _run_count(data: dict[str, Any]) -> int:
    """Every replay of the run: each workload's runs and the fallback's A/B on other seeds."""
    other_seeds = [s for s in data.get("fallback_ab") or [] if s["seed"] != data["meta"]["seed"]]
    return (
        len(data["runs"])
        + sum(len(sub["runs"]) for sub in workloads(data).values())
        + 2 * len(other_seeds)
    )


def _workload_count(data: dict[str, Any]) -> str:
    others = len(workloads(data))
    return f"{others + 1} workloads (the second below)" if others else "One workload"


def _head(data: dict[str, Any]) -> list[str]:
    meta, w = data["meta"], data["workload"]
    ezat = find(data, "base", "ezat")
    shape = f"{meta['db']}{' + Redis' if meta['redis'] else ''}"
    tiers = data["prices"]
    p = tiers[0]
    tiered = (
        f"; {len(tiers)} tiers by prompt size, each request billed at its prompt's"
        if len(tiers) > 1
        else ""
    )
    return [
        "# Prompt-cache benchmark: EZAT routing against naive routing",
        "",
        f"{meta['date']} · commit {meta['commit']} · seed {meta['seed']} · "
        f"{'quick workload' if meta['quick'] else 'full workload'} · gateway: uvicorn, {shape} · "
        f"{meta['real_seconds']} s of real time for all {_run_count(data)} runs "
        f"({w['span_minutes']} simulated minutes each"
        f"{' on the first workload' if workloads(data) else ''})",
        "",
        f"{_workload_count(data)}, one run, through the real gateway to 4 simulated deployments of "
        f"`{data['model']}` (the project's upstream simulator: one prompt cache each, one "
        "simulated clock the benchmark advances). Each policy gets a fresh gateway process "
        "(`EZAT_ROUTING_POLICY=…`), empty caches and its own org; costs are what the gateway "
        "billed that org, at the catalog prices.",
        "",
        "## Workload",
        "",
        f"- {w['conversations']} conversations, {w['requests']} requests, "
        f"{w['turns_min']}–{w['turns_max']} turns each; {w['apps_used']} apps (system prompt + "
        "tools of 2k–40k tokens, "
        + (
            "each conversation its own)."
            if w["apps_used"] == w["conversations"]
            else "shared by an app's conversations; Zipf popularity)."
        ),
        f"- `/v1/messages` with explicit breakpoints: {w['messages_api_conversations']} "
        f"conversations ({w['messages_with_1h_system_breakpoint']} with a 1-hour breakpoint on "
        "the system prompt, the rest 5 minutes; the newest message always 5 minutes). "
        f"`/openai/v1/chat/completions` with the gateway's automatic breakpoints: "
        f"{w['chat_conversations']} ({w['chat_with_prompt_cache_key']} send "
        f"`prompt_cache_key`). {w['streamed_conversations']} conversations stream.",
        f"- {w['gaps_over_5_minutes']} of {w['gaps']} inter-turn gaps exceed 5 minutes "
        f"({w['gaps_over_1_hour']} exceed an hour); {w['span_minutes']} simulated minutes in all.",
        f"- Fingerprint (SHA-256 of every request, in order): `{w['fingerprint'][:16]}…`",
        "",
        "## Definitions",
        "",
        "- **Cacheable input tokens** of a request: its input tokens at or before its last cache "
        "breakpoint, which the provider either reads from the cache or writes to it "
        "(`cache_read_input_tokens + cache_creation_input_tokens`). Tokens after the last "
        "breakpoint (`input_tokens`) cannot be cached by any routing. Breakpoints are part of "
        "the workload, so every policy has the same cacheable tokens: "
        f"{mtok(ezat['cacheable_tokens'])}.",
        "- **Hit rate** = cache read tokens ÷ cacheable input tokens.",
        "- **Cost**: the gateway's bill for the run (its usage records), at the catalog prices "
        f"(input ${p['input']}, output ${p['output']}, cache read ${p['cacheRead']}, cache "
        f"write 5m ${p['cacheWrite5m']} / 1h ${p['cacheWrite1h']} per million tokens{tiered}; "
        "`GET /api/models`).",
        "- **Caching off**: the same requests' token counts, every input token at the plain "
        "input price (computed, not run: an uncached request is billed exactly so): "
        f"{usd(ezat['uncached_cost_nano'])}, {usd(ezat['uncached_per_1000_conversations_nano'])} "
        "per 1,000 conversations, for every policy.",
        "",
    ]


def _base_section(data: dict[str, Any]) -> list[str]:
    ezat = find(data, "base", "ezat")
    out = ["## Base workload: all 4 deployments healthy", "", *_base_table(data), ""]
    ceiling = data.get("ceiling")
    if ceiling:
        out += [
            f"Ceiling: {pct(ceiling['hit_rate'])}: the same requests replayed, in the same order "
            "and on the same clock, into one cache (as if one deployment served everything: no "
            "routing over 4 deployments reads more). EZAT routing reaches "
            f"{ezat['hit_rate'] / ceiling['hit_rate'] * 100:.1f} % of it.",
            "",
        ]
    return out


def _churn_section(data: dict[str, Any]) -> list[str]:
    w = data["workload"]
    churn_run = find(data, "churn", "ezat")
    return [
        "## Churn: deployment sim-1 cools down at 1/3 of the run and comes back at 2/3",
        "",
        f"1/3 and 2/3 of the requests: simulated minutes {w['churn_minutes'][0]} and "
        f"{w['churn_minutes'][1]} (of {w['span_minutes']}; by requests, not time, as traffic "
        "thins out towards the end). The simulator answers every request to sim-1 with 529 "
        "`overloaded_error` (a scripted fault) from then on, so the gateway fails over and its "
        f"own failure count cools sim-1 down after {churn_run['fault_hits']} failures; at 2/3 "
        "the fault is cleared and, once the cooldown has run out (the harness waits for it in "
        "real time), the next request that prefers sim-1 finds it healthy. Faults rather than "
        "the admin's disable switch: that is how deployments really drop out, and it exercises "
        "the gateway's own cooldown and failover path.",
        "",
        *_churn_table(data),
        "",
        "*Change vs base*: the policy's hit rate here minus its hit rate in the base run (a "
        "policy that spreads conversations gains when one deployment fewer is in play). *Extra "
        "cache writes*: cache write tokens above what the same requests wrote in the base run, "
        "from each event to the next; *90 % within*: simulated minutes from the event until 90 % "
        "of those extra writes had happened (– when there were none).",
        "",
    ]


def _fallback_section(data: dict[str, Any]) -> list[str]:
    fb = fallback_verdict(data)
    if fb is None:
        return []
    redis = (
        f"; Redis commands sent {fb['redis_on']:.2f}/request on, {fb['redis_off']:.2f} off."
        if fb["redis_on"] is not None
        else " (no Redis in this run)."
    )
    default = "on" if find(data, "base", "ezat")["prefix_aware"] else "off"
    verdict = (
        "it wins (never worse, better on at least one seed)" if fb["wins"] else "it does not win"
    )
    rows = [
        "| seed | hit rate, fallback on | off | gain | cost on | cost off |",
        "|---|---|---|---|---|---|",
    ]
    for s in fb["seeds"]:
        on, off = s["on"], s["off"]
        rows.append(
            f"| {s['seed']} | {pct(on['hit_rate'])} | {pct(off['hit_rate'])} "
            f"| {(on['hit_rate'] - off['hit_rate']) * 100:+.2f} points | {usd(on['cost_nano'])} "
            f"| {usd(off['cost_nano'])} |"
        )
    return [
        "## Breakpoint-aware fallback",
        "",
        "When a conversation's own deployment is cooling (or has just failed an attempt), the "
        "gateway prefers the healthy deployment that last answered this conversation, else the "
        "one that most recently answered a request with the same tools and system prompt, over "
        "the next in rendezvous order (gateway/prefix_digest.py). The A/B: the churn scenario, "
        "rendezvous with the fallback on and off, on this run's workload and on other seeds'.",
        "",
        *rows,
        "",
        f"- Mean gain {fb['mean_gain_points']:+.3f} points of hit rate, "
        f"{usd(fb['total_saving_nano'])} saved over the {len(fb['seeds'])} churn runs.",
        f"- Hot path (base scenario, where nobody is displaced): gateway CPU "
        f"{fb['cpu_on']:.3f} ms/request on, {fb['cpu_off']:.3f} off{redis}",
        f"- Verdict: {verdict}; `EZAT_ROUTING_PREFIX_AWARE` is {default} by default.",
        "",
    ]


def _targets_section(data: dict[str, Any], heading: str = "## Targets") -> list[str]:
    t = targets(data)
    if t is None:
        return []
    ezat, rr = find(data, "base", "ezat"), find(data, "base", "round_robin")
    return [
        heading,
        "",
        f"- EZAT's hit rate at least 3× round-robin's on the base workload: "
        f"{pct(ezat['hit_rate'])} vs {pct(rr['hit_rate'])}, "
        f"{t['hit_rate_ratio_vs_round_robin']:.2f}× — **{'met' if t['ratio_met'] else 'not met'}**"
        f". Round-robin misses {t['miss_ratio_round_robin_vs_ezat']:.2f}× as many cacheable "
        f"tokens as EZAT routing and costs {t['cost_ratio_round_robin_vs_ezat']:.2f}× as much."
        + (
            f" No routing can meet it on this workload: 3× round-robin's would be "
            f"{pct(3 * rr['hit_rate'])}, and even the ceiling (one cache for every request) "
            f"reads {pct(data['ceiling']['hit_rate'])}."
            if data.get("ceiling") and 3 * rr["hit_rate"] > data["ceiling"]["hit_rate"]
            else ""
        ),
        f"- EZAT loses less than 10 points of hit rate under churn: it changes by "
        f"{-t['churn_loss_points']:+.2f} points — **{'met' if t['churn_met'] else 'not met'}**.",
        "",
    ]


def _other_workload_section(name: str, sub: dict[str, Any]) -> list[str]:
    """A second workload of the same run: the same conversations' shape, APIs, breakpoints
    and gaps, but (`own`) no system prompt shared between conversations."""
    w = sub["workload"]
    title = OWN_TITLE if name == OWN else f"`{name}`"
    out = [
        f"# Second workload: {title}",
        "",
        f"The same run, `--prompts {name}`: {w['conversations']} conversations, "
        f"{w['requests']} requests, {w['turns_min']}–{w['turns_max']} turns, drawn the same "
        "way as above (APIs, breakpoints and their TTLs, `prompt_cache_key`, think times) except "
        "that each conversation has a system prompt + tools of 2k–40k tokens of its own "
        f"({w['apps_used']} different ones), so no prefix is shared between conversations: a "
        "request can only "
        "read what its own conversation's earlier turns wrote, on the deployment they went to. "
        "This is the reading of the issue's workload where round-robin should fare worst.",
        "",
        f"- {w['messages_api_conversations']} `/v1/messages` conversations "
        f"({w['messages_with_1h_system_breakpoint']} with a 1-hour system breakpoint), "
        f"{w['chat_conversations']} chat ({w['chat_with_prompt_cache_key']} with "
        f"`prompt_cache_key`); {w['gaps_over_5_minutes']} of {w['gaps']} gaps exceed 5 minutes; "
        f"fingerprint `{w['fingerprint'][:16]}…`.",
        "",
        "## Base",
        "",
        *_base_table(sub),
        "",
    ]
    ceiling, ezat = sub.get("ceiling"), find_opt(sub, "base", "ezat")
    if ceiling and ezat:
        out += [
            f"Ceiling (every request in one cache): {pct(ceiling['hit_rate'])}; EZAT routing "
            f"reaches {ezat['hit_rate'] / ceiling['hit_rate'] * 100:.1f} % of it.",
            "",
        ]
    if any("churn" in r for r in scenario_runs(sub, "churn")):
        out += ["## Churn (the same outage, 1/3 to 2/3 of the requests)", "", *_churn_table(sub)]
        out.append("")
    out += _targets_section(sub, heading="## Targets on this workload")
    return out


def _checks_section(data: dict[str, Any], heading: str = "## Checks") -> list[str]:
    out = [heading, ""]
    for r in data["runs"]:
        checks = [
            f"{r['requests']} requests, {r['errors']} errors",
            "bill = simulators' accounting at catalog prices"
            if r["bill_matches"]
            else "**bill differs from the simulators' accounting**",
            f"{r['real_seconds']} s",
        ]
        if r["scenario"] == "churn":
            checks.append(
                f"{r['fault_hits']} requests hit the fault (cooldown {r['cooldown_seconds']} s)"
            )
        if r["unexpected_requests"]:
            checks.append(f"{r['unexpected_requests']} unattributed requests")
        out.append(f"- {r['scenario']} / {label(r)}: " + "; ".join(checks) + ".")
        out += [f"  - {note}" for note in r["notes"]]
    out += [f"- {note}" for note in data["notes"]]
    return out
