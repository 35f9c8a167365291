"""Two phases of `bench.run` that put EZAT beside something else in the same run:

- `peers(runner)` (`--peers litellm,portkey`): EZAT's `/openai/v1/chat/completions` and each peer's
  chat completions, all in front of the run's fake upstream, measured in rounds. Each round runs
  every contender's cells back to back, in an order that rotates from round to round, so a drift
  in the machine's load lands on all of them; each figure is the median over rounds, and the
  report gives EZAT ÷ peer. Every gateway is pinned to the server core (only the one under load
  is busy); the load generator and the upstream share the other.
- `scale(runner)` (phase `scale`): one gateway with 1 worker and one with 2 (same database and
  Redis), interleaved at each concurrency of a sweep; throughput of each at the same p99 bound.
  Nothing is pinned: the 2-worker gateway needs both cores, and the load generator, the upstream,
  PostgreSQL and Redis share them, as on a real 2-core host.
"""

from __future__ import annotations

import asyncio
import os
import statistics
from typing import TYPE_CHECKING, Any

from bench import loadgen
from bench import peers as peer_mod
from bench.procs import BenchError, cpu_seconds, process_tree
from bench.yardstick import event_base, parallel_capacity, times

if TYPE_CHECKING:
    from bench.run import Runner

Row = dict[str, Any]
# (label, stream, concurrency): the request cells of each round; events are measured after them.
PEER_CELLS = (("json C=1", False, 1), ("json C=16", False, 16), ("stream C=1", True, 1))
EVENT_CONC = 4  # long streams through a slow peer (~2 ms per event) must finish within --timeout
SCALE_CONC = (1, 4, 16, 32, 64)
SCALE_CONC_QUICK = (1, 8)
SCALE_SERVERS = (("uvicorn", 1), ("uvicorn", 2), ("granian", 2))


async def _gateway_targets(
    runner: Runner, workers: int, name: str, cpu: int | None, server: str | None = None
) -> tuple[loadgen.Target, int]:
    """Another EZAT gateway on the run's database and Redis (set up once per run)."""
    args, procs = runner.args, runner.procs
    if runner.gw_env is None:
        redis = args.redis if args.redis is not None else args.db == "postgres"
        runner.gw_env = procs.gateway_env(args.db, redis)
        runner.gw_key = await asyncio.to_thread(procs.setup_gateway, runner.gw_env, runner.up_port)
    port, pid = await asyncio.to_thread(
        procs.start_gateway, runner.gw_env, server or args.server, cpu, workers, name
    )
    target = loadgen.Target(
        "127.0.0.1", port, "/openai/v1/chat/completions", "openai", runner.gw_key
    )
    return target, pid


async def _start_peer(runner: Runner, name: str) -> tuple[loadgen.Target, int]:
    procs, up = runner.procs, runner.up_port
    if name == "litellm":
        port, pid, key = await asyncio.to_thread(
            peer_mod.start_litellm, procs, up, runner.server_cpu
        )
        return loadgen.Target("127.0.0.1", port, "/v1/chat/completions", "openai", key), pid
    if name == "floor":
        port, pid, key = await asyncio.to_thread(peer_mod.start_floor, procs, up, runner.server_cpu)
        return loadgen.Target("127.0.0.1", port, "/v1/chat/completions", "openai", key), pid
    port, pid, key = await asyncio.to_thread(peer_mod.start_portkey, procs, up, runner.server_cpu)
    headers = "".join(f"{k}: {v}\r\n" for k, v in peer_mod.portkey_headers(up))
    target = loadgen.Target("127.0.0.1", port, "/v1/chat/completions", "openai", key, headers)
    return target, pid


async def _smoke(runner: Runner, name: str, target: loadgen.Target) -> None:
    for stream in (False, True):
        res = await loadgen.run_closed(
            target, stream=stream, concurrency=1, requests=1, duration=60, timeout=60
        )
        if res.errors:
            raise BenchError(f"{name} stream={stream} failed: {res.first_error[:800]}")


async def peers(runner: Runner) -> None:
    names = runner.args.peers
    contenders: dict[str, tuple[loadgen.Target, int]] = {}
    runner.log("peers: starting EZAT (/openai/v1/chat/completions)")
    contenders["ezat"] = await _gateway_targets(runner, 1, "ezat-peers", runner.server_cpu)
    for name in names:
        runner.log(f"peers: installing (first use only) and starting {name}")
        contenders[name] = await _start_peer(runner, name)
    for name, (target, _) in contenders.items():
        await _smoke(runner, name, target)
    order = list(contenders)
    for rnd in range(runner.args.rounds):
        shift = rnd % len(order)
        for name in order[shift:] + order[:shift]:
            target, pid = contenders[name]
            await _one_round(runner, name, target, pid, rnd)


