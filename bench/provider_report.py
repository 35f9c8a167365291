"""The report's OpenAI-kind section (issue 30 item 11): the GPT paths next to the Claude path.

Four gateway targets on the same fake upstream process (bench/run.py APIS):
- `messages`: /v1/messages on the Claude model (anthropic kind): the Claude path;
- `openai`: /openai/v1/chat/completions on the Claude model (translated to Messages);
- `openai-relay`: /openai/v1/chat/completions on the GPT model (openai kind): the passthrough,
  the body forwarded and the provider's chunks passed on (gateway/handlers/chat_relay.py);
- `messages-gpt`: /v1/messages on the GPT model: the Messages → Chat translation
  (gateway/providers/openai/).

The issue's bar: the passthrough costs no more than the Claude path, per request and per
streamed event. Per request is the median, over the matrix cells both measured, of the
relay's CPU ÷ the Claude path's in the same cell; per event, the ratio of µs per event at each
pacing. Pure: rows in, markdown lines out.
"""

from __future__ import annotations

from statistics import median

from bench.procs import CLK_TCK
from bench.report import Column, Row, fmt, mode, prompt_label, table

CLAUDE, RELAY, TRANSLATED = "messages", "openai-relay", "messages-gpt"
CHAT_ON_CLAUDE = "openai"


