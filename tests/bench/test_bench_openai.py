"""Issue 30 item 11: the fake upstream's Chat Completions route and the report's OpenAI-kind
section. In-process, no gateway (the quick run through the gateway is tests/bench/
test_bench_smoke.py::test_run_quick_through_the_gateway)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import orjson
import pytest

from bench import loadgen, provider_report, run
from bench.fake_upstream import Config, start_server

KEY = "sk-test"


async def _upstream(**config: float) -> tuple[asyncio.Server, int, object]:
    server, stats = await start_server("127.0.0.1", 0, Config(api_key=KEY, **config))
    return server, server.sockets[0].getsockname()[1], stats


def _chat(port: int, key: str = KEY) -> loadgen.Target:
    return loadgen.Target("127.0.0.1", port, "/v1/chat/completions", "openai", key, model="gpt-x")


def _request(target: loadgen.Target, body: dict[str, object]) -> bytes:
    auth = (
        f"authorization: Bearer {target.key}\r\n"
        if target.api == "openai"
        else f"x-api-key: {target.key}\r\n"
    )
    data = orjson.dumps(body)
    head = (
        f"POST {target.path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{auth}"
        f"content-length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


async def _exchange(port: int, request: bytes, end: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        return await asyncio.wait_for(reader.readuntil(end), 5)
    finally:
        writer.close()


def _data_lines(raw: bytes) -> list[bytes]:
    return re.findall(rb"^data: (.+)$", raw, flags=re.M)


@pytest.mark.parametrize("limit", ["max_tokens", "max_completion_tokens"])
async def test_chat_stream_has_the_messages_streams_tokens_and_the_usage_chunk(limit: str) -> None:
    server, port, stats = await _upstream()
    body = {
        "model": "gpt-x",
        limit: 5,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "hi"}],
    }
    try:
        raw = await _exchange(port, _request(_chat(port), body), b"0\r\n\r\n")
        messages = loadgen.Target("127.0.0.1", port, "/v1/messages", "anthropic", KEY)
        anthropic = await _exchange(
            port,
            loadgen.build_request(messages, stream=True, prompt_tokens=1, max_tokens=5),
            b"0\r\n\r\n",
        )
    finally:
        server.close()
    assert b"content-type: text/event-stream" in raw
    lines = _data_lines(raw)
    assert lines[-1] == b"[DONE]"
    chunks = [orjson.loads(line) for line in lines[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "gpt-x" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    texts = [c["choices"][0]["delta"].get("content") for c in chunks[1:-2]]
    # The same tokens as the Messages stream of the same request: the costs compare.
    anthropic_texts = re.findall(rb'"text_delta","text":"([^"]*)"', anthropic)
    assert texts == [t.decode() for t in anthropic_texts] == ["tok "] * 5
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    assert chunks[-1]["usage"]["prompt_tokens"] > 0
    assert stats.chat == 1 and stats.streams == 2


async def test_chat_stream_without_include_usage_has_no_usage_at_all() -> None:
    server, port, _ = await _upstream()
    try:
        target = _chat(port)
        raw = await _exchange(
            port,
            loadgen.build_request(target, stream=True, prompt_tokens=10, max_tokens=3),
            b"0\r\n\r\n",
        )
    finally:
        server.close()
    lines = _data_lines(raw)
    assert lines[-1] == b"[DONE]"
    assert len(lines) == 1 + 3 + 1 + 1  # role, 3 tokens, finish, [DONE]
    assert b'"usage"' not in raw


async def test_chat_json_is_a_chat_completion_with_openai_usage() -> None:
    server, port, _ = await _upstream(events=8)
    try:
        reply = await loadgen.run_closed(
            _chat(port), stream=False, concurrency=1, requests=3, duration=5, prompt_tokens=10
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(loadgen.build_request(_chat(port), stream=False, prompt_tokens=10))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        size = int(re.search(rb"content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
        body = orjson.loads(await asyncio.wait_for(reader.readexactly(size), 5))
        writer.close()
    finally:
        server.close()
    assert reply.errors == 0, reply.first_error
    assert body["object"] == "chat.completion"
    assert body["model"] == "gpt-x"
    # At most --events tokens (8 here) whatever max_tokens asks: "stop", not "length".
    assert body["choices"][0]["message"]["content"] == "tok " * 8
    assert body["choices"][0]["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["completion_tokens"] == 8
    assert usage["total_tokens"] == usage["prompt_tokens"] + 8
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0


async def test_chat_closed_loop_and_paced_stream_end_with_done() -> None:
    server, port, stats = await _upstream(event_delay=0.001)
    try:
        res = await loadgen.run_closed(
            _chat(port), stream=True, concurrency=4, requests=12, duration=10, prompt_tokens=100
        )
    finally:
        server.close()
    summary = res.summary()
    assert summary["errors"] == 0, summary["first_error"]
    assert summary["requests"] == 12
    assert summary["ttft_p50_ms"] is not None
    assert stats.chat == 12


async def test_each_route_takes_its_own_apis_key_header() -> None:
    """Bearer on /v1/chat/completions, x-api-key on /v1/messages: a gateway that sends the
    other one (or a wrong key) gets a 401 in that API's error shape."""
    server, port, _ = await _upstream()
    wrong_key = _chat(port, key="nope")
    x_api_key_on_chat = loadgen.Target("127.0.0.1", port, "/v1/chat/completions", "anthropic", KEY)
    bearer_on_messages = loadgen.Target("127.0.0.1", port, "/v1/messages", "openai", KEY)
    try:
        results = [
            await loadgen.run_closed(t, stream=False, concurrency=1, requests=1, duration=5)
            for t in (wrong_key, x_api_key_on_chat, bearer_on_messages)
        ]
    finally:
        server.close()
    assert [r.errors for r in results] == [1, 1, 1]
    assert "invalid_api_key" in results[0].first_error
    assert "invalid_api_key" in results[1].first_error
    assert "authentication_error" in results[2].first_error