async def _one_round(runner: Runner, name: str, target: loadgen.Target, pid: int, rnd: int) -> None:
    for label, stream, conc in PEER_CELLS:
        row = await runner.cell(target, pid, stream=stream, conc=conc, prompt=1000)
        row.update(section="peers", target=name, figure=label, round=rnd)
        runner.rows.append(row)
        runner.log(f"round {rnd + 1} {name} {label}: {_short(row)}")
    for paced in (False, True):
        ev = await runner.event_cost(
            name, "openai", target, pid, paced=paced, conc=EVENT_CONC, section="peer-events"
        )
        ev.update(figure="events 1 ms apart" if paced else "events back to back", round=rnd)
        runner.rows.append(ev)


def _short(row: Row) -> str:
    return (
        f"{row['rps']:.0f} req/s, p50 {row['p50_ms']} ms, CPU {row['cpu_ms_per_req']} ms/req, "
        f"db+redis {row['services_cpu_ms_per_req']} ms/req, errors {row['errors']}"
    )


async def scale(runner: Runner) -> None:
    """Throughput with 1 and 2 workers at the same p99, interleaved concurrency by concurrency."""
    quick = runner.args.quick
    args = runner.args
    if not (args.redis if args.redis is not None else args.db == "postgres"):
        runner.notes.append(
            "scale: skipped: several workers need Redis (the embedded default keeps its limits "
            "in the process); run with --db postgres"
        )
        return
    runner.log("scale: the machine's own two-core capacity (the fixed loop, 1 and 2 at once)")
    runner.rows.append({"section": "scale-machine", **await asyncio.to_thread(parallel_capacity)})
    gateways = {}
    # uvicorn with 1 and 2 workers, and granian with 2 (which server the image should run).
    for server, workers in SCALE_SERVERS:
        runner.log(f"scale: starting EZAT on {server} with {workers} worker(s), unpinned")
        gateways[(server, workers)] = await _gateway_targets(
            runner, workers, f"scale-{server}-{workers}", None, server
        )
    for (server, workers), (target, _) in gateways.items():
        await _smoke(runner, f"{server} {workers} worker(s)", target)
    order = list(gateways)
    # Rounds of the whole sweep, each concurrency measured on every gateway back to back and the
    # order rotating from round to round (1, 2, g; 2, g, 1; ...): a drift in the shared machine's
    # load lands on both worker counts, and each round pairs 1 and 2 workers at the same C.
    for rnd in range(1 if quick else args.rounds):
        shift = rnd % len(order)
        for conc in SCALE_CONC_QUICK if quick else SCALE_CONC:
            for server, workers in order[shift:] + order[:shift]:
                target, pid = gateways[(server, workers)]
                procs = process_tree(pid)
                before = {p: cpu_seconds(p) for p in procs}
                row = await runner.cell(target, pid, stream=False, conc=conc, prompt=1000)
                row.update(
                    section="scale", target=f"{server}-{workers}w", server=server,
                    workers=workers, conc=conc, round=rnd, processes=len(procs),
                    process_shares=_shares(before), loadavg_1m=round(os.getloadavg()[0], 2),
                )  # fmt: skip
                runner.rows.append(row)
                runner.log(
                    f"scale round {rnd + 1} {server} {workers} worker(s) C={conc}: {_short(row)}"
                )


def _shares(before: dict[int, float]) -> list[float]:
    """Each process's share of the server's CPU over the cell (master and workers), largest
    first: workers sharing one listening socket may not share the connections evenly."""
    used = []
    for pid, then in before.items():
        # cpu_seconds counts a process with its descendants: a worker's own is what it adds.
        own = cpu_seconds(pid) - then
        used.append(max(0.0, own))
    kids = sum(used[1:])
    if len(used) > 1:
        used[0] = max(0.0, used[0] - kids)  # the master's own CPU, without its workers'
    total = sum(used) or 1.0
    return sorted((round(u / total, 2) for u in used), reverse=True)


# --- report ---------------------------------------------------------------------------------------
def _median(rows: list[Row], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(vals), 3) if vals else None


