"""Reads of the catalog: the public model list, current prices and their history."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from catalog.pricing import PRICE_KINDS
from catalog.schema import TierFigures
from catalog.snapshot import CatalogSnapshot, ModelInfo

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from catalog.models import Model, PriceTier, PriceVersion, SuggestedChain

_COLUMNS = (
    "price_input",
    "price_output",
    "price_cache_read",
    "price_cache_write_5m",
    "price_cache_write_1h",
)


def public_capabilities(m: ModelInfo) -> dict[str, Any]:
    return {
        "sampling": m.sampling,
        "promptCaching": m.prompt_caching,
        "vision": m.vision,
        "pdf": m.pdf,
        "tools": m.tools,
        "structuredOutputs": m.structured_outputs,
        "thinking": m.thinking,
        "thinkingCanBeDisabled": m.thinking_can_be_disabled,
        "forcedToolChoice": m.forced_tool_choice,
        "reasoningEfforts": list(m.reasoning_efforts),
        "defaultEffort": m.default_effort,
    }


def public_model(m: ModelInfo) -> dict[str, Any]:
    """A model as GET /api/models shows it. Prices are USD per million tokens, as plain
    decimal strings; `pricing` is the first tier, `pricingTiers` every tier."""
    return {
        "id": m.id,
        "name": m.name,
        "aliases": list(m.aliases),
        "capabilities": public_capabilities(m),
        "maxOutputTokens": m.max_output_tokens,
        "contextWindow": m.context_window,
        "pricing": m.pricing.first.as_usd_strings(),
        "pricingTiers": [tier.as_public() for tier in m.pricing.tiers],
        "priceVersion": m.pricing.version,
        "source": {"url": m.source_url or None, "checked": m.checked_on or None},
        # Worst-case tokens per image and PDF page: what an admission hold counts for media.
        "media": m.media.as_public(),
    }


def public_auto(auto: ModelInfo) -> dict[str, Any]:
    """ezat/auto as GET /api/models shows it: the capabilities and limits every model of its
    chain shares, and the chain. No prices of its own: a request is billed at the prices of the
    model that answers (each listed here)."""
    return {
        "id": auto.id,
        "name": auto.name,
        "aliases": [],
        "capabilities": public_capabilities(auto),
        "maxOutputTokens": auto.max_output_tokens,
        "contextWindow": auto.context_window,
        "pricing": None,
        "pricingTiers": [],
        "priceVersion": None,
        "pricedAs": "the model that answers",
        "chain": list(auto.chain),
        "source": {"url": auto.source_url or None, "checked": auto.checked_on or None},
        "media": auto.media.as_public(),
    }


def public_catalog(snapshot: CatalogSnapshot) -> dict[str, Any]:
    data = [public_model(m) for m in snapshot.models]
    auto = snapshot.auto()
    if auto is not None:
        data.append(public_auto(auto))
    return {"data": data}


def suggested_chains(snapshot: CatalogSnapshot) -> dict[str, Any]:
    """The catalog's suggested chains (what the dashboard offers), by model id."""
    return {
        model_id: {
            "models": list(s.models),
            "why": s.why,
            "source": {"url": s.source_url or None, "checked": s.checked_on or None},
        }
        for model_id, s in snapshot.suggestions.items()
    }


def tier_figures(tier: PriceTier) -> TierFigures:
    return TierFigures(
        tier.up_to_prompt_tokens,
        {kind: getattr(tier, column) for kind, column in zip(PRICE_KINDS, _COLUMNS, strict=True)},
    )


def price_history(model: Model) -> list[PriceVersion]:
    """The model's price versions, newest first, with their tiers prefetched."""
    return list(model.price_versions.prefetch_related("tiers").order_by("-effective_from", "-id"))


def current_tiers(model: Model) -> list[TierFigures] | None:
    """The prices in force (the newest version that has tiers), or None if there are none."""
    for version in price_history(model):
        tiers = list(version.tiers.all())
        if tiers:
            return [tier_figures(t) for t in tiers]
    return None


def suggested_chain_rows() -> QuerySet[SuggestedChain]:
    """The catalog's suggested chains, in the file's order (ezat/auto's first)."""
    from catalog.models import SuggestedChain

    return SuggestedChain.objects.order_by("sort_order", "model")


def model_choices() -> list[tuple[str, str]]:
    """(id, "Name (id)") of every enabled model, in the catalog's order: what a person may
    pick as a fallback."""
    from catalog.models import Model

    return [
        (model_id, f"{name} ({model_id})")
        for model_id, name in Model.objects.filter(enabled=True).values_list("id", "name")
    ]
