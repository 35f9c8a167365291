"""An immutable in-process view of the catalog for the hot path (no ORM query per request).

Each process polls `CatalogVersion` at most every EZAT_CATALOG_POLL_INTERVAL seconds, in the
background, and swaps in a new snapshot when it moved — an edit in the admin reaches every
process within a few seconds, and a request never waits for the poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from billing.pricing import Prices, PriceSchedule, PriceTier, TierError
from catalog.crypto import ProviderKeyDecryptionError
from catalog.media import CONSERVATIVE_FIGURES, MediaFigures

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeploymentInfo:
    id: int
    name: str
    kind: str
    base_url: str
    api_key: str = field(repr=False)
    weight: int
    max_concurrency: int


@dataclass(frozen=True, slots=True)
class Route:
    deployment: DeploymentInfo
    upstream_model_id: str


@dataclass(frozen=True, slots=True)
class ModelInfo:
    id: str
    name: str
    aliases: tuple[str, ...]
    sampling: bool
    prompt_caching: bool
    vision: bool
    pdf: bool
    tools: bool
    structured_outputs: bool
    reasoning_efforts: tuple[str, ...]
    max_output_tokens: int
    context_window: int
    pricing: PriceSchedule
    routes: tuple[Route, ...]
    created_at: str
    media: MediaFigures = CONSERVATIVE_FIGURES
    default_effort: str | None = None
    thinking: str = "none"
    thinking_can_be_disabled: bool = True
    forced_tool_choice: bool = True
    source_url: str = ""
    checked_on: str = ""


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    version: int
    models: tuple[ModelInfo, ...]
    by_name: dict[str, ModelInfo]

    def resolve(self, name: str) -> ModelInfo | None:
        """Canonical id or alias, any letter case, surrounding spaces ignored."""
        return self.by_name.get(name.strip().lower())


def build_snapshot() -> CatalogSnapshot:
    """Read the whole catalog (a few small queries). Runs in a worker thread."""
    from catalog.models import CatalogVersion, Deployment, DeploymentModel, Model

    version = CatalogVersion.objects.filter(pk=1).values_list("version", flat=True).first() or 0
    deployments = {d.id: d for d in Deployment.objects.filter(enabled=True)}
    infos: dict[int, DeploymentInfo] = {}
    for d in list(deployments.values()):
        try:
            api_key = d.get_api_key()
        except ProviderKeyDecryptionError:
            # Encrypted under another EZAT_ENCRYPTION_KEY/SECRET_KEY: unusable, so not routed
            # to; every other deployment keeps serving. The operator re-enters the key.
            logger.error(
                "deployment key cannot be decrypted; skipped", extra={"deployment": d.name}
            )
            del deployments[d.id]
            continue
        infos[d.id] = DeploymentInfo(
            id=d.id,
            name=d.name,
            kind=d.kind,
            base_url=d.base_url,
            api_key=api_key,
            weight=d.weight,
            max_concurrency=d.max_concurrency,
        )
    explicit: dict[str, list[Route]] = {}
    for link in DeploymentModel.objects.filter(deployment_id__in=infos).select_related("model"):
        explicit.setdefault(link.model_id, []).append(
            Route(infos[link.deployment_id], link.effective_upstream_id)
        )
    serve_all = [infos[d.id] for d in deployments.values() if d.serves_all_models]
    schedules = _current_schedules()
    models = []
    by_name: dict[str, ModelInfo] = {}
    for m in Model.objects.filter(enabled=True).prefetch_related("aliases"):
        pricing = schedules.get(m.id)
        if pricing is None:
            # Nothing to bill it at: not served until an operator gives it prices.
            logger.error("model has no prices; not served", extra={"model": m.id})
            continue
        routes = explicit.get(m.id, []) + [Route(d, m.default_upstream_id) for d in serve_all]
        info = ModelInfo(
            id=m.id,
            name=m.name,
            aliases=tuple(a.alias for a in m.aliases.all()),
            sampling=m.sampling,
            prompt_caching=m.prompt_caching,
            vision=m.vision,
            pdf=m.pdf,
            tools=m.tools,
            structured_outputs=m.structured_outputs,
            reasoning_efforts=tuple(m.reasoning_efforts),
            max_output_tokens=m.max_output_tokens,
            context_window=m.context_window,
            pricing=pricing,
            routes=tuple(sorted(routes, key=lambda r: r.deployment.id)),
            created_at=m.created_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            media=MediaFigures(m.image_max_tokens, m.pdf_page_max_tokens, m.pdf_max_pages),
            default_effort=m.default_effort or None,
            thinking=m.thinking,
            thinking_can_be_disabled=m.thinking_can_be_disabled,
            forced_tool_choice=m.forced_tool_choice,
            source_url=m.source_url,
            checked_on=m.checked_on.isoformat() if m.checked_on else "",
        )
        models.append(info)
        by_name[m.id.lower()] = info
        for alias in info.aliases:
            by_name.setdefault(alias, info)
    return CatalogSnapshot(version=version, models=tuple(models), by_name=by_name)


def _current_schedules() -> dict[str, PriceSchedule]:
    """Each model's prices in force: its newest price version that has tiers."""
    from catalog.models import PriceVersion

    schedules: dict[str, PriceSchedule] = {}
    versions = PriceVersion.objects.prefetch_related("tiers").order_by(
        "model_id", "-effective_from", "-id"
    )
    for version in versions:
        tiers = list(version.tiers.all())
        if version.model_id in schedules or not tiers:
            continue
        try:
            schedules[version.model_id] = _schedule(version.pk, tiers)
        except TierError:
            # Written around the validation (raw SQL, a shell): this version cannot bill. The
            # model falls back to its previous good version rather than taking the catalog down.
            logger.exception("price version has bad tiers; skipped", extra={"version": version.pk})
    return schedules


