"""The yardstick, the peers' comparison and the workers' table in a benchmark report, and the
README's performance block: rendered from given rows, so every multiple and ratio is checked
exactly (no timings are measured here)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from bench import compare, peers, perf_readme, report
from bench.run_options import parse_args

REPO = Path(__file__).resolve().parents[2]
YARD = {
    "section": "yardstick",
    "loop_ms": 40.0,
    "loop_ms_median": 42.0,
    "loop_iterations": 200_000,
    "upstream_ms_per_req": 0.1,
    "upstream_ms_per_req_c16": 0.05,
    "upstream_us_per_event": 0.1,
    "upstream_us_per_event_paced": 10.0,
}
META = {
    "date": "2026-12-01 22:00 UTC",
    "commit": "abc1234",
    "cpu": "Test CPU",
    "cpus": 2,
    "kernel": "6",
    "python": "3.11",
    "server": "uvicorn",
    "db": "postgres",
    "redis": True,
    "quick": False,
    "pinned": True,
    "rounds": 2,
}


def _cell(target: str, figure: str, rnd: int, cpu: float, services: float = 0.0) -> dict:
    return {
        "section": "peers", "target": target, "figure": figure, "round": rnd,
        "cpu_ms_per_req": cpu, "services_cpu_ms_per_req": services, "p50_ms": 1.0,
        "p99_ms": 2.0, "ttft_p50_ms": 0.5 if "stream" in figure else None, "rps": 100.0,
        "errors": 0,
    }  # fmt: skip


def _event(target: str, paced: bool, rnd: int, us: float) -> dict:
    figure = "events 1 ms apart" if paced else "events back to back"
    return {
        "section": "peer-events", "target": target, "figure": figure, "round": rnd,
        "paced_ms": 1.0 if paced else 0.0, "us_per_event": us, "errors": 0,
    }  # fmt: skip


def _rows() -> list[dict]:
    rows: list[dict] = [YARD]
    for rnd in (0, 1):
        # EZAT 2.0 ms (+1.0 db/redis); Portkey 4.0; LiteLLM 20 (medians over the two rounds).
        rows += [
            _cell("ezat", "json C=1", rnd, 2.0 + rnd * 0.2, 1.0),
            _cell("portkey", "json C=1", rnd, 4.0 + rnd * 0.4),
            _cell("litellm", "json C=1", rnd, 20.0 + rnd * 2),
            _event("ezat", True, rnd, 30.0),
            _event("portkey", True, rnd, 60.0),
            _event("litellm", True, rnd, 1500.0),
        ]
    for server, workers, rps, p99 in (("uvicorn", 1, 1000.0, 20.0), ("uvicorn", 2, 1500.0, 19.0),
                                      ("granian", 2, 1400.0, 21.0)):  # fmt: skip
        rows.append({
            "section": "scale", "target": f"{server}-{workers}w", "server": server,
            "workers": workers, "conc": 16, "rps": rps, "p99_ms": p99, "cpu_ms_per_req": 1.0,
            "harness_cpu_ms_per_req": 0.1, "upstream_cpu_ms_per_req": 0.05,
            "services_cpu_ms_per_req": 0.3,
        })  # fmt: skip
    return rows


def test_peer_table_is_medians_over_rounds() -> None:
    table = compare.peer_table(_rows())
    assert table["json C=1"]["ezat"]["cpu_ms_per_req"] == 2.1
    assert table["json C=1"]["portkey"]["cpu_ms_per_req"] == 4.2
    assert table["json C=1"]["ezat"]["rounds"] == 2
    assert table["events 1 ms apart"]["litellm"]["us_per_event"] == 1500.0


def test_report_states_ratios_to_peers_and_multiples_of_the_yardstick() -> None:
    md = compare.render({**META, "peers": ["litellm", "portkey"]}, _rows())
    # CPU per request: 2.1 ms = 21× the upstream's 0.1 ms; ÷ LiteLLM 21 = 0.10, ÷ Portkey 4.2 = 0.50
    assert "| CPU ms/request, json C=1 | 2.1 | 21× | 21 | 4.2 | 0.10 | 0.50 |" in md
    # Full stack adds the database and Redis: 3.1 ms.
    assert "| full stack CPU ms/request, json C=1 | 3.1 | 31× | 21 | 4.2 | 0.15 | 0.74 |" in md
    assert "| CPU µs per event, events 1 ms apart | 30 | 3× | 1,500 | 60 | 0.02 | 0.50 |" in md
    assert "@hono/node-server" in md and peers.HONO_NODE_SERVER in md
    # Workers: 2 workers within one worker's p99 (20 ms): 1,500 ÷ 1,000.
    assert "**1.50×**" in md
    assert "granian ÷ uvicorn 1.00" in md


def test_report_has_the_yardstick_and_gateway_multiples() -> None:
    plan = SimpleNamespace(requests=10, seconds=1.0, sustained_seconds=6.0, open_streams=10)
    gw = {
        "section": "matrix", "target": "gateway", "api": "messages", "stream": False,
        "conc": 1, "prompt": 1000, "requests": 10, "errors": 0, "rps": 10.0, "p50_ms": 1.0,
        "p99_ms": 2.0, "ttft_p50_ms": None, "ttft_p99_ms": None, "cpu_ms_per_req": 0.8,
        "services_cpu_ms_per_req": 0.2, "other_cpus": 0.0,
    }  # fmt: skip
    md = report.render(META, plan, [YARD, gw], [])
    assert "### Yardstick (measured first, on the server core)" in md
    assert "| fixed CPU loop (best / median of 5) | 40.00 / 42.00 ms |" in md
    # 0.8 ms = 8× the upstream's C=1 request, 0.02× the 40 ms loop; full stack 1.0 ms = 10×.
    assert "| messages | json | 1 | 1k | 0.800 | 8.0× | 0.020× | 0.200 | 10.0× |" in md


def test_readme_block_from_rows_states_multiples_ratios_and_targets() -> None:
    block = perf_readme.readme_block({"meta": META, "rows": _rows()}, "bench/results/x")
    assert block.startswith(perf_readme.START) and block.endswith(perf_readme.END)
    assert "| gateway CPU per request, JSON, C=1 | 21.0× the bare upstream's request | " in block
    # Full stack 3.1 ms against Portkey's 4.2: 0.74, above the 0.5 target.
    assert "3.100 ms | 0.74 | 0.15 | ≤ 0.5× Portkey's gateway | ✗ |" in block
    assert "| 1.50× | 1,000 → 1,500 req/s at p99 ≤ 20.00 ms | – | – | ≥ 1.7× | ✗ |" in block


def test_readme_block_is_generated_from_the_committed_results() -> None:
    source = perf_readme.readme_source()
    assert source is not None, "README.md has no perf-bench block"
    data = orjson.loads((REPO / source / "results.json").read_bytes())
    assert perf_readme.readme_block(data, source) in (REPO / "README.md").read_text()
    assert (REPO / source / "report.md").exists()


def test_workers_report_counts_scaling_in_cpu_seconds_and_shows_each_process_share() -> None:
    rows = [YARD]
    for workers, conc, rps, cpu, shares in (
        (1, 4, 300.0, 1.2, [1.0]),
        (2, 4, 250.0, 1.5, [0.97, 0.03]),  # one worker took every connection
        (1, 16, 400.0, 1.0, [1.0]),
        (2, 16, 380.0, 1.25, [0.5, 0.5]),
        (1, 64, 400.0, 1.0, [1.0]),
        (2, 64, 390.0, 1.25, [0.52, 0.48]),
    ):
        rows.append({
            "section": "scale", "target": f"uvicorn-{workers}w", "server": "uvicorn",
            "workers": workers, "conc": conc, "rps": rps, "p99_ms": 50.0, "cpu_ms_per_req": cpu,
            "harness_cpu_ms_per_req": 0.1, "upstream_cpu_ms_per_req": 0.05,
            "services_cpu_ms_per_req": 0.3, "process_shares": shares,
        })  # fmt: skip
    rows.append({
        "section": "scale-machine", "solo_loop_ms": 30.0, "pair_loop_ms": 40.0,
        "parallel_capacity": 1.5,
    })  # fmt: skip
    md = compare.render(META, rows)
    assert "| 97% / 3% |" in md and "| 50% / 50% |" in md
    # The machine's two cores do 2 × 30 ÷ 40 = 1.5× one; one worker's best cell (C=16, 400
    # req/s) spent 0.45 ms beside its 1.0 ms: 2 × 1.0 ÷ 1.45 = 1.38× at most.
    assert "its two cores do **1.50×** the work of one" in md
    assert "0.450 ms of CPU per request beside the gateway's 1.0 ms" in md
    assert "at most **1.38×** one worker here" in md
    # C ≥ 16 only: 1.0 ms against 1.25 ms, so a core per worker gives 2 × 1.0 ÷ 1.25.
    assert "1 worker 1.000 ms of gateway CPU per request, 2 workers 1.250 ms" in md
    assert "**1.60×** one worker" in md


def test_report_names_the_largest_held_open_level_within_the_bound() -> None:
    plan = SimpleNamespace(requests=10, seconds=1.0, sustained_seconds=6.0, open_streams=1000)

    def sustained(target: str, api: str, level: int, p99: float, errors: int = 0) -> dict:
        return {
            "section": "open", "shape": "sustained", "target": target, "api": api,
            "streams": level, "delay_ms": 300.0, "requests": level, "errors": errors,
            "ttft_p50_ms": p99, "ttft_p99_ms": p99, "arrivals_per_s": level / 6,
            "client_max_open": level, "peak_rss_kb": 1, "kb_per_stream": 1.0,
            "cpu_ms_per_stream": 3.0, "upstream_max_open": level, "other_cpus": 0.0,
        }  # fmt: skip

    rows = [YARD]
    for level, up, gw in ((250, 300.0, 330.0), (500, 300.0, 440.0), (1000, 320.0, 900.0)):
        rows += [
            sustained("upstream", "direct", level, up),
            sustained("gateway", "openai", level, gw),
        ]
    # Within 1.5x at 250 and 500 (1.47x); 1,000 is 2.8x. A level with errors never counts.
    rows.append(sustained("gateway", "messages", 250, 310.0, errors=3))
    md = report.render(META, plan, rows, [])
    assert (
        "- openai: largest held-open level within 1.5× the bare upstream's TTFT p99: **500**" in md
    )
    assert "250: 1.10×, 500: 1.47×, 1,000: 2.81×" in md
    assert "- messages:" not in md


def test_open_levels_option_is_parsed_and_checked() -> None:
    assert parse_args(["--open-levels", "250,500,1000"]).open_levels == [250, 500, 1000]
    assert parse_args([]).open_levels is None  # the plan's one level
    for bad in ("a,b", "0", ","):
        with pytest.raises(SystemExit):
            parse_args(["--open-levels", bad])


def test_readme_block_states_open_streams_at_the_largest_level_measured() -> None:
    """A run with --open-levels 250,1000 has a row per level: the README's row is the 1,000
    one (the issue's level), not whichever came first."""

    def open_row(target: str, streams: int, p99: float, api: str = "direct") -> dict:
        return {
            "section": "open", "target": target, "api": api, "shape": "sustained",
            "streams": streams, "ttft_p99_ms": p99, "cpu_ms_per_stream": 5.0,
        }  # fmt: skip

    rows = [
        *_rows(),
        open_row("upstream", 250, 300.0),
        open_row("upstream", 1000, 310.0),
        open_row("gateway", 250, 300.0, "openai"),
        open_row("gateway", 1000, 620.0, "openai"),
    ]
    block = perf_readme.readme_block({"meta": META, "rows": rows}, "bench/results/x")
    assert "| 1,000 streams sustained, TTFT p99 (`openai`) | 2.00× the bare upstream's p99 | " in (
        block
    )
    assert "620 ms vs 310 ms" in block and "≤ 1.5× the bare upstream's | ✗ |" in block


def _scale_row(rnd: int, workers: int, conc: int, cpu: float, server: str = "uvicorn") -> dict:
    return {
        "section": "scale", "target": f"{server}-{workers}w", "server": server,
        "workers": workers, "conc": conc, "round": rnd, "rps": 100.0 * workers, "p99_ms": 5.0,
        "cpu_ms_per_req": cpu, "harness_cpu_ms_per_req": 0.1, "upstream_cpu_ms_per_req": 0.05,
        "services_cpu_ms_per_req": 0.3, "process_shares": [0.5, 0.5], "loadavg_1m": 2.0 + rnd,
    }  # fmt: skip


def test_workers_cpu_ratio_pairs_two_workers_with_one_in_the_same_round() -> None:
    rows = [
        _scale_row(0, 1, 16, 1.0), _scale_row(0, 2, 16, 1.05),
        _scale_row(1, 2, 16, 1.5), _scale_row(1, 1, 16, 1.2),  # order rotated: still paired
        _scale_row(2, 1, 16, 0.8), _scale_row(2, 2, 16, 1.0),
        _scale_row(0, 1, 64, 1.0), _scale_row(0, 2, 64, 1.3),
        _scale_row(1, 1, 64, 1.0),  # its 2-worker cell is missing: no pair in round 1
        _scale_row(0, 2, 64, 9.0, server="granian"),  # another server is never paired
    ]  # fmt: skip
    # C=16: 1.05/1.0, 1.5/1.2, 1.0/0.8 -> 1.05, 1.25, 1.25; C=64: 1.3.
    assert compare.cpu_ratios(rows) == {16: [1.05, 1.25, 1.25], 64: [1.3]}
    lines = compare.render_cpu_ratio(rows)
    # Medians per C: 1.25 and 1.30, both above 1.1; over all pairs 1.25, from 1.05 to 1.30.
    assert "| 16 | 1.0 | 1.05 | 1.05 / 1.25 / 1.25 | 1.25 (1.05–1.25) | ✗ |" in lines
    assert "| 64 | 1.0 | 1.3 | 1.30 | 1.30 | ✗ |" in lines
    summary = next(line for line in lines if line.startswith("Over all"))
    assert summary.startswith("Over all 4 pairs: **1.25 (1.05–1.30)**; ")
    assert "within 1.1 at C=none of 16, 64. Load average (1 min) during the cells: 2.00–4.00." in (
        summary
    )


def test_workers_table_takes_medians_over_rounds() -> None:
    rows = [YARD]
    for rnd, cpu1, cpu2 in ((0, 1.0, 1.05), (1, 3.0, 3.3), (2, 1.2, 1.2)):
        rows += [_scale_row(rnd, 1, 16, cpu1), _scale_row(rnd, 2, 16, cpu2)]
    md = compare.render(META, rows)
    # Medians: 1 worker 1.2 ms, 2 workers 1.2 ms; ratios 1.05, 1.10, 1.00 -> median 1.05: met.
    assert "| 16 | 1.2 | 1.2 | 1.05 / 1.10 / 1.00 | 1.05 (1.00–1.10) | ✓ |" in md
    assert "within 1.1 at C=16 of 16" in md


def test_workers_cpu_ratio_at_the_same_concurrency_per_worker() -> None:
    rows = [_scale_row(rnd, 1, 16, 1.0 + rnd / 10) for rnd in (0, 1)]
    rows += [_scale_row(0, 2, 32, 1.1), _scale_row(1, 2, 32, 1.32), _scale_row(0, 2, 16, 2.0)]
    # 2 workers at C=32 against 1 at C=16 of the same round: 1.1 / 1.0, 1.32 / 1.1.
    assert compare.cpu_ratios(rows, per_worker=True) == {32: [1.1, 1.2]}
    assert (
        "2 workers at C against 1 worker at C/2, same round): C=32 1.15 (1.10–1.20) (a worker"
        in ("\n".join(compare.render_cpu_ratio(rows)))
    )


def test_report_header_states_ram_and_load_average() -> None:
    plan = SimpleNamespace(requests=10, seconds=1.0, sustained_seconds=6.0, open_streams=10)
    meta = {**META, "ram_gib": 23.5, "loadavg_start": [1.5, 1.2, 1.0], "loadavg_end": [3, 2, 1]}
    md = report.render(meta, plan, [YARD], [])
    assert "· 23.5 GiB RAM · load average start 1.50 / 1.20 / 1.00, end 3.00 / 2.00 / 1.00" in md
