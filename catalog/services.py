"""Writes to the catalog: loading a catalog file, price versions, deployments, version bumps."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from catalog import deployment_services
from catalog.deployment_services import Credentials, DeploymentInput
from catalog.models import (
    CatalogVersion,
    Deployment,
    Model,
    ModelAlias,
    PriceTier,
    PriceVersion,
    SuggestedChain,
)
from catalog.pricing import PRICE_KINDS
from catalog.schema import (
    MEDIA_FIELDS,
    CatalogDataError,
    CatalogEntry,
    CatalogFile,
    TierFigures,
    parse_catalog_file,
)
from catalog.selectors import current_tiers
from core import money

__all__ = ["BUNDLED_CATALOG", "CatalogDataError", "LoadReport", "load_catalog"]

BUNDLED_CATALOG = Path(__file__).parent / "data" / "models.json"

# catalog.Model field → its JSON key, for change reports.
_REPORTED_FIELDS = {
    "name": "name",
    "context_window": "contextWindow",
    "max_output_tokens": "maxOutputTokens",
    "source_url": "source.url",
    "checked_on": "source.checked",
    "sampling": "capabilities.sampling",
    "prompt_caching": "capabilities.promptCaching",
    "vision": "capabilities.vision",
    "pdf": "capabilities.pdf",
    "tools": "capabilities.tools",
    "structured_outputs": "capabilities.structuredOutputs",
    "reasoning_efforts": "capabilities.reasoningEfforts",
    "default_effort": "capabilities.defaultEffort",
    "thinking": "capabilities.thinking",
    "thinking_can_be_disabled": "capabilities.thinkingCanBeDisabled",
    "forced_tool_choice": "capabilities.forcedToolChoice",
    **{field: f"media.{key}" for key, field in MEDIA_FIELDS.items()},
}
_TIER_COLUMNS = dict(
    zip(
        PRICE_KINDS,
        (
            "price_input",
            "price_output",
            "price_cache_read",
            "price_cache_write_5m",
            "price_cache_write_1h",
        ),
        strict=True,
    )
)


def bump_catalog_version() -> None:
    updated = CatalogVersion.objects.filter(pk=1).update(version=F("version") + 1)
    if not updated:
        CatalogVersion.objects.get_or_create(pk=1, defaults={"version": 1})


def read_catalog_file(path: Path) -> list[CatalogEntry]:
    """Every entry of the file, validated; CatalogDataError names the entry and field."""
    return read_catalog(path).entries


def read_catalog(path: Path) -> CatalogFile:
    """The whole file (entries and suggested chains), validated."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CatalogDataError(f"cannot read {path}: {exc}") from exc
    return parse_catalog_file(data)


def create_price_version(
    model: Model, tiers: Sequence[TierFigures], *, source: str
) -> PriceVersion:
    """New prices for `model`, effective now. Earlier versions stay as they are (history)."""
    version = PriceVersion.objects.create(
        model=model, effective_from=timezone.now(), source=source[:200]
    )
    PriceTier.objects.bulk_create(
        PriceTier(
            version=version,
            up_to_prompt_tokens=tier.up_to_prompt_tokens,
            **{_TIER_COLUMNS[kind]: tier.prices[kind] for kind in PRICE_KINDS},
        )
        for tier in tiers
    )
    return version


def describe_tiers(tiers: Sequence[TierFigures]) -> str:
    """One line per price set: `input 2, output 10, …` (tiers separated by `; `)."""
    parts = []
    for tier in tiers:
        prices = ", ".join(f"{kind} {money.plain(tier.prices[kind])}" for kind in PRICE_KINDS)
        bound = tier.up_to_prompt_tokens
        if len(tiers) > 1:
            prices = (f"up to {bound:,} prompt tokens: " if bound else "above: ") + prices
        parts.append(prices)
    return "; ".join(parts)


def _same_tiers(a: Sequence[TierFigures], b: Sequence[TierFigures]) -> bool:
    return len(a) == len(b) and all(
        x.up_to_prompt_tokens == y.up_to_prompt_tokens
        and all(Decimal(x.prices[k]) == Decimal(y.prices[k]) for k in PRICE_KINDS)
        for x, y in zip(a, b, strict=True)
    )


def _shown(value: Any) -> str:
    return json.dumps(value, default=str) if not isinstance(value, str) else repr(value)


def copy_model(source: Model, new_id: str, *, source_note: str = "copy", **changes: Any) -> Model:
    """A new model with `source`'s limits, capabilities and current prices (no aliases, no
    deployments), `changes` applied: a variant an operator (or a test) serves separately."""
    clone = Model(id=new_id)
    for field_ in Model._meta.concrete_fields:
        if field_.name not in ("id", "created_at", "updated_at"):
            setattr(clone, field_.attname, getattr(source, field_.attname))
    clone.name = new_id
    for name, value in changes.items():
        setattr(clone, name, value)
    clone.save(force_insert=True)
    tiers = current_tiers(source)
    if tiers:
        create_price_version(clone, tiers, source=f"{source_note} of {source.pk}")
    return clone


@dataclass
class LoadReport:
    """What a load changed (or, with `check`, would change)."""

    created: int = 0
    updated: int = 0
    new_price_versions: int = 0
    changes: list[str] = field(default_factory=list)
    written: bool = False


def _fields(entry: CatalogEntry) -> dict[str, Any]:
    return {
        "name": entry.name,
        "context_window": entry.context_window,
        "max_output_tokens": entry.max_output_tokens,
        "source_url": entry.source_url,
        "checked_on": entry.checked_on,
        "sort_order": entry.position,
        **{
            k: ("" if k == "default_effort" and v is None else v)
            for k, v in entry.capabilities.items()
        },
        **entry.media,  # only when the entry states it: else the model keeps its own
    }


