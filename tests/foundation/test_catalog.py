"""Catalog: bundled data, alias resolution, /api/models, the hot-path snapshot and its reload."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal

import pytest
from django.test import Client, override_settings

from catalog.models import Deployment, Model, ModelAlias, PriceVersion
from catalog.pricing import Prices, TokenCounts, cost_nano
from catalog.schema import TierFigures
from catalog.services import (
    BUNDLED_CATALOG,
    CatalogDataError,
    create_price_version,
    load_catalog,
    upsert_deployment,
)
from catalog.snapshot import SnapshotHolder, build_snapshot

pytestmark = pytest.mark.django_db


def test_bundled_catalog_has_required_variety() -> None:
    models = json.loads(BUNDLED_CATALOG.read_text())["models"]
    caps = [m["capabilities"] for m in models]
    assert any(c["sampling"] for c in caps) and any(not c["sampling"] for c in caps)
    assert any(not c["promptCaching"] for c in caps)
    assert any(c["reasoningEfforts"] and "xhigh" not in c["reasoningEfforts"] for c in caps)
    for m in models:
        tiers = m.get("pricingTiers") or [m["pricing"]]
        for tier in tiers:
            for kind in ("input", "output", "cacheRead", "cacheWrite5m", "cacheWrite1h"):
                assert isinstance(tier[kind], str)  # exact decimals, never floats


def test_load_catalog_is_idempotent() -> None:
    first = load_catalog()
    count = Model.objects.count()
    versions = PriceVersion.objects.count()
    second = load_catalog()
    assert first.created == count and first.new_price_versions == count
    assert (second.created, second.updated, second.new_price_versions) == (0, 0, 0)
    assert second.changes == []
    assert Model.objects.count() == count and PriceVersion.objects.count() == versions


def test_float_prices_refused(tmp_path) -> None:
    data = json.loads(BUNDLED_CATALOG.read_text())
    data["models"][0]["pricing"]["input"] = 3.0
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(CatalogDataError, match=r"anthropic/claude-opus-5-5.*pricing\.input.*float"):
        load_catalog(path)


@pytest.mark.parametrize(
    "name",
    [
        "anthropic/claude-sonnet-5-5",
        "claude-sonnet-5-5",
        "claude-sonnet-5.5",
        "CLAUDE-SONNET-5.5",
        "  claude-sonnet-5-5  ",
        "Anthropic/Claude-Sonnet-5-5",
    ],
)
def test_alias_resolution(name: str) -> None:
    load_catalog()
    snapshot = build_snapshot()
    model = snapshot.resolve(name)
    assert model is not None and model.id == "anthropic/claude-sonnet-5-5"


def test_unknown_name_resolves_to_none() -> None:
    load_catalog()
    assert build_snapshot().resolve("gpt-9") is None


@pytest.mark.django_db(transaction=True)  # the view reads the catalog from a worker thread
def test_api_models_shape_and_decimal_prices() -> None:
    from catalog.snapshot import holder

    load_catalog()
    # The process-wide snapshot may hold an earlier test's (rolled-back) catalog.
    holder.invalidate()
    response = Client().get("/api/models")
    assert response.status_code == 200
    data = response.json()["data"]
    sonnet = next(m for m in data if m["id"] == "anthropic/claude-sonnet-5-5")
    assert set(sonnet) == {
        "id",
        "name",
        "aliases",
        "capabilities",
        "maxOutputTokens",
        "contextWindow",
        "pricing",
        "media",
        "pricingTiers",
        "priceVersion",
        "source",
    }
    # Worst-case media tokens from the vision and PDF pages of Anthropic's documentation.
    assert sonnet["media"] == {"imageMaxTokens": 4784, "pdfPageMaxTokens": 7784, "pdfMaxPages": 600}
    haiku = next(m for m in data if m["id"] == "anthropic/claude-haiku-4-5")
    assert haiku["media"] == {"imageMaxTokens": 1568, "pdfPageMaxTokens": 4568, "pdfMaxPages": 100}
    sonnet_46 = next(m for m in data if m["id"] == "anthropic/claude-sonnet-4-6")
    # 1M-token context (the provider's page): 600 pages a request, not the 200k models' 100.
    assert sonnet_46["media"] == {
        "imageMaxTokens": 1568,
        "pdfPageMaxTokens": 4568,
        "pdfMaxPages": 600,
    }
    assert set(sonnet["capabilities"]) == {
        "sampling",
        "promptCaching",
        "vision",
        "pdf",
        "tools",
        "structuredOutputs",
        "reasoningEfforts",
        "defaultEffort",
        "thinking",
        "thinkingCanBeDisabled",
        "forcedToolChoice",
    }
    assert sonnet["pricing"] == {
        "input": "2",
        "output": "10",
        "cacheRead": "0.2",
        "cacheWrite5m": "2.5",
        "cacheWrite1h": "4",
    }
    assert sonnet["pricingTiers"] == [{"upToPromptTokens": None, **sonnet["pricing"]}]
    assert "claude-sonnet-5.5" in sonnet["aliases"]


def test_deployment_key_encrypted_at_rest_and_hinted() -> None:
    load_catalog()
    deployment, created = upsert_deployment(
        name="d1", base_url="http://127.0.0.1:1/", api_key="sk-ant-secret-value-1234"
    )
    assert created
    raw = Deployment.objects.values_list("api_key_encrypted", flat=True).get(pk=deployment.pk)
    assert "sk-ant-secret" not in raw
    assert deployment.get_api_key() == "sk-ant-secret-value-1234"
    assert deployment.api_key_hint == "…1234"
    assert "secret" not in repr(build_snapshot().models[0].routes[0].deployment)


def test_deployment_upstream_model_defaults_to_id_without_provider() -> None:
    load_catalog()
    upsert_deployment(
        name="d1",
        base_url="http://127.0.0.1:1",
        api_key="k" * 20,
        model_ids=["anthropic/claude-haiku-4-5"],
    )
    snapshot = build_snapshot()
    haiku = snapshot.resolve("claude-haiku-4-5")
    assert haiku is not None and [r.upstream_model_id for r in haiku.routes] == ["claude-haiku-4-5"]
    sonnet = snapshot.resolve("sonnet")
    assert sonnet is not None and sonnet.routes == ()


@pytest.mark.django_db(transaction=True)
def test_snapshot_reloads_after_an_edit() -> None:
    load_catalog()

    async def scenario() -> tuple[str, str]:
        holder = SnapshotHolder()
        before = (await holder.get()).resolve("sonnet")
        assert before is not None
        from asgiref.sync import sync_to_async

        await sync_to_async(_change_price)()
        for _ in range(50):
            await asyncio.sleep(0.05)
            after = (await holder.get()).resolve("sonnet")
            if after is not None and after.pricing != before.pricing:
                return str(before.pricing.first.input), str(after.pricing.first.input)
        raise AssertionError("snapshot never reloaded")

    with override_settings(EZAT_CATALOG_POLL_INTERVAL=0.05):
        before, after = asyncio.run(scenario())
    assert (before, after) == ("2000000", "4000000")


def _change_price() -> None:
    model = Model.objects.get(id="anthropic/claude-sonnet-5-5")
    prices = dict.fromkeys(("input", "output", "cacheRead", "cacheWrite5m", "cacheWrite1h"), 4)
    create_price_version(model, [TierFigures(None, prices)], source="test")


def test_new_alias_resolves_after_rebuild() -> None:
    load_catalog()
    ModelAlias.objects.create(alias="  My-Sonnet ", model_id="anthropic/claude-sonnet-5-5")
    assert build_snapshot().resolve("my-sonnet") is not None


def test_cost_is_exact_integer_nano_usd() -> None:
    prices = Prices.from_decimals(
        Decimal("3"), Decimal("15"), Decimal("0.3"), Decimal("3.75"), Decimal("6")
    )
    tokens = TokenCounts(
        input=1000, output=500, cache_read=2000, cache_write_5m=100, cache_write_1h=10
    )
    # 1000×3000 + 500×15000 + 2000×300 + 100×3750 + 10×6000 nano
    assert cost_nano(tokens, prices) == 3_000_000 + 7_500_000 + 600_000 + 375_000 + 60_000