def test_gpt_targets_ask_for_the_gpt_model_on_their_apis() -> None:
    targets = run.targets_for(1234, "k")
    assert set(run.GPT_TARGETS) == {"openai-relay", "messages-gpt"}
    relay, translated = targets["openai-relay"], targets["messages-gpt"]
    assert (relay.path, relay.api) == ("/openai/v1/chat/completions", "openai")
    assert (translated.path, translated.api) == ("/v1/messages", "anthropic")
    for target in (relay, translated):
        assert b'"model":"bench/gpt-bench"' in loadgen.build_request(
            target, stream=True, prompt_tokens=1
        )
    assert targets["messages"].model == loadgen.MODEL
    assert set(run.targets_for(1234, "k", ["messages", "openai-relay"])) == {
        "messages",
        "openai-relay",
    }


def test_unknown_api_is_refused_before_anything_starts() -> None:
    with pytest.raises(SystemExit, match="unknown --apis nope"):
        run.main(["--apis", "messages,nope", "--out", "/nonexistent"])


def _matrix(api: str, stream: bool, conc: int, cpu: float) -> dict[str, object]:
    return {
        "section": "matrix",
        "target": "gateway",
        "api": api,
        "stream": stream,
        "conc": conc,
        "prompt": 1000,
        "cpu_ms_per_req": cpu,
        "requests": 100 if conc == 16 else 40,
    }


def _events(api: str, paced: bool, us: float) -> dict[str, object]:
    return {
        "section": "events",
        "target": "gateway",
        "api": api,
        "paced_ms": 1.0 if paced else 0.0,
        "us_per_event": us,
        "short": 64,
        "long": 256,
        "requests_short": 50,
        "requests_long": 20,
    }


