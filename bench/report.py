"""Markdown for a benchmark run: absolute numbers, and the gateway against the upstream alone."""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def diff(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "–"
    return f"{a - b:+.2f}"


def ratio(a: float | None, b: float | None) -> str:
    if not a or not b:
        return "–"
    return f"{a / b:.2f}×"


def prompt_label(tokens: int) -> str:
    return f"{tokens // 1000}k" if tokens >= 1000 else str(tokens)


def mode(row: Row) -> str:
    return "stream" if row.get("stream") else "json"


def mb(kb: int | None) -> str:
    return "–" if kb is None else f"{kb / 1024:.1f}"


def one_line(row: Row) -> str:
    """Progress line for stderr."""
    if row["section"] == "open":
        return (
            f"open {row['target']}/{row['api']}: {row['streams']} streams, "
            f"TTFT p50 {fmt(row['ttft_p50_ms'])} p99 {fmt(row['ttft_p99_ms'])} ms, "
            f"errors {row['errors']}"
        )
    return (
        f"{row['target']}/{row['api']} {mode(row)} C={row['conc']} {prompt_label(row['prompt'])}: "
        f"{fmt(row['rps'])} req/s p50 {fmt(row['p50_ms'])} p99 {fmt(row['p99_ms'])} ms "
        f"TTFT p50 {fmt(row['ttft_p50_ms'])} CPU {fmt(row['cpu_ms_per_req'], 3)} ms/req "
        f"errors {row['errors']}"
    )


def _table(header: list[str], lines: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cells) + " |" for cells in lines]
    return out


def _key(row: Row) -> tuple[bool, int, int]:
    return (bool(row["stream"]), row["conc"], row["prompt"])


