"""The catalog file format (catalog/data/models.json, or an operator's own `--file`), validated.

Pure: no Django, no I/O. `parse_catalog` checks the whole file before anything is written and
refuses it whole, with a message naming the entry and the field, on the first bad value.

Every capability the file may state is declared once, in CAPABILITIES (key, database field,
validator, default): adding a capability is one line there plus the field it maps to; an
undeclared key is refused, so a typo never becomes a silently ignored setting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any

from catalog.chains import SuggestedChainEntry, SuggestionError, parse_suggested_chains
from catalog.pricing import PRICE_KINDS, TierError, check_tier_bounds

# Effort levels, lowest first: Anthropic's `output_config.effort` levels
# (https://platform.claude.com/docs/en/build-with-claude/effort) below OpenAI's `none` and
# `minimal` reasoning efforts (https://platform.openai.com/docs/api-reference/chat/create).
EFFORT_LEVELS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
# adaptive / extended: Claude's thinking (effort, budget_tokens); effort: a provider that takes a
# reasoning effort natively (OpenAI's `reasoning_effort`); none: no thinking or not stated.
THINKING_MODES = ("adaptive", "extended", "effort", "none")
# A price has at most 6 decimals (an integer of micro-USD per million tokens) and fits the
# database column (14 digits): at most 99,999,999.999999 USD per million tokens.
MAX_PRICE = Decimal("99999999.999999")
MAX_TOKENS_FIGURE = 100_000_000


class CatalogDataError(ValueError):
    """The catalog file is malformed; the message names the entry and field."""


Validator = Callable[[Any, str], Any]


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise CatalogDataError(f"{where}: must be true or false")
    return value


def _efforts(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CatalogDataError(f"{where}: must be a list of effort levels")
    unknown = [v for v in value if v not in EFFORT_LEVELS]
    if unknown:
        raise CatalogDataError(
            f"{where}: unknown level {unknown[0]!r} (known: {', '.join(EFFORT_LEVELS)})"
        )
    if value != sorted(set(value), key=EFFORT_LEVELS.index):
        raise CatalogDataError(f"{where}: list each level once, lowest first")
    return list(value)


def _effort_or_none(value: Any, where: str) -> str | None:
    if value is not None and value not in EFFORT_LEVELS:
        raise CatalogDataError(f"{where}: must be one of {', '.join(EFFORT_LEVELS)} or null")
    return value


def _thinking(value: Any, where: str) -> str:
    if value not in THINKING_MODES:
        raise CatalogDataError(f"{where}: must be one of {', '.join(THINKING_MODES)}")
    return str(value)


@dataclass(frozen=True, slots=True)
class Capability:
    field: str  # the catalog.Model field it is stored in
    validate: Validator
    default: Any = None
    required: bool = False


_REQUIRED = {"required": True}

# Key in the file → how it is stored and checked. The one list of known capabilities.
CAPABILITIES: dict[str, Capability] = {
    "sampling": Capability("sampling", _bool, **_REQUIRED),
    "promptCaching": Capability("prompt_caching", _bool, **_REQUIRED),
    "vision": Capability("vision", _bool, **_REQUIRED),
    "pdf": Capability("pdf", _bool, **_REQUIRED),
    "tools": Capability("tools", _bool, **_REQUIRED),
    "structuredOutputs": Capability("structured_outputs", _bool, **_REQUIRED),
    "reasoningEfforts": Capability("reasoning_efforts", _efforts, default=[]),
    "defaultEffort": Capability("default_effort", _effort_or_none),
    "thinking": Capability("thinking", _thinking, default="none"),
    # False where the model's page says `thinking: {"type": "disabled"}` is refused.
    "thinkingCanBeDisabled": Capability("thinking_can_be_disabled", _bool, default=True),
    # False where the model's page says forced tool use (tool_choice any/tool) returns an error.
    "forcedToolChoice": Capability("forced_tool_choice", _bool, default=True),
}

# Worst-case media figures (catalog/media.py cites the pages): key in the file's `media` object →
# catalog.Model field. Optional: a model without them is held at the largest documented ones.
MEDIA_FIELDS = {
    "imageMaxTokens": "image_max_tokens",
    "pdfPageMaxTokens": "pdf_page_max_tokens",
    "pdfMaxPages": "pdf_max_pages",
}

_ENTRY_KEYS = frozenset(
    {
        "id",
        "media",
        "name",
        "aliases",
        "capabilities",
        "maxOutputTokens",
        "contextWindow",
        "pricing",
        "pricingTiers",
        "source",
    }
)


@dataclass(frozen=True, slots=True)
class TierFigures:
    up_to_prompt_tokens: int | None
    prices: dict[str, Decimal]  # keyed by PRICE_KINDS, USD per million tokens


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    id: str
    name: str
    aliases: tuple[str, ...]
    context_window: int
    max_output_tokens: int
    capabilities: dict[str, Any]  # catalog.Model field → value
    tiers: tuple[TierFigures, ...]
    source_url: str
    checked_on: date
    position: int = field(default=0)
    media: dict[str, int] = field(default_factory=dict)  # catalog.Model field → value


def parse_price(value: Any, where: str) -> Decimal:
    """A price in USD per million tokens: a decimal string (or integer), ≥ 0, ≤ 6 decimals."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        kind = "a float" if isinstance(value, float) else type(value).__name__
        raise CatalogDataError(f'{where}: must be a decimal string like "0.125", not {kind}')
    try:
        price = Decimal(str(value).strip())
    except InvalidOperation:
        raise CatalogDataError(f"{where}: {value!r} is not a number") from None
    if not price.is_finite():
        raise CatalogDataError(f"{where}: {value!r} is not a number")
    if price < 0:
        raise CatalogDataError(f"{where}: must not be negative (got {value})")
    if price > MAX_PRICE:
        raise CatalogDataError(f"{where}: must be at most {MAX_PRICE} (got {value})")
    if price != price.quantize(Decimal("0.000001")):
        raise CatalogDataError(f"{where}: at most 6 decimals (got {value})")
    return price


