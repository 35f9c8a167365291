"""Smoke tests for the benchmark harness: it runs and reports, with no timing assertions.

The fake upstream and the load generator run in-process; `bench.run --quick` runs as a subprocess
(against the upstream alone, and — marked e2e — through the real gateway).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from bench import loadgen, report
from bench.fake_upstream import Config, start_server

REPO = Path(__file__).resolve().parents[2]


async def _upstream(**config: float) -> tuple[object, loadgen.Target, object]:
    server, stats = await start_server("127.0.0.1", 0, Config(api_key="sk-test", **config))
    port = server.sockets[0].getsockname()[1]
    return server, loadgen.Target("127.0.0.1", port, "/v1/messages", "anthropic", "sk-test"), stats


@pytest.mark.parametrize("stream", [False, True])
async def test_closed_loop_against_fake_upstream(stream: bool) -> None:
    server, target, stats = await _upstream()
    try:
        res = await loadgen.run_closed(
            target, stream=stream, concurrency=4, requests=40, duration=10, prompt_tokens=1000
        )
    finally:
        server.close()
    summary = res.summary()
    assert summary["errors"] == 0, summary["first_error"]
    assert summary["requests"] == 40
    assert stats.requests >= 40
    if stream:
        assert summary["ttft_p50_ms"] is not None
        assert stats.streams == 40
    else:
        assert summary["ttft_p50_ms"] is None


async def test_stream_is_well_formed_and_sized_by_max_tokens() -> None:
    server, target, _ = await _upstream()
    try:
        reader, writer = await asyncio.open_connection(target.host, target.port)
        writer.write(loadgen.build_request(target, stream=True, prompt_tokens=10, max_tokens=5))
        raw = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5)
        writer.close()
    finally:
        server.close()
    events = re.findall(rb"^event: (\w+)$", raw, flags=re.M)
    assert events == [
        b"message_start", b"ping", b"content_block_start", *[b"content_block_delta"] * 5,
        b"content_block_stop", b"message_delta", b"message_stop",
    ]  # fmt: skip
    assert b'"output_tokens":5' in raw


async def test_wrong_upstream_key_is_an_error_with_its_body() -> None:
    server, target, _ = await _upstream()
    bad = loadgen.Target(target.host, target.port, target.path, "anthropic", "nope")
    try:
        res = await loadgen.run_closed(bad, stream=False, concurrency=1, requests=2, duration=5)
    finally:
        server.close()
    assert res.errors == 2
    assert "authentication_error" in res.first_error


async def test_open_streams_are_held_concurrently() -> None:
    server, target, stats = await _upstream(first_event_delay=0.2)
    try:
        res = await loadgen.run_open_streams(target, streams=30, timeout=10)
    finally:
        server.close()
    assert res.errors == 0, res.first_error
    assert len(res.ttfts) == 30
    assert stats.max_open_streams == 30


async def test_sustained_streams_hold_the_level_with_new_ones_arriving() -> None:
    """20 streams paced to last 0.5 s, 40 new per second for 1.5 s: the level reaches ~20 and
    the streams that started there are reported on their own."""
    server, target, stats = await _upstream(first_event_delay=0.1, event_delay=0.4 / 10)
    try:
        res = await loadgen.run_sustained_streams(
            target, level=20, stream_seconds=0.5, duration=1.5, max_tokens=8, timeout=10
        )
    finally:
        server.close()
    assert res.all.errors == 0, res.all.first_error
    assert res.all.requests == 60
    assert res.arrivals_per_s == 40.0
    assert 15 <= res.max_open <= 30
    assert 0 < res.steady.requests < res.all.requests
    assert len(res.steady.ttfts) == res.steady.requests
    assert stats.max_open_streams >= 15


def test_loadgen_refuses_non_loopback() -> None:
    with pytest.raises(ValueError, match="loopback"):
        loadgen.Target.from_url("http://example.com/v1/messages")


def test_prompt_size_is_about_four_chars_per_token() -> None:
    assert len(loadgen.prompt_text(1000)) == 4000


# Issue 22: `--quick` (what CI runs) stays under 2 minutes: 65-70 s on a shared 2-core machine,
# ~100 s with a busy loop on each core beside it. The time is printed with each phase's share
# (and kept in results.json), not asserted: the project measures speed in the benchmark, never
# with a stopwatch in a test that a busier machine would fail.


def _run_quick(tmp_path: Path, *args: str, timeout: int) -> tuple[str, dict]:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "bench.run", "--quick", "--out", str(out), *args]
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = orjson.loads((out / "results.json").read_bytes())
    phases = results["meta"]["phase_seconds"]
    print(f"bench.run --quick {' '.join(args)}: {elapsed:.1f} s ({phases})")
    return (out / "report.md").read_text(), results


def _matrix_keys(results: dict, target: str) -> set[tuple]:
    return {
        (r["api"], r["stream"], r["conc"], r["prompt"])
        for r in results["rows"]
        if r["section"] == "matrix" and r["target"] == target
    }


def test_run_quick_upstream_only(tmp_path: Path) -> None:
    markdown, results = _run_quick(tmp_path, "--targets", "upstream", timeout=120)
    plan = results["plan"]
    expected = {
        ("direct", stream, conc, prompt)
        for stream in (False, True)
        for conc in plan["concurrency"]
        for prompt in plan["prompts"]
    }
    assert _matrix_keys(results, "upstream") == expected
    for r in results["rows"]:
        assert not r.get("errors"), r
    assert "### Absolute numbers" in markdown
    for _, stream, conc, prompt in expected:
        label = f"| upstream | direct | {'stream' if stream else 'json'} | {conc} | "
        assert label + report.prompt_label(prompt) + " |" in markdown
    assert "### Open streams" in markdown
    shapes = {r.get("shape") for r in results["rows"] if r["section"] == "open"}
    assert shapes == {"burst", "sustained"}
    rate = round(plan["open_streams"] / plan["sustained_seconds"])
    assert f"| sustained: {rate} new/s" in markdown
    assert "### CPU per streamed event" in markdown
    # The yardstick comes first in every run, with every figure filled in.
    yard = [r for r in results["rows"] if r["section"] == "yardstick"]
    assert len(yard) == 1
    for key in ("loop_ms", "upstream_ms_per_req", "upstream_us_per_event_paced"):
        assert isinstance(yard[0][key], float), key
    assert "### Yardstick (measured first, on the server core)" in markdown


@pytest.mark.e2e
@pytest.mark.timeout(600)  # above the subprocess's own 420 s: its error says what hung
def test_run_quick_through_the_gateway(tmp_path: Path) -> None:
    markdown, results = _run_quick(tmp_path, timeout=420)
    assert set(results["meta"]["phase_seconds"]) == {"yardstick", "upstream", "gateway", "cache"}
    keys = _matrix_keys(results, "gateway")
    apis = {"messages", "openai", "responses", "openai-relay", "messages-gpt"}
    assert {k[0] for k in keys} == apis
    assert len(keys) == len(apis) * len(_matrix_keys(results, "upstream"))
    events = {(r["api"], r["paced_ms"] > 0) for r in results["rows"] if r["section"] == "events"}
    assert {(api, paced) for api in apis for paced in (False, True)} <= events
    # Issue 30: the GPT model's two paths beside the Claude path, with the verdict lines (the
    # run's smoke already checked that their calls reached the upstream's Chat Completions).
    assert "### OpenAI-kind paths vs the Claude path (issue 30)" in markdown
    assert "- **Per request**: the passthrough (`openai-relay`) costs **" in markdown
    assert "- **Per streamed event**: the passthrough costs **" in markdown
    assert not [n for n in results["notes"] if "/v1/chat/completions" in n]
    assert "### Gateway vs the upstream alone (same run)" in markdown
    assert "### Gateway CPU as multiples of the yardstick" in markdown
    assert any(r["section"] == "memory" for r in results["rows"])
    assert any(r["section"] == "open" and r["target"] == "gateway" for r in results["rows"])
    failed = [r for r in results["rows"] if r.get("errors")]
    assert not failed, failed[0]
    # The prompt-cache benchmark ran too, into the same directory, every policy and scenario.
    cache = orjson.loads((tmp_path / "out" / "cache.json").read_bytes())
    assert len(cache["runs"]) == 12
    assert all(r["errors"] == 0 and r["bill_matches"] for r in cache["runs"])
    cache_md = (tmp_path / "out" / "cache.md").read_text()
    assert "## Base workload" in cache_md and "## Churn" in cache_md and "## Targets" in cache_md


def test_report_pairs_request_log_on_and_off_cells() -> None:
    """--request-log-compare: the report pairs each cell of the two gateways with the upstream's
    and prints their ratios (numbers here are made up; the harness run is the e2e test above)."""

    def row(target: str, p50: float, cpu: float) -> dict[str, object]:
        return {
            "section": "matrix",
            "target": target,
            "api": "messages" if target != "upstream" else "direct",
            "stream": False,
            "conc": 1,
            "prompt": 1000,
            "requests": 100,
            "errors": 0,
            "rps": 100.0,
            "p50_ms": p50,
            "p99_ms": p50,
            "ttft_p50_ms": None,
            "ttft_p99_ms": None,
            "cpu_ms_per_req": cpu,
            "services_cpu_ms_per_req": 0.2,
            "other_cpus": 0.1,
        }

    rows = [row("upstream", 1.0, 0.1), row("gateway-nolog", 2.0, 0.8), row("gateway", 2.04, 0.82)]
    base = {report._key(rows[0]): rows[0]}
    section = "\n".join(report._request_log_cost(rows, base))
    assert "gateway CPU per request, on/off: median 1.025" in section
    assert "added latency p50, on/off: median 1.040" in section
    assert (
        "| messages | json | 1 | 1k | 1.040 | 1.000 | 1.040 | 0.820 | 0.800 | 1.025 | 1.000 |"
        in section
    )