def render(meta: dict[str, Any], plan: Any, rows: list[Row], notes: list[str]) -> str:
    by = {
        s: [r for r in rows if r["section"] == s]
        for s in ("matrix", "events", "open", "memory", "rss")
    }
    out = [
        f"## Benchmark run {meta['date']} ({'quick' if meta['quick'] else 'full'})",
        "",
        f"commit {meta['commit']} · {meta['cpu']} · {meta['cpus']} CPUs · Linux {meta['kernel']} · "
        f"Python {meta['python']} · server {meta['server']} · db {meta['db']} · "
        f"redis {'on' if meta['redis'] else 'off'} · pinned {'yes' if meta['pinned'] else 'no'}",
        "",
        f"Each cell: warm-up, then at most {plan.requests:,} requests or {plan.seconds} s, "
        "closed loop. Requests: max_tokens 64, one user message of ≈4 chars/token; the upstream "
        "streams 64 text deltas. CPU = utime+stime of the server process tree ÷ requests.",
        "",
    ]
    matrix = by["matrix"]
    if matrix:
        out += ["### Absolute numbers", ""]
        lines = [
            [
                r["target"],
                r["api"],
                mode(r),
                str(r["conc"]),
                prompt_label(r["prompt"]),
                fmt(r["requests"] - r["errors"]),
                fmt(r["errors"]),
                fmt(r["rps"], 0),
                fmt(r["p50_ms"]),
                fmt(r["p99_ms"]),
                fmt(r["ttft_p50_ms"]),
                fmt(r["ttft_p99_ms"]),
                fmt(r["cpu_ms_per_req"], 3),
            ]
            for r in matrix
        ]
        out += _table(
            [
                "target",
                "API",
                "mode",
                "C",
                "prompt",
                "ok",
                "err",
                "req/s",
                "p50 ms",
                "p99 ms",
                "TTFT p50",
                "TTFT p99",
                "server CPU ms/req",
            ],
            lines,
        )
        out.append("")
    base = {_key(r): r for r in matrix if r["target"] == "upstream"}
    gw = [r for r in matrix if r["target"] == "gateway"]
    if gw and base:
        out += ["### Gateway vs the upstream alone (same run)", ""]
        lines = []
        for r in gw:
            b = base.get(_key(r))
            if b is None:
                continue
            lines.append(
                [
                    r["api"],
                    mode(r),
                    str(r["conc"]),
                    prompt_label(r["prompt"]),
                    fmt(r["rps"], 0),
                    fmt(b["rps"], 0),
                    ratio(r["rps"], b["rps"]),
                    diff(r["p50_ms"], b["p50_ms"]),
                    diff(r["p99_ms"], b["p99_ms"]),
                    diff(r["ttft_p50_ms"], b["ttft_p50_ms"]),
                    diff(r["ttft_p99_ms"], b["ttft_p99_ms"]),
                    fmt(r["cpu_ms_per_req"], 3),
                    fmt(b["cpu_ms_per_req"], 3),
                ]
            )
        out += _table(
            [
                "API",
                "mode",
                "C",
                "prompt",
                "gw req/s",
                "up req/s",
                "gw/up",
                "+p50 ms",
                "+p99 ms",
                "+TTFT p50 ms",
                "+TTFT p99 ms",
                "gw CPU ms/req",
                "up CPU ms/req",
            ],
            lines,
        )
        out.append("")
    if by["events"]:
        out += [
            "### CPU per streamed event",
            "",
            "Δ CPU per stream between short and long streams (C=16, 1k prompt) ÷ Δ events.",
            "",
        ]
        lines = [
            [
                r["target"],
                r["api"],
                f"{fmt(r['cpu_ms_short'], 3)} ({r['short']})",
                f"{fmt(r['cpu_ms_long'], 3)} ({r['long']})",
                fmt(r["us_per_event"], 1),
                fmt(r["errors"]),
            ]
            for r in by["events"]
        ]
        out += _table(
            [
                "target",
                "API",
                "CPU ms/stream (events)",
                "CPU ms/stream (events)",
                "µs CPU per event",
                "err",
            ],
            lines,
        )
        out.append("")
    if by["open"]:
        out += ["### Open streams", ""]
        up = next((r for r in by["open"] if r["target"] == "upstream"), None)
        lines = [
            [
                r["target"],
                r["api"],
                fmt(r["streams"]),
                f"{r['delay_ms']:.0f} ms",
                fmt(r["requests"] - r["errors"]),
                fmt(r["errors"]),
                fmt(r["ttft_p50_ms"]),
                fmt(r["ttft_p99_ms"]),
                diff(r["ttft_p50_ms"], up and up["ttft_p50_ms"]),
                diff(r["ttft_p99_ms"], up and up["ttft_p99_ms"]),
                mb(r["peak_rss_kb"]),
                fmt(r["kb_per_stream"], 1),
                fmt(r["cpu_ms_per_stream"], 3),
                fmt(r["upstream_max_open"]),
            ]
            for r in by["open"]
        ]
        out += _table(
            [
                "target",
                "API",
                "streams",
                "first event after",
                "ok",
                "err",
                "TTFT p50 ms",
                "TTFT p99 ms",
                "+TTFT p50",
                "+TTFT p99",
                "peak RSS MB",
                "KB/stream",
                "CPU ms/stream",
                "max open at upstream",
            ],
            lines,
        )
        out.append("")
    if by["rss"] or by["memory"]:
        out += ["### Memory", ""]
        for r in by["rss"]:
            when = r.get("when", "idle")
            out.append(
                f"- {r['target']} {when}: RSS {mb(r['rss_kb'])} MB, peak (VmHWM) "
                f"{mb(r['hwm_kb'])} MB"
            )
        for r in by["memory"]:
            series = " → ".join(mb(kb) for kb in r["rss_kb"])
            out.append(
                f"- {r['target']} {r['api']} {mode(r)}, {r['requests']:,} × 100k-token requests "
                f"(C=16): RSS MB {series}; growth after the first batch "
                f"{r['growth_kb'] / 1024:+.1f} MB; errors {r['errors']}"
            )
        out.append("")
    errors = [r for r in rows if r.get("errors")]
    if errors or notes:
        out += ["### Errors and notes", ""]
        for r in errors:
            where = f"{r['section']} {r['target']}/{r.get('api')}"
            if r["section"] == "matrix":
                where += f" {mode(r)} C={r['conc']} {prompt_label(r['prompt'])}"
            first = str(r.get("first_error", ""))[:400].replace("\n", " ")
            out.append(f"- {where}: {r['errors']} errors; first: `{first}`")
        out += [f"- {note}" if "\n" not in note else f"- ```\n{note}\n```" for note in notes]
        out.append("")
    return "\n".join(out)
