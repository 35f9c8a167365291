"""Where each policy's cache reads come from, from a cache run's requests.json.gz.

    python -m bench.cache_sources bench/results/<stamp> [--scenario base]

For every request after a conversation's first, the deployment it went to is one of:
- the deployment of the conversation's previous turn;
- another deployment this conversation used less than 5 minutes before (its 5-minute entries
  can still be there: a hit refreshes them);
- another deployment it last used 5 minutes or more before (only a 1-hour entry can be left);
- a deployment it never used (nothing of its own there; a shared app prompt can be).

The table gives, per run, the turns and the points of hit rate (cache reads ÷ all cacheable
tokens of the run) that each kind of request contributed. It explains a hit-rate ratio: a
policy that spreads a conversation over N deployments reads about 1/N of the time from the
previous turn's deployment, and whatever it reads elsewhere is why it does better than 1/N.
Pure arithmetic over the dump and the seeded workload (regenerated, not stored).
"""

from __future__ import annotations

import argparse
import gzip
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson

from bench.cache_workload import Conversation, Profile, generate

FIVE_MINUTES = 300.0
KINDS = (
    "first turn",
    "previous turn's deployment",
    "another, used < 5 min before",
    "another, used ≥ 5 min before",
    "a deployment never used",
)


def sources(
    rows: list[list[Any]], conversations: dict[int, Conversation]
) -> dict[str, tuple[int, float]]:
    """(turns, points of hit rate) by kind, from one run's outcome rows (cache_report's
    outcome_row: conversation, turn, start, deployment, input, read, write 5m, write 1h, …)."""
    by_conv: dict[int, dict[int, list[Any]]] = defaultdict(dict)
    for row in rows:
        by_conv[row[0]][row[1]] = row
    cacheable = sum(r[5] + r[6] + r[7] for r in rows)
    turns: dict[str, int] = dict.fromkeys(KINDS, 0)
    reads: dict[str, int] = dict.fromkeys(KINDS, 0)
    for cid, by_turn in by_conv.items():
        starts = [t.start for t in conversations[cid].turns]
        for t, row in sorted(by_turn.items()):
            kind = _kind(by_turn, t, row[3], starts)
            turns[kind] += 1
            reads[kind] += row[5]
    return {k: (turns[k], reads[k] * 100 / max(1, cacheable)) for k in KINDS}


def _kind(by_turn: dict[int, list[Any]], t: int, deployment: Any, starts: list[float]) -> str:
    if t == 0:
        return KINDS[0]
    previous = by_turn.get(t - 1)
    if previous is not None and previous[3] == deployment:
        return KINDS[1]
    used = [j for j in range(t) if j in by_turn and by_turn[j][3] == deployment]
    if not used:
        return KINDS[4]
    return KINDS[2] if starts[t] - starts[used[-1]] < FIVE_MINUTES else KINDS[3]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a bench.cache output directory")
    parser.add_argument("--scenario", default="base", choices=("base", "churn"))
    args = parser.parse_args(argv)
    data = orjson.loads((args.results / "cache.json").read_bytes())
    dump = orjson.loads(gzip.decompress((args.results / "requests.json.gz").read_bytes()))
    meta = data["meta"]
    workloads: dict[str, dict[int, Conversation]] = {}
    print("| run | " + " | ".join(KINDS) + " | hit rate |")
    print("|---|" + "---|" * (len(KINDS) + 1))
    for org, rows in dump.items():
        if not org.startswith(f"cache-{args.scenario}-") or "-seed+" in org:
            continue
        prompts = "own" if org.endswith("-own") or "-own-again" in org else "shared"
        if prompts not in workloads:
            w = generate(meta["seed"], Profile.named(meta["quick"], prompts))
            workloads[prompts] = {c.id: c for c in w.conversations}
        found = sources(rows, workloads[prompts])
        cells = " | ".join(f"{n} turns, {pts:.1f} pts" for n, pts in found.values())
        total = sum(pts for _, pts in found.values())
        print(f"| {org} | {cells} | {total:.1f} % |")


if __name__ == "__main__":
    main()
