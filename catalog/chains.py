"""Model chains: the ordered models a request may be answered by, and the catalog's suggestions.

Pure: no Django, no I/O. Shared by the catalog file's validation (`suggestedChains`), the
per-org policies an owner sets (accounts), and the gateway's request lists (`models`,
`x-ezat-fallback-models`), so the same limits hold everywhere:

- a list names at most MAX_CHAIN_MODELS models, each once;
- `ezat/auto` is a model a request can name, never an entry of a list: it *is* a chain.

`ezat/auto` resolves, per organization, to the chain the org configured for it, else to the
catalog's suggested general-purpose chain (the `suggestedChains` entry whose `model` is
`ezat/auto`). For any other model a chain entry lists the alternatives tried after it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

AUTO_MODEL_ID = "ezat/auto"
AUTO_MODEL_NAME = "EZAT Auto"
# At most this many models in a list: a request's `models` or fallback header, an org's policy
# for one model, the models of ezat/auto, a catalog suggestion.
MAX_CHAIN_MODELS = 5


class ChainError(ValueError):
    """A list of models that cannot be a chain; the message names the entry (`models[2]`)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def is_auto(name: str) -> bool:
    return name.strip().lower() == AUTO_MODEL_ID


def check_chain(
    raw: object,
    *,
    param: str,
    canonical: Callable[[str], str | None],
    owner: str | None = None,
) -> tuple[str, ...]:
    """The canonical ids of a list of model names, or ChainError naming the bad entry.

    `canonical` maps a name (id or alias, any case) to the catalog's canonical id, None when no
    such model exists. `param` is how the caller's field is named (`models`,
    `x-ezat-fallback-models`, `fallbacks`); entries are named `param[i]`. `owner` is the model
    the list belongs to (its canonical id): naming it in its own list is refused here — a caller
    of a request list drops it first (OpenRouter-style clients repeat `model` in `models`).
    """
    if not isinstance(raw, list | tuple):
        raise ChainError(f"{param}: must be an array of model ids", param)
    ids: list[str] = []
    for position, name in enumerate(raw):
        where = f"{param}[{position}]"
        if position >= MAX_CHAIN_MODELS:
            raise ChainError(f"{where}: at most {MAX_CHAIN_MODELS} models may be listed", where)
        if not isinstance(name, str):
            raise ChainError(f"{where}: must be a model id (a string)", where)
        if not name.strip():
            raise ChainError(f"{where}: must not be empty", where)
        if is_auto(name):
            raise ChainError(
                f"{where}: {AUTO_MODEL_ID} is a chain itself and cannot be listed in one", where
            )
        model_id = canonical(name)
        if model_id is None:
            raise ChainError(f"{where}: unknown model {name.strip()[:128]!r}", where)
        if owner is not None and model_id == owner:
            raise ChainError(f"{where}: {model_id} cannot be its own fallback", where)
        if model_id in ids:
            first = ids.index(model_id)
            raise ChainError(f"{where}: {model_id} is listed twice (also {param}[{first}])", where)
        ids.append(model_id)
    return tuple(ids)


# -- the catalog file's `suggestedChains` -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SuggestedChainEntry:
    model: str  # a catalog model id, or ezat/auto
    models: tuple[str, ...]  # tried after `model` (for ezat/auto: the models it resolves to)
    why: str
    source_url: str
    checked_on: date
    position: int = 0


class SuggestionError(ValueError):
    """A malformed `suggestedChains` entry; the message names it and the field."""


_SUGGESTION_KEYS = frozenset({"model", "models", "why", "source"})


def parse_suggested_chains(
    raw: Any,
    known: Mapping[str, str],
    source: Callable[[Any, str], tuple[str, date]],
) -> list[SuggestedChainEntry]:
    """`suggestedChains` of a catalog file. `known` maps every name in the file (ids and
    aliases, lower case) to its canonical id; `source` validates a `source` object."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SuggestionError("suggestedChains: must be a list")
    found: list[SuggestedChainEntry] = []
    seen: set[str] = set()
    for position, item in enumerate(raw):
        where = f"suggestedChains[{position}]"
        if not isinstance(item, Mapping):
            raise SuggestionError(f"{where}: must be an object")
        unknown = sorted(k for k in item if k not in _SUGGESTION_KEYS and not k.startswith("_"))
        if unknown:
            raise SuggestionError(f"{where}.{unknown[0]}: unknown field")
        name = item.get("model")
        if not isinstance(name, str) or not name.strip():
            raise SuggestionError(f"{where}.model: required, a model id or {AUTO_MODEL_ID}")
        owner = AUTO_MODEL_ID if is_auto(name) else known.get(name.strip().lower())
        if owner is None:
            raise SuggestionError(f"{where}.model: {name!r} is not a model of this file")
        if owner in seen:
            raise SuggestionError(f"{where}.model: {owner} has a suggestion already")
        seen.add(owner)
        try:
            models = check_chain(
                item.get("models"),
                param=f"{where}.models",
                canonical=lambda n: known.get(n.strip().lower()),
                owner=None if owner == AUTO_MODEL_ID else owner,
            )
        except ChainError as exc:
            raise SuggestionError(exc.message) from None
        if not models:
            raise SuggestionError(f"{where}.models: name at least one model")
        why = item.get("why")
        if not isinstance(why, str) or not why.strip() or len(why) > 1000:
            raise SuggestionError(
                f"{where}.why: required, the reason for this chain (at most 1000 characters)"
            )
        url, checked = source(item.get("source"), f"{where}.source")
        found.append(SuggestedChainEntry(owner, models, why.strip(), url, checked, position))
    return found


def usable(chain: Sequence[str], available: Callable[[str], bool]) -> tuple[str, ...]:
    """The models of `chain` that `available` accepts, in order."""
    return tuple(model_id for model_id in chain if available(model_id))