def _cell_key(r: Row) -> tuple[bool, int, int]:
    return bool(r["stream"]), r["conc"], r["prompt"]


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def _times(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _verdict(ratios: list[float]) -> str:
    return "no more" if all(r <= 1.0 for r in ratios) else "more"


def per_request(matrix: list[Row]) -> tuple[list[Row], dict[str, list[float]]]:
    """One row per matrix cell the Claude path and the relay both measured, and the relay's
    and the translation's ratios to the Claude path by mode (`json`, `stream`)."""
    gw = [r for r in matrix if r["target"] == "gateway"]
    by_api: dict[str, dict[tuple[bool, int, int], Row]] = {}
    for r in gw:
        by_api.setdefault(r["api"], {})[_cell_key(r)] = r
    claude = by_api.get(CLAUDE, {})
    relay = by_api.get(RELAY, {})
    rows: list[Row] = []
    ratios: dict[str, list[float]] = {}
    for key in sorted(set(claude) & set(relay)):
        base = claude[key]["cpu_ms_per_req"]

        def cpu(api: str, key: tuple[bool, int, int] = key) -> float | None:
            found = by_api.get(api, {}).get(key)
            return found["cpu_ms_per_req"] if found else None

        row = {
            "stream": key[0],
            "conc": key[1],
            "prompt": key[2],
            CLAUDE: base,
            CHAT_ON_CLAUDE: cpu(CHAT_ON_CLAUDE),
            RELAY: cpu(RELAY),
            TRANSLATED: cpu(TRANSLATED),
            "relay_ratio": _ratio(cpu(RELAY), base),
            "translated_ratio": _ratio(cpu(TRANSLATED), base),
            "requests": min(claude[key].get("requests", 0), relay[key].get("requests", 0)),
        }
        rows.append(row)
        if row["relay_ratio"] is not None:
            ratios.setdefault(mode(row), []).append(row["relay_ratio"])
    return rows, ratios


def per_event(events: list[Row]) -> list[Row]:
    """One row per pacing: µs per streamed event of each target, and ratios to the Claude path."""
    gw = {(r["api"], bool(r.get("paced_ms"))): r for r in events if r["target"] == "gateway"}
    rows = []
    for paced in (False, True):
        claude = gw.get((CLAUDE, paced))
        if claude is None or (RELAY, paced) not in gw:
            continue
        base = claude["us_per_event"]

        def us(api: str, paced: bool = paced) -> float | None:
            found = gw.get((api, paced))
            return found["us_per_event"] if found else None

        rows.append(
            {
                "paced": paced,
                CLAUDE: base,
                CHAT_ON_CLAUDE: us(CHAT_ON_CLAUDE),
                RELAY: us(RELAY),
                TRANSLATED: us(TRANSLATED),
                "relay_ratio": _ratio(us(RELAY), base),
                "translated_ratio": _ratio(us(TRANSLATED), base),
                "resolution_us": max(
                    _event_resolution_us(claude), _event_resolution_us(gw[(RELAY, paced)])
                ),
            }
        )
    return rows


def _event_resolution_us(r: Row) -> float:
    """One CPU tick in each of the two cells, per event of their difference (µs); 0 when the
    row predates the request counts."""
    short, long_ = r.get("requests_short"), r.get("requests_long")
    if not short or not long_:
        return 0.0
    tick_ms = 1000 / CLK_TCK
    return (tick_ms / short + tick_ms / long_) * 1000 / max(1, r["long"] - r["short"])


def summary(
    req_rows: list[Row], req_ratios: dict[str, list[float]], event_rows: list[Row]
) -> list[str]:
    """The lines saying whether the passthrough costs no more than the Claude path."""
    out = []
    if req_ratios:
        medians = {m: median(v) for m, v in sorted(req_ratios.items())}
        parts = ", ".join(
            f"{m} median {value:.2f}× over {len(req_ratios[m])} cells "
            f"({min(req_ratios[m]):.2f}–{max(req_ratios[m]):.2f}×)"
            for m, value in medians.items()
        )
        out.append(
            f"- **Per request**: the passthrough (`{RELAY}`) costs "
            f"**{_verdict(list(medians.values()))}** than the Claude path (`{CLAUDE}`): "
            f"relay CPU ÷ Claude CPU, {parts}."
        )
    known = [r for r in event_rows if r["relay_ratio"] is not None]
    if known:
        parts = ", ".join(
            f"{'1 ms apart' if r['paced'] else 'back to back'} {r['relay_ratio']:.2f}× "
            f"({fmt(r[RELAY], 2)} vs {fmt(r[CLAUDE], 2)} µs)"
            for r in known
        )
        out.append(
            f"- **Per streamed event**: the passthrough costs "
            f"**{_verdict([r['relay_ratio'] for r in known])}** than the Claude path: {parts}."
        )
    out += _resolution(req_rows, known)
    return out


def _resolution(req_rows: list[Row], event_rows: list[Row]) -> list[str]:
    """How finely the compared cells resolve CPU: it is read in 1/CLK_TCK s ticks, so a cell of
    N requests cannot tell apart figures closer than one tick ÷ N (the quick run's 0.2 s cells
    hold 10–100 requests)."""
    counted = [r for r in req_rows if r.get("requests")]
    if not counted:
        return []
    tick_ms = 1000 / CLK_TCK
    coarse = min(counted, key=lambda r: r["requests"])
    line = (
        f"- Resolution: CPU is read in {tick_ms:g} ms ticks; the coarsest compared cell "
        f"({mode(coarse)} C={coarse['conc']} {prompt_label(coarse['prompt'])}) had "
        f"{coarse['requests']} requests, ±{tick_ms / coarse['requests']:.2f} ms per request"
    )
    worst = max((r.get("resolution_us", 0.0) for r in event_rows), default=0.0)
    if worst:
        line += f"; the event figures ±{worst:.1f} µs per event"
    return [line + ": a difference smaller than that is not a measured one."]


REQUEST_COLUMNS: list[Column] = [
    ("mode", mode),
    ("C", lambda r: str(r["conc"])),
    ("prompt", lambda r: prompt_label(r["prompt"])),
    (f"{CLAUDE} (Claude) ms", lambda r: fmt(r[CLAUDE], 3)),
    (f"{CHAT_ON_CLAUDE} (Claude) ms", lambda r: fmt(r[CHAT_ON_CLAUDE], 3)),
    (f"{RELAY} ms", lambda r: fmt(r[RELAY], 3)),
    ("relay ÷ Claude", lambda r: _times(r["relay_ratio"])),
    (f"{TRANSLATED} ms", lambda r: fmt(r[TRANSLATED], 3)),
    ("translation ÷ Claude", lambda r: _times(r["translated_ratio"])),
]
EVENT_COLUMNS: list[Column] = [
    ("upstream events", lambda r: "1 ms apart" if r["paced"] else "back to back"),
    (f"{CLAUDE} (Claude) µs", lambda r: fmt(r[CLAUDE], 2)),
    (f"{CHAT_ON_CLAUDE} (Claude) µs", lambda r: fmt(r[CHAT_ON_CLAUDE], 2)),
    (f"{RELAY} µs", lambda r: fmt(r[RELAY], 2)),
    ("relay ÷ Claude", lambda r: _times(r["relay_ratio"])),
    (f"{TRANSLATED} µs", lambda r: fmt(r[TRANSLATED], 2)),
    ("translation ÷ Claude", lambda r: _times(r["translated_ratio"])),
]


def render(rows: list[Row]) -> list[str]:
    matrix = [r for r in rows if r["section"] == "matrix"]
    events = [r for r in rows if r["section"] == "events"]
    req_rows, req_ratios = per_request(matrix)
    event_rows = per_event(events)
    if not req_rows and not event_rows:
        return []
    out = [
        "### OpenAI-kind paths vs the Claude path (issue 30)",
        "",
        f"Same gateway, same fake upstream process: `{CLAUDE}` and `{CHAT_ON_CLAUDE}` on the "
        f"Claude model (anthropic kind, `/v1/messages` upstream); `{RELAY}` "
        "(`/openai/v1/chat/completions`) and "
        f"`{TRANSLATED}` (`/v1/messages`) on the GPT model (openai kind, "
        "`/v1/chat/completions` upstream, the same tokens per reply). Gateway CPU per request "
        "(ms) and per streamed event (µs); ratios are to the Claude path in the same run.",
        "",
        *summary(req_rows, req_ratios, event_rows),
        "",
    ]
    if req_rows:
        out += table(REQUEST_COLUMNS, req_rows)
    if event_rows:
        out += table(EVENT_COLUMNS, event_rows)
    return out