def peer_table(rows: list[Row]) -> dict[str, dict[str, dict[str, float | None]]]:
    """{figure: {contender: {metric: median over rounds}}}"""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for r in rows:
        if r["section"] not in ("peers", "peer-events"):
            continue
        out.setdefault(r["figure"], {}).setdefault(r["target"], {})
    for figure, per in out.items():
        for name in per:
            mine = [r for r in rows if r.get("figure") == figure and r["target"] == name]
            if mine[0]["section"] == "peers":
                per[name] = {
                    k: _median(mine, k)
                    for k in (
                        "cpu_ms_per_req",
                        "services_cpu_ms_per_req",
                        "p50_ms",
                        "p99_ms",
                        "ttft_p50_ms",
                        "rps",
                    )
                }
                per[name]["errors"] = sum(r["errors"] for r in mine)
                per[name]["rounds"] = len(mine)
            else:
                per[name] = {
                    "us_per_event": _median(mine, "us_per_event"),
                    "paced_ms": mine[0]["paced_ms"],
                    "errors": sum(r["errors"] for r in mine),
                    "rounds": len(mine),
                }
    return out


def _f(v: float | None, digits: int = 3) -> str:
    if v is None:
        return "–"
    return (
        f"{v:,.0f}"
        if abs(v) >= 1000
        else f"{v:.{digits}g}"
        if abs(v) < 0.01
        else f"{v:.{digits}f}".rstrip("0").rstrip(".")
    )


def _x(value: float | None) -> str:
    return "–" if value is None else f"{value:g}×"


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if not a or not b else f"{a / b:.2f}"


