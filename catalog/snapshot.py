"""An immutable in-process view of the catalog for the hot path (no ORM query per request).

Each process polls `CatalogVersion` at most every EZAT_CATALOG_POLL_INTERVAL seconds, in the
background, and swaps in a new snapshot when it moved — an edit in the admin reaches every
process within a few seconds, and a request never waits for the poll.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from catalog.chains import AUTO_MODEL_ID, AUTO_MODEL_NAME, is_auto
from catalog.crypto import ProviderKeyDecryptionError
from catalog.media import CONSERVATIVE_FIGURES, MediaFigures
from catalog.platform_config import (
    CLAUDE_KINDS,
    OPENAI_KINDS,
    base_url_for,
    default_model_id,
)
from catalog.pricing import Prices, PriceSchedule, PriceTier, TierError
from catalog.schema import EFFORT_LEVELS

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
    # The share rule's fraction (gateway.limits.common.share_caps); 1.0 = no share rule.
    fair_share: float = 1.0
    # Bedrock/Vertex: where and as whom (secrets: AWS access keys, a service-account key).
    region: str = ""
    project: str = ""
    secrets: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    model_ids: dict[str, str] = field(default_factory=dict, compare=False)
    # Provider switches (catalog/platform_config.py OPTIONS).
    options: dict[str, str | bool] = field(default_factory=dict, compare=False)

    def upstream_id(self, model_id: str) -> str:
        """This deployment's id for a catalog model: its own override, else its kind's default."""
        return self.model_ids.get(model_id) or default_model_id(self.kind, model_id)


@dataclass(frozen=True, slots=True)
class Route:
    deployment: DeploymentInfo
    upstream_model_id: str
    # Where the provider takes a reasoning effort natively (a model with "thinking": "effort"):
    # the levels it takes and the one it defaults to (gateway/providers/openai/request.py).
    efforts: tuple[str, ...] = ()
    default_effort: str | None = None


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
    # Set only on the ezat/auto entry (`auto_model`): the models it resolves to. Such an entry
    # has no routes and is never billed: the model that answers is.
    chain: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SuggestedChainInfo:
    model: str
    models: tuple[str, ...]
    why: str
    source_url: str
    checked_on: str


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    version: int
    models: tuple[ModelInfo, ...]
    by_name: dict[str, ModelInfo]
    # Models in the catalog that cannot serve (disabled, or without prices): every name (id
    # and aliases, lower case) → canonical id. A request list may name them; they are skipped.
    unavailable: dict[str, str] = field(default_factory=dict)
    # Catalog suggestions by model id (ezat/auto's is its default chain).
    suggestions: dict[str, SuggestedChainInfo] = field(default_factory=dict)
    # ezat/auto entries built for a chain, shared by every request with that chain.
    _auto: dict[tuple[str, ...], ModelInfo] = field(default_factory=dict, compare=False)

    def resolve(self, name: str) -> ModelInfo | None:
        """Canonical id or alias, any letter case, surrounding spaces ignored."""
        return self.by_name.get(name.strip().lower())

    def canonical(self, name: str) -> str | None:
        """The canonical id of any catalog model, servable or not; None when unknown."""
        key = name.strip().lower()
        found = self.by_name.get(key)
        return found.id if found is not None else self.unavailable.get(key)

    def servable(self, model_id: str) -> ModelInfo | None:
        return self.by_name.get(model_id.lower())

    @property
    def auto_chain(self) -> tuple[str, ...]:
        """ezat/auto's default: the catalog's suggested general-purpose chain."""
        suggestion = self.suggestions.get(AUTO_MODEL_ID)
        return suggestion.models if suggestion is not None else ()

    def auto(self, chain: tuple[str, ...] | None = None) -> ModelInfo | None:
        """ezat/auto for `chain` (default: the catalog's), with what every servable model of it
        shares; None when none of them can serve."""
        chain = self.auto_chain if chain is None else chain
        found = self._auto.get(chain)
        if found is None:
            members = [m for m in (self.servable(i) for i in chain) if m is not None]
            if not members:
                return None
            found = auto_model(members, self.suggestions.get(AUTO_MODEL_ID))
            if len(self._auto) < 1024:  # bounded: org chains are few
                self._auto[chain] = found
        return found

    def listed(self, chain: tuple[str, ...] | None = None) -> tuple[ModelInfo, ...]:
        """The models a model list shows: the catalog's, then ezat/auto when it can serve."""
        auto = self.auto(chain)
        return self.models if auto is None else (*self.models, auto)

    def lookup(self, name: str, chain: tuple[str, ...] | None = None) -> ModelInfo | None:
        """`resolve`, plus ezat/auto (with `chain`, the org's)."""
        return self.auto(chain) if is_auto(name) else self.resolve(name)


def _shared_levels(members: list[ModelInfo]) -> tuple[str, ...]:
    return tuple(
        level for level in EFFORT_LEVELS if all(level in m.reasoning_efforts for m in members)
    )


def auto_model(members: list[ModelInfo], suggestion: SuggestedChainInfo | None) -> ModelInfo:
    """ezat/auto for a chain: what every model of it shares (capabilities, the smallest limits),
    so a request valid for it is valid for each of them. Its `pricing` is the first model's and
    is never billed: the answering model's prices are."""
    first = members[0]
    efforts = _shared_levels(members)
    defaults = {m.default_effort for m in members}
    thinking = {m.thinking for m in members}
    return ModelInfo(
        id=AUTO_MODEL_ID,
        name=AUTO_MODEL_NAME,
        aliases=(),
        sampling=all(m.sampling for m in members),
        prompt_caching=all(m.prompt_caching for m in members),
        vision=all(m.vision for m in members),
        pdf=all(m.pdf for m in members),
        tools=all(m.tools for m in members),
        structured_outputs=all(m.structured_outputs for m in members),
        reasoning_efforts=efforts,
        max_output_tokens=min(m.max_output_tokens for m in members),
        context_window=min(m.context_window for m in members),
        pricing=first.pricing,
        routes=(),
        created_at=first.created_at,
        media=MediaFigures(
            max(m.media.image_max_tokens for m in members),
            max(m.media.pdf_page_max_tokens for m in members),
            min(m.media.pdf_max_pages for m in members),
        ),
        default_effort=defaults.pop() if len(defaults) == 1 else None,
        thinking=thinking.pop() if len(thinking) == 1 else "none",
        thinking_can_be_disabled=all(m.thinking_can_be_disabled for m in members),
        forced_tool_choice=all(m.forced_tool_choice for m in members),
        source_url=suggestion.source_url if suggestion is not None else "",
        checked_on=suggestion.checked_on if suggestion is not None else "",
        chain=tuple(m.id for m in members),
    )


def build_snapshot() -> CatalogSnapshot:
    """Read the whole catalog (a few small queries). Runs in a worker thread."""
    from catalog.models import CatalogVersion, Deployment, DeploymentModel, Model, SuggestedChain

    version = CatalogVersion.objects.filter(pk=1).values_list("version", flat=True).first() or 0
    deployments = {d.id: d for d in Deployment.objects.filter(enabled=True)}
    infos: dict[int, DeploymentInfo] = {}
    for d in list(deployments.values()):
        try:
            api_key = d.get_api_key()
            secrets = d.get_secrets()
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
            base_url=base_url_for(d.kind, d.base_url, d.region),
            api_key=api_key,
            weight=d.weight,
            max_concurrency=d.max_concurrency,
            fair_share=d.fair_share,
            region=d.region,
            project=d.project,
            secrets=secrets,
            model_ids=dict(d.model_ids or {}),
            options=dict(d.options or {}),
        )
    explicit: dict[str, list[Route]] = {}
    for link in DeploymentModel.objects.filter(deployment_id__in=infos).select_related("model"):
        explicit.setdefault(link.model_id, []).append(
            Route(
                infos[link.deployment_id],
                link.upstream_model_id or infos[link.deployment_id].upstream_id(link.model_id),
            )
        )
    serve_all = [
        infos[d.id] for d in deployments.values() if d.serves_all_models and d.kind in CLAUDE_KINDS
    ]
    # A "serve every model" deployment speaks Claude's API, so it serves the catalog's Claude
    # models: not a model an OpenAI-kind deployment lists, nor one whose thinking is a
    # provider's native reasoning effort (no Claude model's is).
    chat_models = {
        model_id
        for model_id, routes in explicit.items()
        if any(r.deployment.kind in OPENAI_KINDS for r in routes)
    }
    schedules = _current_schedules()
    models = []
    by_name: dict[str, ModelInfo] = {}
    unavailable: dict[str, str] = {}
    for m in Model.objects.prefetch_related("aliases"):
        pricing = schedules.get(m.id)
        if not m.enabled or pricing is None:
            if m.enabled:
                # Nothing to bill it at: not served until an operator gives it prices.
                logger.error("model has no prices; not served", extra={"model": m.id})
            for name in (m.id.lower(), *(a.alias for a in m.aliases.all())):
                unavailable.setdefault(name, m.id)
            continue
        routes = explicit.get(m.id, [])
        if m.thinking == Model.Thinking.EFFORT:
            efforts = tuple(m.reasoning_efforts or ())
            default = m.default_effort or None
            routes = [Route(r.deployment, r.upstream_model_id, efforts, default) for r in routes]
        if m.id not in chat_models and m.thinking != Model.Thinking.EFFORT:
            routes = routes + [Route(d, d.upstream_id(m.id)) for d in serve_all]
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
    suggestions = {
        s.model: SuggestedChainInfo(
            model=s.model,
            models=tuple(s.model_ids),
            why=s.why,
            source_url=s.source_url,
            checked_on=s.checked_on.isoformat() if s.checked_on else "",
        )
        for s in SuggestedChain.objects.all()
    }
    for name in list(unavailable):
        if name in by_name:  # an alias an enabled model also answers to: it wins
            del unavailable[name]
    return CatalogSnapshot(
        version=version,
        models=tuple(models),
        by_name=by_name,
        unavailable=unavailable,
        suggestions=suggestions,
    )


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


_db_thread: ThreadPoolExecutor | None = None
_db_thread_lock = threading.Lock()


def _catalog_db_thread() -> ThreadPoolExecutor:
    """The one thread that reads the catalog from the database. Not the loop's default
    executor: each of its threads that ever ran a poll would keep a session of its own (a
    busy process grows that pool), so catalog reads held up to min(32, CPUs + 4) sessions."""
    global _db_thread
    with _db_thread_lock:
        if _db_thread is None:
            _db_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ezat-catalog-db")
        return _db_thread


def _in_db_thread(func: Any) -> Any:
    return sync_to_async(func, thread_sensitive=False, executor=_catalog_db_thread())


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
                    self._snapshot = await _in_db_thread(_load)()
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
            version = await _in_db_thread(_read_version)()
            if self._snapshot is None or version != self._snapshot.version:
                self._snapshot = await _in_db_thread(_load)()
                logger.info("catalog reloaded", extra={"catalog_version": version})
        except Exception:
            # The old snapshot keeps serving; the next poll retries. Logged, not swallowed.
            logger.exception("catalog poll failed")

    def invalidate(self) -> None:
        self._snapshot = None


holder = SnapshotHolder()
