"""Reads for the Playground: the catalog's servable models and their reasoning levels."""

from __future__ import annotations

from typing import Any

from catalog.snapshot import build_snapshot


def playground_models() -> list[dict[str, Any]]:
    snapshot = build_snapshot()
    return [
        {
            "id": m.id,
            "name": m.name,
            "efforts": list(m.reasoning_efforts),
            "default_effort": m.default_effort or "",
        }
        for m in snapshot.models
        if m.routes or m.chain
    ]
