"""bench.instructions: its workload translates the same upstream events for both APIs, its
callgrind files are read section by section, its report and the README block are renderings of
the committed results (no instruction counts are measured here: that takes valgrind minutes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from bench import instr_report, instructions
from bench.instr_translators import SHAPES, chat_stream, responses_stream

REPO = Path(__file__).resolve().parents[2]


def _sse_payloads(data: bytes) -> list[dict]:
    return [orjson.loads(line[6:]) for line in data.split(b"\n") if line.startswith(b"data: {")]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_both_apis_translate_the_same_content(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    events = SHAPES[shape](5)
    captured: dict[str, bytes] = {}
    import bench.instr_translators as workload

    for name, cls in (("chat", workload.ChatStreamTranslator),
                      ("responses", workload.ResponsesStreamTranslator)):  # fmt: skip
        original = cls.feed

        def feed(self, event, _original=original, _name=name):  # type: ignore[no-untyped-def]
            out = _original(self, event)
            captured[_name] = captured.get(_name, b"") + out
            return out

        monkeypatch.setattr(cls, "feed", feed)
    assert chat_stream(events) > 0 and responses_stream(events) > 0
    chat, resp = _sse_payloads(captured["chat"]), _sse_payloads(captured["responses"])
    if shape == "text":
        chat_text = "".join(c["choices"][0]["delta"].get("content", "") for c in chat)
        resp_text = "".join(e["delta"] for e in resp if e["type"] == "response.output_text.delta")
        assert chat_text == resp_text == "tok " * 5
    else:
        chat_args = "".join(
            call["function"]["arguments"]
            for c in chat
            for call in c["choices"][0]["delta"].get("tool_calls", [])
        )
        resp_args = "".join(
            e["delta"] for e in resp if e["type"] == "response.function_call_arguments.delta"
        )
        assert chat_args == resp_args == '{"a": ' + '"k": 1, ' * 4


def test_workload_runs_every_section(tmp_path: Path) -> None:
    files = []
    for k in (3, 7):
        path = tmp_path / f"text-{k}.json"
        path.write_bytes(orjson.dumps(SHAPES["text"](k)))
        files += ["--events-file", str(path)]
    done = subprocess.run(
        [sys.executable, "-m", "bench.instr_translators", *files, "--streams", "2"],
        cwd=REPO, capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    assert done.stdout == b"ok\n"


def test_callgrind_sections_are_read_in_order(tmp_path: Path) -> None:
    out = tmp_path / "cg.out"
    for n, total in enumerate((900, 11, 500), start=1):
        Path(f"{out}.{n}").write_text(f"version: 1\ncmd: python\npart: {n}\ntotals: {total}\n")
    out.write_text("summary: 5\n")  # the exit dump, not a section
    assert instructions._sections(out) == [900, 11, 500]


RESULTS = {
    "meta": {"started": "2026-12-02 03:00 UTC", "commit": "abc1234", "dirty": False,
             "python": "3.11.7", "valgrind": "valgrind-3.19.0"},
    "short": 64,
    "long": 1024,
    "translators": [
        {"shape": "text", "api": "chat", "streams": 20, "per_stream": 500_000, "per_event": 7000},
        {"shape": "text", "api": "responses", "streams": 20, "per_stream": 600_000,
         "per_event": 6300},
    ],
    "gateway": {
        "idle_per_second": 1000,
        "idle_seconds": 20,
        "rows": [
            {"api": "chat", "requests": 20, "json": {"per_request": 5_000_000},
             "stream": {"per_request": 6_000_000}, "per_event": 20_000},
            {"api": "responses", "requests": 20, "json": {"per_request": 6_500_000},
             "stream": {"per_request": 6_600_000}, "per_event": 21_000},
        ],
    },
}  # fmt: skip


def test_report_states_ratios_against_the_target() -> None:
    text = instr_report.render(RESULTS)
    assert "| gateway, per request, JSON | 5,000,000 | 6,500,000 | 1.30× | ≤ 1.2× | ✗ |" in text
    assert "| gateway, per streamed event | 20,000 | 21,000 | 1.05× | ≤ 1.2× | ✓ |" in text
    assert (
        "| stream translator alone, per text delta | 7,000 | 6,300 | 0.90× | ≤ 1.2× | ✓ |" in text
    )
    assert "per stream of 64 text deltas | 500,000 | 600,000 | 1.20× | – | – |" in text


def test_readme_block_is_generated_from_the_committed_results() -> None:
    source = instr_report.readme_source()
    assert source is not None, "README.md has no instructions-bench block"
    data = orjson.loads((REPO / source / "instructions.json").read_bytes())
    assert instr_report.readme_block(data, source) in (REPO / "README.md").read_text()
    assert (REPO / source / "report.md").read_text() == instr_report.render(data)
    assert data["gateway"] and data["translators"], "the README cites a run of both phases"
    assert not data["meta"]["dirty"], "the README cites a run of committed code"