def _plan(entries: list[CatalogEntry], report: LoadReport) -> list[tuple[CatalogEntry, bool]]:
    """Fill `report` with the differences; returns (entry, needs new prices) per entry."""
    existing = {m.id: m for m in Model.objects.filter(id__in=[e.id for e in entries])}
    aliases = dict(ModelAlias.objects.values_list("alias", "model_id"))
    plan = []
    for entry in entries:
        model = existing.get(entry.id)
        if model is None:
            report.created += 1
            report.changes.append(f"+ {entry.id}: new model ({entry.name})")
        else:
            fields = _fields(entry)
            changed = [
                f"~ {entry.id}: {key} {_shown(getattr(model, name))} → {_shown(fields[name])}"
                for name, key in _REPORTED_FIELDS.items()
                if name in fields and getattr(model, name) != fields[name]
            ]
            report.updated += bool(changed)
            report.changes.extend(changed)
        for alias in entry.aliases:
            owner = aliases.get(alias)
            if owner is None:
                report.changes.append(f"+ {entry.id}: alias {alias!r}")
            elif owner != entry.id:
                report.changes.append(f"~ alias {alias!r}: {owner} → {entry.id}")
        old = current_tiers(model) if model is not None else None
        needs_prices = old is None or not _same_tiers(old, entry.tiers)
        if needs_prices:
            report.new_price_versions += 1
            if old:
                report.changes.append(f"~ {entry.id}: prices were {describe_tiers(old)}")
            report.changes.append(
                f"{'+' if not old else '~'} {entry.id}: new price version, effective when "
                f"loaded: {describe_tiers(entry.tiers)}"
            )
        plan.append((entry, needs_prices))
    return plan


def _plan_suggestions(catalog_file: CatalogFile, report: LoadReport) -> None:
    """Report changed suggested chains. Suggestions for models the file does not name are left
    alone (an operator's own), like models."""
    named = [s.model for s in catalog_file.suggestions]
    existing = {s.model: s.model_ids for s in SuggestedChain.objects.filter(model__in=named)}
    for suggestion in catalog_file.suggestions:
        old = existing.get(suggestion.model)
        new = list(suggestion.models)
        if old is None:
            report.changes.append(f"+ {suggestion.model}: suggested chain {' → '.join(new)}")
        elif old != new:
            report.changes.append(
                f"~ {suggestion.model}: suggested chain {' → '.join(old)} → {' → '.join(new)}"
            )


def load_catalog(
    path: Path = BUNDLED_CATALOG, *, check: bool = False, source: str | None = None
) -> LoadReport:
    """Create or update every model, alias and price in the file.

    The file is validated whole first: a bad value refuses it with nothing written. Changed
    prices become a new price version effective from this moment; requests admitted before it
    keep the version they were admitted with. `check=True` reports and writes nothing.
    Models in the database but not in the file are left alone (an operator's own models).
    """
    catalog_file = read_catalog(path)
    entries = catalog_file.entries
    with transaction.atomic():
        report = LoadReport()
        plan = _plan(entries, report)
        _plan_suggestions(catalog_file, report)
        if check:
            return report
        for entry, needs_prices in plan:
            model, _ = Model.objects.update_or_create(id=entry.id, defaults=_fields(entry))
            for alias in entry.aliases:
                ModelAlias.objects.update_or_create(alias=alias, defaults={"model": model})
            if needs_prices:
                create_price_version(model, entry.tiers, source=source or f"load_catalog {path}")
        for suggestion in catalog_file.suggestions:
            SuggestedChain.objects.update_or_create(
                model=suggestion.model,
                defaults={
                    "model_ids": list(suggestion.models),
                    "why": suggestion.why,
                    "source_url": suggestion.source_url,
                    "checked_on": suggestion.checked_on,
                    "sort_order": suggestion.position,
                },
            )
        bump_catalog_version()
        report.written = True
        return report


def upsert_deployment(
    *,
    name: str,
    base_url: str = "",
    api_key: str = "",
    model_ids: Iterable[str] = (),
    weight: int | None = None,
    max_concurrency: int | None = None,
    kind: str = Deployment.Kind.ANTHROPIC,
    fair_share: float | None = None,
    region: str = "",
    project: str = "",
    aws_access_key_id: str = "",
    aws_secret_access_key: str = "",
    aws_session_token: str = "",
    service_account_json: str = "",
    platform_model_ids: dict[str, str] | None = None,
    options: dict[str, str | bool] | None = None,
) -> tuple[Deployment, bool]:
    """Create or update a deployment (keyword arguments, as add_deployment takes them); no model
    ids = it serves every catalog model. An update that gives no credentials keeps the stored
    ones. Checked and saved by catalog/deployment_services.py: a DeploymentInputError names the
    field, and nothing is saved."""
    credentials = Credentials(
        api_key=api_key,
        aws_access_key_id=aws_access_key_id,
        aws_secret_access_key=aws_secret_access_key,
        aws_session_token=aws_session_token,
        service_account_json=service_account_json,
    )
    return deployment_services.upsert(
        DeploymentInput(
            name=name,
            kind=kind,
            base_url=base_url,
            region=region,
            project=project,
            credentials=credentials if credentials.given() else None,
            models=tuple(model_ids),
            model_ids=platform_model_ids,
            options=options,
            weight=weight,
            max_concurrency=max_concurrency,
            fair_share=fair_share,
        )
    )
