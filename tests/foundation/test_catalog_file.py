"""The bundled catalog against the provider's published table, and `load_catalog` as operators
use it: price versions, --check, and whole-file refusal of bad figures."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from catalog.models import CatalogVersion, Model, ModelAlias, PriceTier, PriceVersion
from catalog.services import BUNDLED_CATALOG, load_catalog
from catalog.snapshot import build_snapshot

ROOT = Path(__file__).resolve().parents[2]
K, M = 1_000, 1_000_000
FLAT = ("input", "output", "cacheWrite5m", "cacheWrite1h", "cacheRead")

# The table (the provider's model pages, checked late 2026): provider id → context,
# max output, (input, output, 5m, 1h, read) or None for tiered, thinking, efforts, default.
ALL = ["low", "medium", "high", "xhigh", "max"]
TABLE: dict[str, tuple[Any, ...]] = {
    "claude-opus-5-5": (M, 128 * K, ("4", "20", "5", "8", "0.2"), "adaptive", ALL, "medium"),
    "claude-sonnet-5-5": (M, 128 * K, ("2", "10", "2.5", "4", "0.2"), "adaptive", ALL, "high"),
    "claude-haiku-5-5": (M, 128 * K, None, "adaptive", ALL, "medium"),
    "claude-opus-5": (M, 128 * K, ("5", "25", "6.25", "10", "0.5"), "adaptive", ALL, "high"),
    "claude-sonnet-5": (M, 128 * K, ("2", "10", "2.5", "4", "0.2"), "adaptive", ALL, "high"),
    "claude-opus-4-6": (M, 128 * K, ("5", "25", "6.25", "10", "0.5"), "adaptive", None, None),
    "claude-sonnet-4-6": (M, 128 * K, ("3", "15", "3.75", "6", "0.3"), "adaptive", None, None),
    "claude-haiku-4-5": (200 * K, 64 * K, ("1", "5", "1.25", "2", "0.1"), "extended", [], None),
}
HAIKU_TIERS = [
    {
        "upToPromptTokens": 100000,
        "input": "0.1",
        "output": "0.5",
        "cacheWrite5m": "0.125",
        "cacheWrite1h": "0.2",
        "cacheRead": "0.01",
    },
    {
        "upToPromptTokens": None,
        "input": "0.5",
        "output": "2.5",
        "cacheWrite5m": "0.625",
        "cacheWrite1h": "1",
        "cacheRead": "0.05",
    },
]


@pytest.mark.django_db(transaction=True)  # the view reads the catalog from a worker thread
def test_api_models_shows_the_published_table_exactly() -> None:
    from catalog.snapshot import holder

    load_catalog()
    holder.invalidate()
    data = {m["id"]: m for m in Client().get("/api/models").json()["data"]}
    data.pop("ezat/auto")  # a chain, not a model of the table (tests/catalog/test_model_chains.py)
    assert set(data) == {f"anthropic/{provider_id}" for provider_id in TABLE}
    for provider_id, (context, output, prices, thinking, efforts, default) in TABLE.items():
        model = data[f"anthropic/{provider_id}"]
        caps = model["capabilities"]
        assert (model["contextWindow"], model["maxOutputTokens"]) == (context, output)
        tiers = (
            HAIKU_TIERS
            if prices is None
            else [{"upToPromptTokens": None, **dict(zip(FLAT, prices, strict=True))}]
        )
        assert model["pricingTiers"] == tiers, provider_id
        assert model["pricing"] == {k: v for k, v in tiers[0].items() if k != "upToPromptTokens"}
        assert caps["thinking"] == thinking
        if efforts is not None:  # the table leaves the 4.6 levels open (see below)
            assert (caps["reasoningEfforts"], caps["defaultEffort"]) == (efforts, default)
        assert model["source"]["url"].startswith("https://platform.claude.com/docs/")
        assert model["source"]["checked"] == "2026-12-01"
        assert "E" not in json.dumps(model["pricingTiers"])  # no exponent notation, ever
    # Left open by the table, from the effort page: 4.6 models have no xhigh.
    for four_six in ("anthropic/claude-opus-4-6", "anthropic/claude-sonnet-4-6"):
        assert data[four_six]["capabilities"]["reasoningEfforts"] == [
            "low",
            "medium",
            "high",
            "max",
        ]
    opus, sonnet = data["anthropic/claude-opus-5-5"], data["anthropic/claude-sonnet-5-5"]
    assert opus["capabilities"]["thinkingCanBeDisabled"] is False  # "cannot be turned off"
    assert sonnet["capabilities"]["thinkingCanBeDisabled"] is True
    assert (
        opus["capabilities"]["forcedToolChoice"]
        is sonnet["capabilities"]["forcedToolChoice"]
        is False
    )
    others = [m for i, m in data.items() if i not in (opus["id"], sonnet["id"])]
    assert all(m["capabilities"]["forcedToolChoice"] for m in others)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "model_id"),
    [
        ("haiku", "anthropic/claude-haiku-5-5"),  # what Claude Code's --model haiku resolves to
        ("sonnet", "anthropic/claude-sonnet-5-5"),
        ("opus", "anthropic/claude-opus-5-5"),
        ("claude-haiku-5-5", "anthropic/claude-haiku-5-5"),
        ("claude-opus-5", "anthropic/claude-opus-5"),
        ("claude-sonnet-5", "anthropic/claude-sonnet-5"),
        ("claude-haiku-4-5-20251001", "anthropic/claude-haiku-4-5"),
    ],
)
def test_short_aliases_point_at_the_newest_of_each_family(name: str, model_id: str) -> None:
    load_catalog()
    model = build_snapshot().resolve(name)
    assert model is not None and model.id == model_id


def _bundled() -> dict[str, Any]:
    return json.loads(BUNDLED_CATALOG.read_text())


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(data))
    return path


def _counts() -> tuple[int, ...]:
    return (
        Model.objects.count(),
        ModelAlias.objects.count(),
        PriceVersion.objects.count(),
        PriceTier.objects.count(),
        CatalogVersion.objects.values_list("version", flat=True).first() or 0,
    )


def _breakers() -> list[tuple[str, Any, str]]:
    def price(value: Any) -> Any:
        return lambda m: m["pricing"].__setitem__("cacheRead", value)

    def tiers(bounds: list[Any]) -> Any:
        def apply(m: dict[str, Any]) -> None:
            tier = {k: "1" for k in FLAT}
            m.pop("pricing")
            m["pricingTiers"] = [{"upToPromptTokens": b, **tier} for b in bounds]

        return apply

    return [
        ("negative", price("-0.5"), r"entry 7 \(anthropic/claude-haiku-4-5\)\.pricing\.cacheRead: must not be negative"),
        ("non-numeric", price("ten"), r"entry 7 \(anthropic/claude-haiku-4-5\)\.pricing\.cacheRead: 'ten' is not a number"),
        ("float", price(0.1), r"pricing\.cacheRead: must be a decimal string"),
        ("overlapping", tiers([100000, 50000, None]), r"entry 7 \(anthropic/claude-haiku-4-5\)\.pricingTiers: tier 1: upToPromptTokens 50000 overlaps"),
        ("two unbounded", tiers([None, None]), r"pricingTiers: tier 0: only the last tier may be unbounded"),
        ("unknown capability", lambda m: m["capabilities"].__setitem__("telepathy", True), r"entry 7 \(anthropic/claude-haiku-4-5\)\.capabilities\.telepathy: unknown capability"),
        ("unknown effort", lambda m: m["capabilities"].__setitem__("reasoningEfforts", ["ultra"]), r"capabilities\.reasoningEfforts: unknown level 'ultra'"),
        ("no source", lambda m: m.pop("source"), r"entry 7 \(anthropic/claude-haiku-4-5\)\.source: required"),
    ]  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("case", "breaker", "message"), _breakers(), ids=[c for c, _, _ in _breakers()]
)
def test_a_bad_file_is_refused_whole(tmp_path: Path, case: str, breaker: Any, message: str) -> None:
    load_catalog()
    data = _bundled()
    # Good changes before the bad entry must not be written either.
    data["models"][0]["pricing"]["input"] = "99"
    data["models"][0]["aliases"].append("brand-new-alias")
    breaker(data["models"][7])
    before = _counts()
    with pytest.raises(CommandError, match=message) as refused:
        call_command("load_catalog", "--file", str(_write(tmp_path, data)))
    assert "nothing was written" in str(refused.value)
    assert _counts() == before
    assert not ModelAlias.objects.filter(alias="brand-new-alias").exists()


def test_the_cli_exits_non_zero_on_a_bad_file(tmp_path: Path) -> None:
    data = _bundled()
    data["models"][2]["pricingTiers"][0]["input"] = "-1"
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "load_catalog",
            "--check",
            "--file",
            str(_write(tmp_path, data)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "anthropic/claude-haiku-5-5" in done.stderr and "pricingTiers[0].input" in done.stderr


@pytest.mark.django_db
def test_check_prints_what_would_change_and_writes_nothing(tmp_path: Path) -> None:
    load_catalog()
    data = _bundled()
    sonnet = data["models"][1]
    sonnet["pricing"]["input"] = "2.5"
    sonnet["maxOutputTokens"] = 64000
    data["models"][0]["aliases"].append("big-brain")
    before = _counts()
    out = StringIO()
    call_command("load_catalog", "--check", "--file", str(_write(tmp_path, data)), stdout=out)
    text = out.getvalue()
    assert "~ anthropic/claude-sonnet-5-5: maxOutputTokens 128000 → 64000" in text
    assert "~ anthropic/claude-sonnet-5-5: prices were input 2, output 10, cacheRead 0.2" in text
    assert "new price version, effective when loaded: input 2.5, output 10" in text
    assert "+ anthropic/claude-opus-5-5: alias 'big-brain'" in text
    assert text.strip().endswith(
        "0 created, 1 updated, 1 new price version(s); nothing written (--check)"
    )
    assert _counts() == before
    unchanged = StringIO()
    call_command("load_catalog", "--check", stdout=unchanged)
    assert unchanged.getvalue().strip().endswith("no changes")


@pytest.mark.django_db
def test_new_figures_make_a_new_version_and_keep_the_old(tmp_path: Path) -> None:
    load_catalog()
    sonnet = Model.objects.get(id="anthropic/claude-sonnet-5-5")
    first = PriceVersion.objects.get(model=sonnet)
    data = _bundled()
    data["models"][1]["pricing"]["output"] = "12"
    out = StringIO()
    call_command("load_catalog", "--file", str(_write(tmp_path, data)), stdout=out)
    assert "catalog loaded: 0 created, 0 updated, 1 new price version(s)" in out.getvalue()
    versions = list(PriceVersion.objects.filter(model=sonnet).order_by("effective_from", "id"))
    assert versions[0].pk == first.pk and len(versions) == 2
    assert versions[0].tiers.get().price_output == 10  # history untouched
    assert versions[1].tiers.get().price_output == 12
    assert versions[1].effective_from >= versions[0].effective_from
    assert build_snapshot().resolve("sonnet").pricing.version == versions[1].pk  # type: ignore[union-attr]
    # Loading the same figures again changes nothing.
    again = load_catalog(_write(tmp_path, data))
    assert (again.new_price_versions, again.changes) == (0, [])


@pytest.mark.django_db
def test_an_operator_file_leaves_other_models_alone(tmp_path: Path) -> None:
    load_catalog()
    data = _bundled()
    mine = copy.deepcopy(data["models"][1])
    mine.update(id="acme/sonnet-tuned", name="Sonnet, tuned", aliases=["tuned"])
    report = load_catalog(_write(tmp_path, {"models": [mine]}))
    assert (report.created, report.new_price_versions) == (1, 1)
    assert Model.objects.count() == len(data["models"]) + 1
    assert build_snapshot().resolve("tuned").id == "acme/sonnet-tuned"  # type: ignore[union-attr]
