"""A request's model chain: the models that may answer it, in order, each with its own routes
and its own upstream body (issue 20, "Smart Routing").

The chain is the requested model, then its fallbacks:

1. the request's own list (`models` in the body of the OpenAI APIs, else the
   `x-ezat-fallback-models` header on every inference API; an empty list turns fallbacks off);
2. else the org's policy for the requested model (accounts, cached per process);
3. else none (off by default).

`ezat/auto` is a chain by itself: the request's list, else the org's chain for ezat/auto, else the
catalog's suggested general-purpose chain. Requests to it are validated against what every model
of the chain shares (catalog.snapshot.auto_model), so each of them can take the request.

A model in a chain answers only if it can serve the request (gateway.protocols.fallbacks) and the
key may use it (`key_may_use`). The exchange (gateway/exchange.py) walks the chain before the
first token: it moves on only when a model cannot answer at all (disabled, every deployment
cooling down, at capacity or failing with a retryable error), never on the caller's own errors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from accounts.fallbackcache import cache as fallback_cache
from accounts.keycache import KeyInfo
from catalog.chains import AUTO_MODEL_ID, MAX_CHAIN_MODELS, ChainError, check_chain, is_auto
from catalog.snapshot import CatalogSnapshot, ModelInfo, Route
from gateway.errors import GatewayError
from gateway.protocols.anthropic.validation import unknown_model
from gateway.protocols.fallbacks import RequestNeeds, unfit

FALLBACK_HEADER = "x-ezat-fallback-models"
BODY_FIELD = "models"


def key_may_use(key: KeyInfo, model: ModelInfo) -> bool:
    """Whether this key may call `model`. Every model of a chain passes here before it is called;
    one the key may not use is skipped, never called.

    A key with an allow-list (issue 19) may call only the models on it (canonical ids, so every
    alias of an allowed model is allowed); a key without one may call every model.
    """
    return key_allows(key, model.id)


def key_allows(key: KeyInfo, model_id: str) -> bool:
    allowed = key.allowed_models
    return allowed is None or model_id in allowed


def not_allowed(key: KeyInfo, name: str) -> GatewayError:
    """The 403 for a model the key's allow-list does not name (both APIs: permission_error)."""
    listed = ", ".join(sorted(key.allowed_models or ()))
    return GatewayError(
        403,
        f"this API key may not use the model `{name}`; it may use: {listed}",
        type_="permission_error",
        param="model",
    )


def check_allowed(key: KeyInfo, model_id: str, name: str) -> None:
    if not key_allows(key, model_id):
        raise not_allowed(key, name)


@dataclass(slots=True)
class Prepared:
    """A candidate's request, ready for its routes: the upstream body per deployment, the effort
    level it applies (x-ezat-reasoning-effort) and the handler's own translation."""

    body_for: Callable[[Route], bytes]
    effort: str | None = None
    request: Any = None


Build = Callable[[ModelInfo], Prepared]


@dataclass(slots=True)
class Candidate:
    """One model of a chain, as the exchange tries it."""

    model: ModelInfo
    name: str  # what the response calls it: the name as sent for the requested model
    build: Build | None = None  # prepares the request for this model (lazily, for fallbacks)
    prepared: Prepared | None = None
    estimate: int = 0  # worst-case prompt tokens for this model (its media figures)
    max_tokens: int = 0  # the output limit sent to this model

    def prepare(self) -> Prepared:
        if self.prepared is None:
            assert self.build is not None, "a candidate needs a request or a way to build one"
            self.prepared = self.build(self.model)
        return self.prepared


@dataclass(slots=True)
class ModelChain:
    """What a request's model name and lists resolve to, before the request is translated."""

    name: str  # the model as sent
    requested_id: str  # its canonical id, or ezat/auto
    primary: ModelInfo  # what the request is validated against (ezat/auto: the shared caps)
    models: list[ModelInfo]  # servable models in order; the first is tried first
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (model id, why), not called
    # Whether the request could be answered by another model than the first (the stream's
    # x-ezat-model header waits for the answer when it can).
    explicit: bool = False  # the request brought its own list

    @property
    def auto(self) -> bool:
        return self.requested_id == AUTO_MODEL_ID

    def response_name(self, model: ModelInfo) -> str:
        """`model` in the response: the name as sent when the requested model answered, the
        answering model's canonical id otherwise."""
        return self.name if model.id == self.requested_id else model.id