def _rows(relay_scale: float) -> list[dict[str, object]]:
    """Made-up figures (the harness run is the e2e test): the relay at relay_scale × Claude."""
    rows: list[dict[str, object]] = []
    for stream in (False, True):
        for conc in (1, 16):
            base = 1.0 + conc / 100 + (0.5 if stream else 0)
            rows.append(_matrix("messages", stream, conc, base))
            rows.append(_matrix("openai", stream, conc, base * 1.1))
            rows.append(_matrix("openai-relay", stream, conc, base * relay_scale))
            rows.append(_matrix("messages-gpt", stream, conc, base * 1.3))
    for paced, us in ((False, 4.0), (True, 20.0)):
        rows.append(_events("messages", paced, us))
        rows.append(_events("openai", paced, us * 1.2))
        rows.append(_events("openai-relay", paced, us * relay_scale))
        rows.append(_events("messages-gpt", paced, us * 1.5))
    rows.append({**_matrix("direct", False, 1, 0.05), "target": "upstream"})
    return rows


def test_report_says_the_passthrough_costs_no_more_than_the_claude_path() -> None:
    text = "\n".join(provider_report.render(_rows(0.8)))
    assert "### OpenAI-kind paths vs the Claude path (issue 30)" in text
    assert (
        "- **Per request**: the passthrough (`openai-relay`) costs **no more** than the Claude "
        "path (`messages`): relay CPU ÷ Claude CPU, json median 0.80× over 2 cells "
        "(0.80–0.80×), stream median 0.80× over 2 cells (0.80–0.80×)." in text
    )
    assert (
        "- **Per streamed event**: the passthrough costs **no more** than the Claude path: "
        "back to back 0.80× (3.20 vs 4.00 µs), 1 ms apart 0.80× (16.00 vs 20.00 µs)." in text
    )
    # CPU is read in 1/CLK_TCK s ticks (100 on Linux): the line says how finely the cells
    # resolve it (one tick ÷ the fewest requests; per event one tick in each cell ÷ 192).
    assert (
        "- Resolution: CPU is read in 10 ms ticks; the coarsest compared cell (json C=1 1k) had "
        "40 requests, ±0.25 ms per request; the event figures ±3.6 µs per event: a difference "
        "smaller than that is not a measured one." in text
    )
    # Per cell: Claude, chat on Claude, relay and its ratio, translation and its ratio.
    assert "| json | 1 | 1k | 1.010 | 1.111 | 0.808 | 0.80× | 1.313 | 1.30× |" in text
    assert "| 1 ms apart | 20.00 | 24.00 | 16.00 | 0.80× | 30.00 | 1.50× |" in text


def test_report_says_when_the_passthrough_costs_more() -> None:
    text = "\n".join(provider_report.render(_rows(1.25)))
    assert "costs **more** than the Claude path (`messages`)" in text
    assert "- **Per streamed event**: the passthrough costs **more**" in text


def test_report_has_no_section_without_the_gpt_targets() -> None:
    rows = [r for r in _rows(1.0) if r["api"] not in run.GPT_TARGETS]
    assert provider_report.render(rows) == []


async def test_smoke_skips_a_gpt_target_whose_calls_miss_the_chat_route(tmp_path: Path) -> None:
    """The run's smoke proves each GPT target reached the upstream's /v1/chat/completions (and
    each Claude one did not): a GPT model routed the Claude way would otherwise be measured
    as the Claude path under the GPT name. Here the "gateway" is the fake upstream itself."""
    from types import SimpleNamespace

    from bench.cells import Plan
    from bench.procs import UPSTREAM_KEY, Procs

    procs = Procs(tmp=tmp_path)
    try:
        port = procs.start_upstream(events=8, cpu=None, max_seconds=60)
        runner = run.Runner(SimpleNamespace(pin=False), Plan.make(quick=True), procs)
        runner.up_port = port
        chat = loadgen.Target("127.0.0.1", port, "/v1/chat/completions", "openai", UPSTREAM_KEY)
        messages = loadgen.Target("127.0.0.1", port, "/v1/messages", "anthropic", UPSTREAM_KEY)
        working = await runner.smoke(
            {"openai-relay": chat, "messages-gpt": messages, "messages": messages, "openai": chat}
        )
    finally:
        procs.close()
    assert working == ["openai-relay", "messages"]
    assert runner.notes == [
        "gateway messages-gpt: 0 of its 2 calls reached /v1/chat/completions",
        "gateway openai: 2 of its 2 calls reached /v1/chat/completions",
    ]
