"""Writes to the catalog: loading the bundled data file, deployments, version bumps."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import F

from catalog.models import CatalogVersion, Deployment, DeploymentModel, Model, ModelAlias

BUNDLED_CATALOG = Path(__file__).parent / "data" / "models.json"

_CAPABILITY_FIELDS = {
    "sampling": "sampling",
    "promptCaching": "prompt_caching",
    "vision": "vision",
    "pdf": "pdf",
    "tools": "tools",
    "structuredOutputs": "structured_outputs",
}
_MEDIA_FIELDS = {
    "imageMaxTokens": "image_max_tokens",
    "pdfPageMaxTokens": "pdf_page_max_tokens",
    "pdfMaxPages": "pdf_max_pages",
}
_PRICE_FIELDS = {
    "input": "price_input",
    "output": "price_output",
    "cacheRead": "price_cache_read",
    "cacheWrite5m": "price_cache_write_5m",
    "cacheWrite1h": "price_cache_write_1h",
}


class CatalogDataError(ValueError):
    """The catalog file is malformed; the message names the entry and field."""


def bump_catalog_version() -> None:
    updated = CatalogVersion.objects.filter(pk=1).update(version=F("version") + 1)
    if not updated:
        CatalogVersion.objects.get_or_create(pk=1, defaults={"version": 1})


def _price(entry_id: str, field: str, value: Any) -> Decimal:
    if isinstance(value, float):
        raise CatalogDataError(f"{entry_id}: pricing.{field} must be a decimal string, not a float")
    try:
        price = Decimal(str(value))
    except InvalidOperation as exc:
        raise CatalogDataError(f"{entry_id}: pricing.{field} is not a number") from exc
    if price < 0 or price.as_tuple().exponent < -6:  # type: ignore[operator]
        raise CatalogDataError(f"{entry_id}: pricing.{field} must be ≥ 0 with ≤ 6 decimals")
    return price


def _model_fields(entry: Mapping[str, Any], position: int) -> dict[str, Any]:
    entry_id = entry["id"]
    caps = entry["capabilities"]
    fields: dict[str, Any] = {
        "name": entry["name"],
        "max_output_tokens": int(entry["maxOutputTokens"]),
        "context_window": int(entry["contextWindow"]),
        "reasoning_efforts": list(caps.get("reasoningEfforts", [])),
        "sort_order": position,
    }
    for key, field in _CAPABILITY_FIELDS.items():
        fields[field] = bool(caps[key])
    for key, field in _PRICE_FIELDS.items():
        fields[field] = _price(entry_id, key, entry["pricing"][key])
    media = entry.get("media")
    if media is not None:
        for key, field in _MEDIA_FIELDS.items():
            value = media[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CatalogDataError(f"{entry_id}: media.{key} must be a positive integer")
            fields[field] = value
    return fields


@transaction.atomic
def load_catalog(path: Path = BUNDLED_CATALOG) -> tuple[int, int]:
    """Create or update every model and alias in the file. Returns (created, updated)."""
    try:
        data = json.loads(path.read_text())
        entries = data["models"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CatalogDataError(f"cannot read {path}: {exc}") from exc
    created = updated = 0
    for position, entry in enumerate(entries):
        try:
            fields = _model_fields(entry, position)
        except (KeyError, TypeError, ValueError) as exc:
            raise CatalogDataError(f"entry {position}: missing or bad field {exc}") from exc
        model, was_created = Model.objects.update_or_create(id=entry["id"], defaults=fields)
        created += was_created
        updated += not was_created
        for alias in entry.get("aliases", []):
            ModelAlias.objects.update_or_create(
                alias=alias.strip().lower(), defaults={"model": model}
            )
    bump_catalog_version()
    return created, updated


@transaction.atomic
def upsert_deployment(
    *,
    name: str,
    base_url: str,
    api_key: str,
    model_ids: Iterable[str] = (),
    weight: int | None = None,
    max_concurrency: int | None = None,
    kind: str = Deployment.Kind.ANTHROPIC,
) -> tuple[Deployment, bool]:
    """Create or update a deployment. No model ids = it serves every catalog model."""
    model_ids = list(model_ids)
    unknown = sorted(
        set(model_ids) - set(Model.objects.filter(id__in=model_ids).values_list("id", flat=True))
    )
    if unknown:
        raise CatalogDataError(f"unknown model id(s): {', '.join(unknown)}")
    deployment = Deployment.objects.filter(name=name).first()
    created = deployment is None
    if deployment is None:
        deployment = Deployment(name=name)
    deployment.kind = kind
    deployment.base_url = base_url.rstrip("/")
    deployment.set_api_key(api_key)
    deployment.serves_all_models = not model_ids
    if weight is not None:
        deployment.weight = weight
    if max_concurrency is not None:
        deployment.max_concurrency = max_concurrency
    deployment.full_clean(exclude=["api_key_encrypted", "api_key_hint"])
    deployment.save()
    deployment.models.exclude(model_id__in=model_ids).delete()
    for model_id in model_ids:
        DeploymentModel.objects.get_or_create(deployment=deployment, model_id=model_id)
    return deployment, created