def render_peers(meta: dict[str, Any], rows: list[Row], yard: Row) -> list[str]:
    table = peer_table(rows)
    if not table:
        return []
    names = [n for n in ("litellm", "portkey", "floor") if any(n in per for per in table.values())]
    head = ["figure", "EZAT", "×yardstick", *[n for n in names], *[f"EZAT ÷ {n}" for n in names]]
    out = [
        "### EZAT beside its peers (same run, same fake upstream, interleaved rounds)",
        "",
        f"Medians over {meta.get('rounds', '?')} rounds; in each round every contender ran every "
        "cell in turn, the order rotating from round to round. All speak OpenAI Chat Completions "
        "(EZAT: `/openai/v1/chat/completions`) to the fake upstream through their Anthropic "
        "provider, 1k-token prompt, 64 output tokens; each gateway pinned to the server core, "
        "the load generator and the upstream on the other. *CPU* is the gateway's process tree; "
        "*full stack* adds EZAT's PostgreSQL backends and Redis server (the peers run with no "
        "database: no auth store, limits or billing). Below 1.00 in the last columns EZAT "
        "costs less. ×yardstick: EZAT's figure ÷ the fake upstream's own (CPU per request or "
        "per event) measured at the start of this run.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    up_req = yard.get("upstream_ms_per_req")
    up_req16 = yard.get("upstream_ms_per_req_c16")

    def line(label: str, ez: float | None, base: float | None, key: str, figure: str) -> str:
        vals = [table[figure].get(n, {}).get(key) for n in names]
        cells = [label, _f(ez), _x(times(ez, base))]
        cells += [_f(v) for v in vals] + [_ratio(ez, v) for v in vals]
        return "| " + " | ".join(cells) + " |"

    for figure, per in table.items():
        ez = per.get("ezat", {})
        if "us_per_event" in ez:
            base = event_base(yard, ez.get("paced_ms") or 0)
            label = f"CPU µs per event, {figure}"
            out.append(line(label, ez["us_per_event"], base, "us_per_event", figure))
            continue
        base = up_req16 if "C=16" in figure else up_req
        label = f"CPU ms/request, {figure}"
        out.append(line(label, ez.get("cpu_ms_per_req"), base, "cpu_ms_per_req", figure))
        full = (ez.get("cpu_ms_per_req") or 0) + (ez.get("services_cpu_ms_per_req") or 0)
        vals = [table[figure].get(n, {}).get("cpu_ms_per_req") for n in names]
        cells = [f"full stack CPU ms/request, {figure}", _f(full), _x(times(full, base))]
        cells += [_f(v) for v in vals] + [_ratio(full, v) for v in vals]
        out.append("| " + " | ".join(cells) + " |")
        key = "ttft_p50_ms" if "stream" in figure else "p50_ms"
        what = "TTFT p50 ms" if "stream" in figure else "p50 ms"
        out.append(line(f"{what}, {figure}", ez.get(key), None, key, figure))
    out += _floor_lines(table)
    errs = {
        n: sum(per.get(n, {}).get("errors", 0) for per in table.values()) for n in ["ezat", *names]
    }
    out += ["", f"Errors over all rounds: {', '.join(f'{n} {e}' for n, e in errs.items())}.", ""]
    out += ["Peers:", "", *[f"- {line}" for line in peer_mod.describe(names)], ""]
    return out


def _floor_lines(table: dict[str, dict[str, dict[str, float | None]]]) -> list[str]:
    """Issue 22's item 3 (full stack at most 0.5x Portkey's gateway CPU) beside what a Python
    gateway with no features costs on the same server, in the same run."""
    out = []
    for figure in ("json C=1", "json C=16"):
        per = table.get(figure, {})
        floor = (per.get("floor") or {}).get("cpu_ms_per_req")
        portkey = (per.get("portkey") or {}).get("cpu_ms_per_req")
        if floor is None or portkey is None:
            continue
        ez = per.get("ezat", {})
        gateway = ez.get("cpu_ms_per_req") or 0.0
        services = ez.get("services_cpu_ms_per_req") or 0.0
        out.append(
            f"- {figure}: the floor (no features) costs {_f(floor)} ms of CPU per request, "
            f"{_ratio(floor, portkey)}× Portkey's {_f(portkey)} ms; half of Portkey's is "
            f"{_f(portkey / 2)} ms. EZAT's gateway adds {_f(gateway - floor)} ms to the floor "
            f"and its PostgreSQL and Redis {_f(services)} ms (full stack "
            f"{_f(gateway + services)} ms)."
        )
    return ["", *out] if out else []


def render_scale(rows: list[Row]) -> list[str]:
    scale = [r for r in rows if r["section"] == "scale"]
    if not scale:
        return []
    one = _per_conc(scale, "uvicorn", 1)
    two = _per_conc(scale, "uvicorn", 2)
    gran = _per_conc(scale, "granian", 2)
    # The p99 bound: what one worker reaches at its highest throughput (its saturation point).
    best1 = max(one.values(), key=lambda r: r["rps"])
    bound = best1["p99_ms"]
    within = [r for r in two.values() if r["p99_ms"] is not None and r["p99_ms"] <= bound]
    best2 = max(within, key=lambda r: r["rps"]) if within else None
    out = [
        "### Workers: 1 against 2 (same run, interleaved, nothing pinned)",
        "",
        "`/openai/v1/chat/completions` JSON, 1k-token prompt, closed loop; both gateways on the "
        "same database and Redis, measured alternately at each concurrency (with several rounds: "
        "medians over rounds, the order rotating from round to round). *harness + upstream* "
        "is the CPU the load generator and the fake upstream took per request: on a 2-core "
        "machine they share the cores with the second worker.",
        "",
        "| C | 1 worker req/s | p99 ms | CPU ms/req | 2 workers req/s | p99 ms | CPU ms/req | "
        "2 ÷ 1 | CPU shares (2w) | harness + upstream ms/req (2w) | db+redis ms/req (2w) | "
        "granian 2w req/s | p99 ms | CPU ms/req |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for conc in sorted(one):
        a, b = one[conc], two.get(conc)
        if b is None:
            continue
        side = (b.get("harness_cpu_ms_per_req") or 0) + (b.get("upstream_cpu_ms_per_req") or 0)
        out.append(
            f"| {conc} | {a['rps']:,.0f} | {_f(a['p99_ms'], 2)} | {a['cpu_ms_per_req']} | "
            f"{b['rps']:,.0f} | {_f(b['p99_ms'], 2)} | {b['cpu_ms_per_req']} | "
            f"{b['rps'] / a['rps']:.2f}× | {_split(b)} | {side:.3f} | "
            f"{b['services_cpu_ms_per_req']} | "
            + (
                f"{g['rps']:,.0f} | {_f(g['p99_ms'], 2)} | {g['cpu_ms_per_req']} |"
                if (g := gran.get(conc))
                else "– | – | – |"
            )
        )
    out.append("")
    if best2:
        out.append(
            f"At the same p99 bound ({bound} ms: one worker's p99 at its highest throughput, "
            f"C={best1['conc']}): 1 worker {best1['rps']:,.0f} req/s, 2 workers "
            f"{best2['rps']:,.0f} req/s (C={best2['conc']}, p99 {best2['p99_ms']} ms): "
            f"**{best2['rps'] / best1['rps']:.2f}×**."
        )
    else:
        out.append(f"No 2-worker cell stayed within one worker's p99 bound ({bound} ms).")
    out += _cpu_scaling(one, two)
    out += render_cpu_ratio(scale)
    out += _ceilings(rows, best1)
    if gran:
        cpu_u = _median(list(two.values()), "cpu_ms_per_req")
        cpu_g = _median(list(gran.values()), "cpu_ms_per_req")
        out.append(
            f"\nWith 2 workers, median gateway CPU per request over the sweep: uvicorn {cpu_u} ms, "
            f"granian {cpu_g} ms (granian ÷ uvicorn {_ratio(cpu_g, cpu_u)})."
        )
    return [*out, ""]


def _per_conc(scale: list[Row], server: str, workers: int) -> dict[int, Row]:
    """One row per concurrency for a gateway: its first round's, with the figures the tables
    print replaced by their medians over rounds."""
    out: dict[int, Row] = {}
    mine = [r for r in scale if r.get("server") == server and r["workers"] == workers]
    for conc in sorted({r["conc"] for r in mine}):
        cells = [r for r in mine if r["conc"] == conc]
        row = dict(cells[0])
        for key in SCALE_MEDIANS:
            if any(r.get(key) is not None for r in cells):
                row[key] = _median(cells, key)
        out[conc] = row
    return out


SCALE_MEDIANS = (
    "rps",
    "p99_ms",
    "cpu_ms_per_req",
    "harness_cpu_ms_per_req",
    "upstream_cpu_ms_per_req",
    "services_cpu_ms_per_req",
)
CPU_RATIO_TARGET = 1.1  # issue 35 item 4: 2 workers' CPU per request at most 1.1x one worker's


def cpu_ratios(scale: list[Row], per_worker: bool = False) -> dict[int, list[float]]:
    """Gateway CPU per request with 2 uvicorn workers ÷ with 1, paired within each round at
    each concurrency (same C, same request mix, measured back to back): {conc: [ratio per
    round]}. CPU is the whole server's process tree (master + workers) ÷ requests served.
    With `per_worker`, 2 workers at C are paired with 1 worker at C/2 instead: the same
    concurrency per worker, which tells a worker's own cost from its smaller batches."""
    cells = {
        (r.get("round", 0), r["conc"], r["workers"]): r["cpu_ms_per_req"]
        for r in scale
        if r.get("server", "uvicorn") == "uvicorn"
    }
    out: dict[int, list[float]] = {}
    for (rnd, conc, workers), cpu in sorted(cells.items()):
        base = cells.get((rnd, conc // 2 if per_worker else conc, 1))
        if workers == 2 and cpu and base and not (per_worker and conc % 2):
            out.setdefault(conc, []).append(round(cpu / base, 3))
    return dict(sorted(out.items()))


def _spread(vals: list[float]) -> str:
    lo, hi = min(vals), max(vals)
    return f"{statistics.median(vals):.2f}" + (f" ({lo:.2f}–{hi:.2f})" if len(vals) > 1 else "")


def render_cpu_ratio(scale: list[Row]) -> list[str]:
    """Issue 35 item 4: CPU per request of 2 workers against 1 at the same offered load."""
    ratios = cpu_ratios(scale)
    if not ratios:
        return []
    one = _per_conc(scale, "uvicorn", 1)
    two = _per_conc(scale, "uvicorn", 2)
    out = [
        "",
        f"#### CPU per request, 2 workers ÷ 1 (issue 35 item 4: ≤ {CPU_RATIO_TARGET})",
        "",
        "Gateway CPU-seconds (master + workers) ÷ requests served, 2 uvicorn workers against 1 at "
        "the same concurrency and request mix, paired within each round; the spread is over "
        "rounds (min–max).",
        "",
        "| C | 1 worker CPU ms/req | 2 workers CPU ms/req | 2 ÷ 1 per round | median (min–max) "
        f"| ≤ {CPU_RATIO_TARGET} |",
        "|---|---|---|---|---|---|",
    ]
    for conc, vals in ratios.items():
        med = statistics.median(vals)
        out.append(
            f"| {conc} | {one[conc]['cpu_ms_per_req']} | {two[conc]['cpu_ms_per_req']} | "
            f"{' / '.join(f'{v:.2f}' for v in vals)} | {_spread(vals)} | "
            f"{'✓' if med <= CPU_RATIO_TARGET else '✗'} |"
        )
    every = [v for vals in ratios.values() for v in vals]
    met = [c for c, v in ratios.items() if statistics.median(v) <= CPU_RATIO_TARGET]
    loads = [r["loadavg_1m"] for r in scale if r.get("loadavg_1m") is not None]
    out += [
        "",
        f"Over all {len(every)} pairs: **{_spread(every)}**; the median per concurrency is within "
        f"{CPU_RATIO_TARGET} at C={', '.join(map(str, met)) or 'none'} of "
        f"{', '.join(map(str, ratios))}."
        + (
            f" Load average (1 min) during the cells: {min(loads):.2f}–{max(loads):.2f}."
            if loads
            else ""
        ),
    ]
    if halves := cpu_ratios(scale, per_worker=True):
        out.append(
            "\nAt the same concurrency per worker (2 workers at C against 1 worker at C/2, same "
            "round): "
            + "; ".join(f"C={conc} {_spread(vals)}" for conc, vals in halves.items())
            + " (a worker's own cost, apart from its smaller batches at the same total C)."
        )
    return out


def _split(row: Row) -> str:
    """The processes' shares of the server's CPU (master first when it works at all)."""
    shares = row.get("process_shares") or []
    return " / ".join(f"{s:.0%}" for s in shares if s >= 0.01) or "–"


def _cpu_scaling(one: dict[int, Row], two: dict[int, Row]) -> list[str]:
    """Scaling counted in CPU-seconds: what 2 workers would serve with 2 cores of their own.

    Wall throughput on a 2-core machine cannot show it: the load generator, the fake upstream,
    PostgreSQL and Redis run on the same 2 cores (and, on a shared machine, other people's
    work). What a second worker costs is its CPU per request; with both workers busy and a core
    each, 2 workers serve 2 × (1-worker CPU/request) ÷ (2-worker CPU/request) times one.
    """
    saturated = [c for c in sorted(one) if c >= 16 and c in two]
    if not saturated:
        return []
    cpu1 = statistics.median(one[c]["cpu_ms_per_req"] for c in saturated)
    cpu2 = statistics.median(two[c]["cpu_ms_per_req"] for c in saturated)
    if not cpu1 or not cpu2:
        return []
    return [
        "",
        f"Counted in CPU-seconds (C ≥ 16, median): 1 worker {cpu1:.3f} ms of gateway CPU per "
        f"request, 2 workers {cpu2:.3f} ms; with a core per worker, 2 workers serve "
        f"**{2 * cpu1 / cpu2:.2f}×** one worker. The wall ratio above is what this machine "
        "allows: its 2 cores also run the load generator, the upstream, PostgreSQL and Redis.",
    ]


def _ceilings(rows: list[Row], best: Row) -> list[str]:
    """The two ceilings on the wall ratio that this machine sets, measured in the same run.

    - The machine's: two copies of the fixed loop, one per core, against one alone.
    - The neighbours': at one worker's best cell (`best`), the load generator, the fake upstream,
      PostgreSQL and Redis spend `side` ms of CPU for the gateway's `gw` ms on the same 2 cores,
      so with every core busy the whole box serves at most 2 ÷ (gw + side) requests per ms,
      against one worker's 1 ÷ gw: a ratio of at most 2 × gw ÷ (gw + side).
    """
    machine = next((r for r in rows if r["section"] == "scale-machine"), None)
    out = [""]
    if machine:
        out.append(
            "The machine: two fixed CPU loops at once, one per core, take "
            f"{machine['pair_loop_ms']} ms against {machine['solo_loop_ms']} ms for one alone, "
            "so its two cores do "
            f"**{machine['parallel_capacity']:.2f}×** the work of one: the ceiling of any "
            "two-process speed-up on it."
        )
    gw = best["cpu_ms_per_req"]
    side = sum(
        best.get(k) or 0.0
        for k in ("harness_cpu_ms_per_req", "upstream_cpu_ms_per_req", "services_cpu_ms_per_req")
    )
    if gw:
        out.append(
            f"The neighbours: at one worker's best cell (C={best['conc']}) the load generator, the "
            f"fake upstream, PostgreSQL and Redis took {side:.3f} ms of CPU per request beside the "
            f"gateway's {gw} ms, on the same cores: with both cores busy, 2 workers can serve at "
            f"most **{2 * gw / (gw + side):.2f}×** one worker here."
        )
    return out


def render(meta: dict[str, Any], rows: list[Row]) -> str:
    yard = next((r for r in rows if r["section"] == "yardstick"), {})
    out = render_peers(meta, rows, yard) + render_scale(rows)
    return ("\n" + "\n".join(out)) if out else ""