def _positive_int(value: Any, where: str, high: int = MAX_TOKENS_FIGURE) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise CatalogDataError(f"{where}: must be an integer between 1 and {high}")
    return value


def _text(value: Any, where: str, max_length: int) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > max_length:
        raise CatalogDataError(f"{where}: must be a non-empty string of at most {max_length}")
    return value.strip()


def _prices(raw: Any, where: str) -> dict[str, Decimal]:
    if not isinstance(raw, Mapping):
        raise CatalogDataError(f"{where}: must be an object with {', '.join(PRICE_KINDS)}")
    unknown = sorted(set(raw) - set(PRICE_KINDS) - {"upToPromptTokens"})
    if unknown:
        raise CatalogDataError(f"{where}.{unknown[0]}: unknown price")
    prices = {}
    for kind in PRICE_KINDS:
        if kind not in raw:
            raise CatalogDataError(f"{where}.{kind}: required")
        prices[kind] = parse_price(raw[kind], f"{where}.{kind}")
    return prices


def parse_tiers(entry: Mapping[str, Any], where: str) -> tuple[TierFigures, ...]:
    """`pricing` (one flat tier) or `pricingTiers` (a list, lowest bound first)."""
    if ("pricing" in entry) == ("pricingTiers" in entry):
        raise CatalogDataError(f"{where}: give exactly one of pricing or pricingTiers")
    if "pricing" in entry:
        return (TierFigures(None, _prices(entry["pricing"], f"{where}.pricing")),)
    raw = entry["pricingTiers"]
    if not isinstance(raw, list) or not raw:
        raise CatalogDataError(f"{where}.pricingTiers: must be a non-empty list")
    tiers = []
    for n, tier in enumerate(raw):
        here = f"{where}.pricingTiers[{n}]"
        if not isinstance(tier, Mapping) or "upToPromptTokens" not in tier:
            raise CatalogDataError(f"{here}.upToPromptTokens: required (null for the last tier)")
        bound = tier["upToPromptTokens"]
        if bound is not None:
            bound = _positive_int(bound, f"{here}.upToPromptTokens")
        tiers.append(TierFigures(bound, _prices(tier, here)))
    try:
        check_tier_bounds([t.up_to_prompt_tokens for t in tiers])
    except TierError as exc:
        raise CatalogDataError(f"{where}.pricingTiers: {exc}") from None
    return tuple(tiers)


