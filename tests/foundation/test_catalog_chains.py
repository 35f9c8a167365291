"""The catalog's suggested chains and ezat/auto: loaded from the bundled file, true to what their
reasons say, in the snapshot and on /api/models; disabled models are known but not served."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.test import Client

from catalog.models import Model, SuggestedChain
from catalog.services import BUNDLED_CATALOG, load_catalog
from catalog.snapshot import build_snapshot

BUNDLED = json.loads(BUNDLED_CATALOG.read_text())
ENTRIES = {m["id"]: m for m in BUNDLED["models"]}


def output_price(model_id: str) -> Decimal:
    entry = ENTRIES[model_id]
    tiers = entry.get("pricingTiers") or [entry["pricing"]]
    return max(Decimal(t["output"]) for t in tiers)


def test_every_suggestion_keeps_the_capabilities_of_the_model_it_backs_up() -> None:
    for suggestion in BUNDLED["suggestedChains"]:
        caps = ("vision", "pdf", "tools", "structuredOutputs")
        owner = suggestion["model"]
        needed = (
            {c for c in caps if ENTRIES[owner]["capabilities"][c]}
            if owner in ENTRIES
            else set(caps)
        )
        for model_id in suggestion["models"]:
            got = ENTRIES[model_id]["capabilities"]
            assert all(got[c] for c in needed), (owner, model_id)
            assert got["thinking"] == "adaptive", (owner, model_id)
        assert suggestion["why"] and suggestion["source"]["url"].startswith("https://")


def test_ezat_auto_never_falls_back_to_a_dearer_model() -> None:
    [auto] = [s for s in BUNDLED["suggestedChains"] if s["model"] == "ezat/auto"]
    prices = [output_price(m) for m in auto["models"]]
    assert prices == sorted(prices, reverse=True)


@pytest.mark.django_db
def test_suggestions_load_idempotently_and_check_reports_changes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    load_catalog()
    assert SuggestedChain.objects.get(model="ezat/auto").model_ids[0] == (
        "anthropic/claude-sonnet-5-5"
    )
    count = SuggestedChain.objects.count()
    again = load_catalog(check=True)
    assert not [c for c in again.changes if "suggested chain" in c]
    changed = dict(BUNDLED)
    changed["suggestedChains"] = [
        {**s, "models": list(reversed(s["models"]))} if s["model"] == "ezat/auto" else s
        for s in BUNDLED["suggestedChains"]
    ]
    path = tmp_path / "models.json"
    path.write_text(json.dumps(changed))
    report = load_catalog(path, check=True)
    assert any(c.startswith("~ ezat/auto: suggested chain") for c in report.changes)
    load_catalog(path)
    assert SuggestedChain.objects.count() == count
    assert SuggestedChain.objects.get(model="ezat/auto").model_ids[-1] == (
        "anthropic/claude-sonnet-5-5"
    )


@pytest.mark.django_db
def test_the_snapshot_knows_auto_and_disabled_models() -> None:
    load_catalog()
    Model.objects.filter(id="anthropic/claude-opus-5").update(enabled=False)
    snap = build_snapshot()
    assert snap.resolve("claude-opus-5") is None  # not served...
    assert snap.canonical("CLAUDE-OPUS-5") == "anthropic/claude-opus-5"  # ...but known
    assert snap.canonical("no/such-model") is None
    auto = snap.auto()
    assert auto is not None and auto.chain == snap.auto_chain
    assert snap.lookup("EZAT/Auto") is auto and snap.listed()[-1] is auto
    assert snap.auto(("anthropic/claude-opus-5",)) is None  # nothing of it can serve


@pytest.mark.django_db(transaction=True)  # the view reads the catalog from a worker thread
def test_api_models_lists_ezat_auto_with_its_chain() -> None:
    from catalog.snapshot import holder

    load_catalog()
    holder.invalidate()
    data = {m["id"]: m for m in Client().get("/api/models").json()["data"]}
    auto = data["ezat/auto"]
    assert auto["chain"] == [
        "anthropic/claude-sonnet-5-5",
        "anthropic/claude-sonnet-5",
        "anthropic/claude-haiku-5-5",
    ]
    assert auto["pricing"] is None and auto["pricedAs"] == "the model that answers"
    caps = auto["capabilities"]
    assert caps["vision"] and caps["tools"] and caps["forcedToolChoice"] is False  # Sonnet 5.5
    assert caps["reasoningEfforts"] == ["low", "medium", "high", "xhigh", "max"]
    assert auto["contextWindow"] == 1_000_000 and auto["maxOutputTokens"] == 128_000
