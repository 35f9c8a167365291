"""Model chains, pure: the list rules every chain shares, which models can serve a request, the
catalog file's suggested chains, ezat/auto's shared capabilities and per-model media holds."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.chains import ChainError, check_chain, parse_suggested_chains
from catalog.media import MediaFigures
from catalog.pricing import Prices, PriceSchedule
from catalog.schema import CatalogDataError, parse_catalog_file
from catalog.snapshot import ModelInfo, auto_model
from gateway.protocols.fallbacks import (
    RequestNeeds,
    mapped_effort,
    messages_needs,
    translated_needs,
    unfit,
)
from gateway.protocols.media import MediaTally

NAMES = {"a": "p/a", "p/a": "p/a", "b": "p/b", "p/b": "p/b", "c": "p/c", "d": "p/d", "e": "p/e",
         "f": "p/f", "p/c": "p/c"}  # fmt: skip


def canonical(name: str) -> str | None:
    return NAMES.get(name.strip().lower())


# -- lists -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "ids"),
    [
        ([], ()),
        (["b"], ("p/b",)),
        ([" B ", "p/c"], ("p/b", "p/c")),  # any case, trimmed, aliases → canonical ids
        (("a", "b", "c", "d", "e"), ("p/a", "p/b", "p/c", "p/d", "p/e")),
    ],
)
def test_a_valid_list_gives_canonical_ids(raw: Any, ids: tuple[str, ...]) -> None:
    assert check_chain(raw, param="models", canonical=canonical) == ids


@pytest.mark.parametrize(
    ("raw", "param", "says"),
    [
        ("b", "models", "must be an array"),
        (["b", "nope"], "models[1]", "unknown model 'nope'"),
        (["b", "p/b"], "models[1]", "listed twice (also models[0])"),
        (["b", 4], "models[1]", "must be a model id"),
        (["b", None], "models[1]", "must be a model id"),
        (["b", " "], "models[1]", "must not be empty"),
        (["a", "b", "c", "d", "e", "f"], "models[5]", "at most 5"),
        (["b", "EZAT/auto"], "models[1]", "is a chain itself"),
    ],
)
def test_a_bad_list_names_the_entry(raw: Any, param: str, says: str) -> None:
    with pytest.raises(ChainError) as caught:
        check_chain(raw, param="models", canonical=canonical)
    assert caught.value.param == param
    assert caught.value.message.startswith(f"{param}: ") and says in caught.value.message


def test_a_model_is_not_its_own_fallback() -> None:
    with pytest.raises(ChainError) as caught:
        check_chain(["b", "a"], param="fallbacks", canonical=canonical, owner="p/a")
    assert caught.value.param == "fallbacks[1]"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([*NAMES, "x", 1, None, "", "ezat/auto"]), max_size=8))
def test_a_list_is_either_refused_or_a_short_chain_of_distinct_known_ids(raw: list[Any]) -> None:
    try:
        ids = check_chain(raw, param="models", canonical=canonical)
    except ChainError as exc:
        assert exc.param.startswith("models[")
        return
    assert len(ids) == len(raw) <= 5
    assert len(set(ids)) == len(ids) and all(i in NAMES.values() for i in ids)


# -- which models can serve ---------------------------------------------------------------------


def model(**changes: Any) -> ModelInfo:
    fields: dict[str, Any] = {
        "id": "p/m",
        "name": "M",
        "aliases": (),
        "sampling": True,
        "prompt_caching": True,
        "vision": True,
        "pdf": True,
        "tools": True,
        "structured_outputs": True,
        "reasoning_efforts": ("low", "medium", "high"),
        "max_output_tokens": 16_000,
        "context_window": 200_000,
        "pricing": PriceSchedule.flat(Prices(1, 1, 1, 1, 1)),
        "routes": (),
        "created_at": "",
        "thinking": "adaptive",
    }
    fields.update(changes)
    return ModelInfo(**fields)


@pytest.mark.parametrize(
    ("needs", "changes", "reason"),
    [
        (RequestNeeds(vision=True), {"vision": False}, "does not take images"),
        (RequestNeeds(pdf=True), {"pdf": False}, "does not take PDFs"),
        (RequestNeeds(tools=True), {"tools": False}, "does not support tools"),
        (RequestNeeds(structured_output=True), {"structured_outputs": False}, "structured"),
        (RequestNeeds(sampling=True), {"sampling": False}, "sampling"),
        (RequestNeeds(forced_tool=True), {"forced_tool_choice": False}, "forced tool"),
        (RequestNeeds(thinking_off=True), {"thinking_can_be_disabled": False}, "thinking off"),
        (RequestNeeds(adaptive_thinking=True), {"thinking": "extended"}, "adaptively"),
        (RequestNeeds(effort="high"), {"reasoning_efforts": ()}, "no reasoning effort"),
        (
            RequestNeeds(max_tokens=9000),
            {"max_output_tokens": 8000},
            "output limit (8,000 tokens) is below max_tokens",
        ),
        (RequestNeeds(), {"context_window": 1000}, "context window (1,000 tokens)"),
    ],
)
def test_a_model_lacking_what_the_request_uses_is_unfit(
    needs: RequestNeeds, changes: dict[str, Any], reason: str
) -> None:
    assert unfit(model(), needs, 5000) is None
    found = unfit(model(**changes), needs, 5000)
    assert found is not None and reason in found


def test_a_defaulted_max_tokens_fits_any_output_limit() -> None:
    assert unfit(model(max_output_tokens=100), RequestNeeds(max_tokens=None), 10) is None


@settings(max_examples=200, deadline=None)
@given(
    st.builds(
        RequestNeeds,
        vision=st.booleans(),
        pdf=st.booleans(),
        tools=st.booleans(),
        structured_output=st.booleans(),
        sampling=st.booleans(),
        max_tokens=st.none() | st.integers(1, 20_000),
    ),
    st.booleans(),
    st.booleans(),
    st.integers(1, 20_000),
    st.integers(1, 400_000),
)
def test_fit_means_every_need_is_met(
    needs: RequestNeeds, vision: bool, tools: bool, output: int, estimate: int
) -> None:
    candidate = model(vision=vision, tools=tools, max_output_tokens=output)
    if unfit(candidate, needs, estimate) is None:
        assert candidate.vision or not needs.vision
        assert candidate.tools or not needs.tools
        assert needs.max_tokens is None or needs.max_tokens <= output
        assert estimate <= candidate.context_window


def test_needs_are_read_from_the_messages_body() -> None:
    tally = MediaTally()
    tally.add_image(MediaFigures(1568, 4568, 100), (100, 100))
    tally.unsized_documents = 1
    body = {
        "tools": [{"name": "t"}],
        "tool_choice": {"type": "any"},
        "output_config": {"format": {"type": "json_schema"}, "effort": "xhigh"},
        "temperature": 0.2,
        "thinking": {"type": "adaptive"},
    }
    needs = messages_needs(body, tally, max_tokens=100, honours_sampling=True)
    assert needs == RequestNeeds(
        vision=True,
        pdf=True,
        tools=True,
        structured_output=True,
        sampling=True,
        forced_tool=True,
        adaptive_thinking=True,
        effort="xhigh",
        max_tokens=100,
    )
    # Sampling the requested model ignores is not a need; on the OpenAI APIs neither are effort
    # and thinking (each model's own translation maps them).
    assert not messages_needs(body, tally, max_tokens=1, honours_sampling=False).sampling
    translated = translated_needs(
        body, MediaTally(), pending_images=2, max_tokens=None, honours_sampling=True
    )
    assert translated.vision and translated.effort is None and not translated.adaptive_thinking


@pytest.mark.parametrize(
    ("effort", "levels", "expected"),
    [
        ("xhigh", ("low", "medium", "high", "max"), "high"),  # a tie: the lower level
        ("max", ("low", "medium", "high", "max"), "max"),
        ("low", ("medium", "high"), "medium"),
        ("whatever", ("low",), "whatever"),  # off the scale: the provider decides
    ],
)
def test_a_messages_effort_maps_to_the_fallbacks_nearest_level(
    effort: str, levels: tuple[str, ...], expected: str
) -> None:
    assert mapped_effort(model(reasoning_efforts=levels), effort) == expected


def test_a_fallbacks_media_hold_uses_its_own_image_cap() -> None:
    tally = MediaTally()
    small, big = MediaFigures(1568, 4568, 100), MediaFigures(4784, 7784, 600)
    tally.add_image(small, (4000, 3000))  # resized by the provider: the cap
    tally.add_image(small, None)  # unknown size: the cap
    tally.add_image(small, (100, 100))
    assert tally.tokens(small) == 1568 + 1568 + 16  # ⌈100/28⌉² patches
    assert tally.tokens(big) == 4784 + 4784 + 16


# -- ezat/auto ---------------------------------------------------------------------------------


def test_ezat_auto_offers_what_every_model_of_its_chain_shares() -> None:
    a = model(id="p/a", sampling=False, reasoning_efforts=("low", "high", "max"))
    b = model(id="p/b", vision=False, max_output_tokens=2000, context_window=100_000)
    auto = auto_model([a, b], None)
    assert auto.id == "ezat/auto" and auto.chain == ("p/a", "p/b") and auto.routes == ()
    assert (auto.sampling, auto.vision, auto.tools) == (False, False, True)
    assert auto.reasoning_efforts == ("low", "high")
    assert (auto.max_output_tokens, auto.context_window) == (2000, 100_000)


# -- the catalog file's suggested chains ---------------------------------------------------------


def source(raw: Any, where: str) -> tuple[str, date]:
    if not isinstance(raw, dict) or "url" not in raw:
        raise CatalogDataError(f"{where}: required")
    return raw["url"], date(2026, 12, 1)


GOOD = {"model": "a", "models": ["b", "c"], "why": "same tier", "source": {"url": "https://x"}}


def test_suggested_chains_are_parsed_to_canonical_ids() -> None:
    [entry] = parse_suggested_chains([GOOD], NAMES, source)
    assert (entry.model, entry.models, entry.why) == ("p/a", ("p/b", "p/c"), "same tier")
    [auto] = parse_suggested_chains([{**GOOD, "model": "ezat/auto"}], NAMES, source)
    assert auto.model == "ezat/auto"


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({**GOOD, "model": "zzz"}, "suggestedChains[0].model: 'zzz' is not a model"),
        ({**GOOD, "models": ["b", "b"]}, "suggestedChains[0].models[1]: p/b is listed twice"),
        ({**GOOD, "models": ["a"]}, "cannot be its own fallback"),
        ({**GOOD, "models": []}, "name at least one model"),
        ({**GOOD, "why": ""}, "suggestedChains[0].why: required"),
        ({**GOOD, "typo": 1}, "suggestedChains[0].typo: unknown field"),
        ({k: v for k, v in GOOD.items() if k != "source"}, "suggestedChains[0].source"),
    ],
)
def test_a_bad_suggestion_refuses_the_file_naming_it(entry: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError) as caught:  # SuggestionError, or the source's own error
        parse_suggested_chains([entry], NAMES, source)
    assert says in str(caught.value)


def test_the_file_refuses_an_unknown_top_level_field() -> None:
    with pytest.raises(CatalogDataError, match="suggestedChain: unknown top-level field"):
        parse_catalog_file({"models": [], "suggestedChain": []})