def parse_capabilities(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise CatalogDataError(f"{where}: must be an object")
    unknown = sorted(set(raw) - set(CAPABILITIES))
    if unknown:
        raise CatalogDataError(
            f"{where}.{unknown[0]}: unknown capability (known: {', '.join(CAPABILITIES)})"
        )
    values: dict[str, Any] = {}
    for key, cap in CAPABILITIES.items():
        if key in raw:
            values[cap.field] = cap.validate(raw[key], f"{where}.{key}")
        elif cap.required:
            raise CatalogDataError(f"{where}.{key}: required")
        else:
            values[cap.field] = list(cap.default) if isinstance(cap.default, list) else cap.default
    default_effort = values.get("default_effort")
    if default_effort is not None and default_effort not in values["reasoning_efforts"]:
        raise CatalogDataError(
            f"{where}.defaultEffort: {default_effort!r} is not in reasoningEfforts"
        )
    return values


def parse_media(raw: Any, where: str) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise CatalogDataError(f"{where}: must be an object with {', '.join(MEDIA_FIELDS)}")
    unknown = sorted(set(raw) - set(MEDIA_FIELDS))
    if unknown:
        raise CatalogDataError(f"{where}.{unknown[0]}: unknown media figure")
    values = {}
    for key, model_field in MEDIA_FIELDS.items():
        if key not in raw:
            raise CatalogDataError(f"{where}.{key}: required")
        values[model_field] = _positive_int(raw[key], f"{where}.{key}")
    return values


def _source(raw: Any, where: str) -> tuple[str, date]:
    if not isinstance(raw, Mapping):
        raise CatalogDataError(f'{where}: required, {{"url": …, "checked": "YYYY-MM-DD"}}')
    url = _text(raw.get("url"), f"{where}.url", 500)
    if not url.startswith("https://"):
        raise CatalogDataError(f"{where}.url: must be an https:// address")
    try:
        checked = date.fromisoformat(str(raw.get("checked")))
    except ValueError:
        raise CatalogDataError(f"{where}.checked: must be a date, YYYY-MM-DD") from None
    more = raw.get("more", [])  # further pages a figure or capability was taken from
    if not isinstance(more, list) or not all(
        isinstance(u, str) and u.startswith("https://") for u in more
    ):
        raise CatalogDataError(f"{where}.more: must be a list of https:// addresses")
    unknown = sorted(set(raw) - {"url", "checked", "more"})
    if unknown:
        raise CatalogDataError(f"{where}.{unknown[0]}: unknown field")
    return url, checked


def parse_entry(raw: Any, position: int) -> CatalogEntry:
    if not isinstance(raw, Mapping):
        raise CatalogDataError(f"entry {position}: must be an object")
    model_id = raw.get("id")
    where = f"entry {position} ({model_id})" if isinstance(model_id, str) else f"entry {position}"
    model_id = _text(model_id, f"{where}.id", 128)
    unknown = sorted(k for k in raw if k not in _ENTRY_KEYS and not k.startswith("_"))
    if unknown:
        raise CatalogDataError(f"{where}.{unknown[0]}: unknown field")
    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list):
        raise CatalogDataError(f"{where}.aliases: must be a list of names")
    url, checked = _source(raw.get("source"), f"{where}.source")
    return CatalogEntry(
        id=model_id,
        name=_text(raw.get("name"), f"{where}.name", 200),
        aliases=tuple(
            _text(a, f"{where}.aliases[{n}]", 128).lower() for n, a in enumerate(aliases)
        ),
        context_window=_positive_int(raw.get("contextWindow"), f"{where}.contextWindow"),
        max_output_tokens=_positive_int(raw.get("maxOutputTokens"), f"{where}.maxOutputTokens"),
        capabilities=parse_capabilities(raw.get("capabilities"), f"{where}.capabilities"),
        tiers=parse_tiers(raw, where),
        source_url=url,
        checked_on=checked,
        position=position,
        media=parse_media(raw.get("media"), f"{where}.media"),
    )


def parse_catalog(data: Any) -> list[CatalogEntry]:
    """Every entry of a catalog file, or CatalogDataError for the first problem found."""
    return parse_catalog_file(data).entries


@dataclass(frozen=True, slots=True)
class CatalogFile:
    entries: list[CatalogEntry]
    # `suggestedChains`: alternatives the dashboard offers per model (never applied unless an
    # org turns them on) and the default chain of ezat/auto (catalog/chains.py).
    suggestions: list[SuggestedChainEntry]


def parse_catalog_file(data: Any) -> CatalogFile:
    """The whole file: every entry and suggested chain, or CatalogDataError for the first
    problem found."""
    if not isinstance(data, Mapping) or not isinstance(data.get("models"), list):
        raise CatalogDataError('the file must be a JSON object with a "models" list')
    unknown = sorted(k for k in data if k not in _FILE_KEYS and not k.startswith("_"))
    if unknown:
        raise CatalogDataError(f"{unknown[0]}: unknown top-level field")
    entries = [parse_entry(raw, n) for n, raw in enumerate(data["models"])]
    seen: dict[str, str] = {}
    for entry in entries:
        for name in (entry.id.lower(), *entry.aliases):
            if name in seen and seen[name] != entry.id:
                raise CatalogDataError(
                    f"entry {entry.position} ({entry.id}): name {name!r} is also used by "
                    f"{seen[name]}"
                )
            seen[name] = entry.id
    try:
        suggestions = parse_suggested_chains(data.get("suggestedChains"), seen, _source)
    except SuggestionError as exc:
        raise CatalogDataError(str(exc)) from None
    return CatalogFile(entries, suggestions)


_FILE_KEYS = frozenset({"models", "suggestedChains"})