def parse_header(value: str | None, snap: CatalogSnapshot) -> tuple[str, ...] | None:
    """`x-ezat-fallback-models: a,b` as canonical ids; None when the header is absent, () when
    it is present and empty (fallbacks off). A 400 names the bad entry."""
    if value is None:
        return None
    entries = [part.strip() for part in value.split(",")] if value.strip() else []
    return _checked(entries, FALLBACK_HEADER, snap)


def parse_body_list(body: Mapping[str, Any], snap: CatalogSnapshot) -> tuple[str, ...] | None:
    """`models: [...]` (OpenRouter's shape) as canonical ids; None when absent."""
    raw = body.get(BODY_FIELD)
    if raw is None:
        return None
    return _checked(raw, BODY_FIELD, snap)


def _checked(raw: object, param: str, snap: CatalogSnapshot) -> tuple[str, ...]:
    try:
        return check_chain(raw, param=param, canonical=snap.canonical)
    except ChainError as exc:
        raise GatewayError(400, exc.message, param=exc.param) from None


async def resolve_chain(
    snap: CatalogSnapshot,
    key: KeyInfo,
    name: str,
    explicit: tuple[str, ...] | None,
    *,
    openai: bool,
) -> ModelChain:
    """The chain of a request naming `name` with the request's own list `explicit` (None: none
    sent). A name the catalog does not know is a 404, as without fallbacks."""
    policies: Mapping[str, tuple[str, ...]] = {}
    if explicit is None:
        policies = await fallback_cache.chains(key.org_id)
    skipped: list[tuple[str, str]] = []
    if is_auto(name):
        chain = explicit if explicit else policies.get(AUTO_MODEL_ID) or snap.auto_chain
        models = _servable(snap, key, chain, skipped)
        if not models and chain and not any(key_allows(key, m) for m in chain):
            raise not_allowed(key, name)
        if not models:
            raise GatewayError(
                503,
                f"no model of {AUTO_MODEL_ID}'s chain ({', '.join(chain) or 'empty'}) can serve "
                "requests right now",
                type_="overloaded_error",
                headers={"retry-after": "1"},
            )
        primary = snap.auto(tuple(m.id for m in models))
        assert primary is not None  # models is not empty
        return ModelChain(name, AUTO_MODEL_ID, primary, models, skipped, explicit is not None)
    requested = snap.resolve(name)
    canonical = requested.id if requested is not None else snap.canonical(name)
    if canonical is None:
        raise _unknown(name, openai)
    # The model asked for must be allowed; fallbacks the key may not use are skipped.
    check_allowed(key, canonical, name)
    fallbacks = explicit if explicit is not None else policies.get(canonical, ())
    fallbacks = tuple(f for f in fallbacks if f != canonical)[:MAX_CHAIN_MODELS]
    models = _servable(snap, key, (canonical, *fallbacks), skipped)
    if not models:
        # The requested model is disabled (or has no prices) and nothing can stand in: the
        # answer is what it always was.
        raise _unknown(name, openai)
    primary = requested if requested is not None and requested in models else models[0]
    return ModelChain(name, canonical, primary, models, skipped, explicit is not None)


def _servable(
    snap: CatalogSnapshot, key: KeyInfo, ids: tuple[str, ...], skipped: list[tuple[str, str]]
) -> list[ModelInfo]:
    models: list[ModelInfo] = []
    for model_id in ids:
        model = snap.servable(model_id)
        if model is None:
            skipped.append((model_id, "disabled in the catalog"))
        elif not key_may_use(key, model):
            skipped.append((model_id, "not allowed for this key"))
        elif model not in models:
            models.append(model)
    return models


def _unknown(name: str, openai: bool) -> GatewayError:
    err = unknown_model(name)
    if openai:
        err.message = f"The model `{name}` does not exist or you do not have access to it."
    return err


def fitting(
    chain: ModelChain,
    needs: Callable[[], RequestNeeds],
    estimate_for: Callable[[ModelInfo], int],
) -> list[ModelInfo]:
    """The chain's models that can serve a request with `needs()` (read only when there are
    other models to check), in order. The first model is kept whatever it needs: it is the one
    the caller asked for (or ezat/auto's first, validated through the shared capabilities);
    errors it causes are the caller's, as without fallbacks. The others that cannot are
    recorded in `chain.skipped`."""
    if len(chain.models) < 2:
        return chain.models
    wanted = needs()
    kept = chain.models[:1]
    for model in chain.models[1:]:
        reason = unfit(model, wanted, estimate_for(model))
        if reason is None:
            kept.append(model)
        else:
            chain.skipped.append((model.id, reason))
    return kept
