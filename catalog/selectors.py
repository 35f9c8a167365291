"""Reads of the catalog for pages and the public model list."""

from __future__ import annotations

from typing import Any

from catalog.snapshot import CatalogSnapshot, ModelInfo


def public_model(m: ModelInfo) -> dict[str, Any]:
    return {
        "id": m.id,
        "name": m.name,
        "aliases": list(m.aliases),
        "capabilities": {
            "sampling": m.sampling,
            "promptCaching": m.prompt_caching,
            "vision": m.vision,
            "pdf": m.pdf,
            "tools": m.tools,
            "structuredOutputs": m.structured_outputs,
            "reasoningEfforts": list(m.reasoning_efforts),
        },
        "maxOutputTokens": m.max_output_tokens,
        "contextWindow": m.context_window,
        "pricing": m.prices.as_usd_strings(),
        # Worst-case tokens per image and PDF page: what an admission hold counts for media.
        "media": m.media.as_public(),
    }


def public_catalog(snapshot: CatalogSnapshot) -> dict[str, Any]:
    return {"data": [public_model(m) for m in snapshot.models]}