def _schedule(version: int, tiers: list[Any]) -> PriceSchedule:
    return PriceSchedule(
        version=version,
        tiers=tuple(
            PriceTier(
                t.up_to_prompt_tokens,
                Prices.from_decimals(
                    t.price_input,
                    t.price_output,
                    t.price_cache_read,
                    t.price_cache_write_5m,
                    t.price_cache_write_1h,
                ),
            )
            for t in tiers
        ),
    )


def _read_version() -> int:
    from catalog.models import CatalogVersion

    close_old_connections()
    return CatalogVersion.objects.filter(pk=1).values_list("version", flat=True).first() or 0


def _load() -> CatalogSnapshot:
    close_old_connections()
    return build_snapshot()


class SnapshotHolder:
    def __init__(self) -> None:
        self._snapshot: CatalogSnapshot | None = None
        self._checked_at = 0.0
        self._refresh: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> CatalogSnapshot:
        snapshot = self._snapshot
        if snapshot is None:
            async with self._lock:
                if self._snapshot is None:
                    self._snapshot = await sync_to_async(_load, thread_sensitive=False)()
                    self._checked_at = time.monotonic()
            return self._snapshot
        if time.monotonic() - self._checked_at > settings.EZAT_CATALOG_POLL_INTERVAL and (
            self._refresh is None or self._refresh.done()
        ):
            self._checked_at = time.monotonic()
            self._refresh = asyncio.get_running_loop().create_task(self._poll())
        return snapshot

    async def _poll(self) -> None:
        try:
            version = await sync_to_async(_read_version, thread_sensitive=False)()
            if self._snapshot is None or version != self._snapshot.version:
                self._snapshot = await sync_to_async(_load, thread_sensitive=False)()
                logger.info("catalog reloaded", extra={"catalog_version": version})
        except Exception:
            # The old snapshot keeps serving; the next poll retries. Logged, not swallowed.
            logger.exception("catalog poll failed")

    def invalidate(self) -> None:
        self._snapshot = None


holder = SnapshotHolder()
