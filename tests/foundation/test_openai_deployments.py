"""OpenAI-kind deployments and catalog entries (issue 30, contract items 1 and 2): the issue's
catalog entry loads as it stands, `--model` is required, the server's model name defaults to the
id after its first `/`, Azure's endpoint gets `/openai/v1`, and a "serve every model" Claude
deployment never routes an OpenAI-kind model."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from catalog.models import Deployment, Model
from catalog.platform_config import PlatformConfig, PlatformConfigError, check
from catalog.snapshot import build_snapshot

pytestmark = pytest.mark.django_db

# Issue 30, contract item 1: "This entry must load as it stands".
GPT6_SOL = {
    "models": [
        {
            "id": "openai/gpt-6-sol",
            "name": "GPT-6 Sol",
            "aliases": ["gpt-6-sol"],
            "contextWindow": 400000,
            "maxOutputTokens": 128000,
            "capabilities": {
                "sampling": True,
                "promptCaching": True,
                "vision": True,
                "pdf": False,
                "tools": True,
                "structuredOutputs": True,
                "thinking": "effort",
                "thinkingCanBeDisabled": True,
                "forcedToolChoice": True,
                "reasoningEfforts": ["none", "low", "medium", "high", "xhigh"],
                "defaultEffort": "medium",
            },
            "pricing": {
                "input": "1.25",
                "output": "10",
                "cacheRead": "0.125",
                "cacheWrite5m": "1.25",
                "cacheWrite1h": "1.25",
            },
            "source": {"url": "https://openai.com/api/pricing/", "checked": "2026-12-07"},
        }
    ]
}


def run(command: str, *args: str) -> str:
    out = io.StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def gpt6(tmp_path: Path) -> str:
    path = tmp_path / "gpt6.json"
    path.write_text(json.dumps(GPT6_SOL))
    run("load_catalog")  # the bundled Claude models
    run("load_catalog", "--file", str(path))
    return "openai/gpt-6-sol"


def test_the_issue_entry_loads_as_it_stands_and_leaves_other_models_alone(gpt6: str) -> None:
    before = set(Model.objects.exclude(id=gpt6).values_list("id", "name"))
    model = Model.objects.get(id=gpt6)
    assert model.thinking == Model.Thinking.EFFORT
    assert model.reasoning_efforts == ["none", "low", "medium", "high", "xhigh"]
    assert before  # the bundled catalog is there, untouched
    assert set(Model.objects.exclude(id=gpt6).values_list("id", "name")) == before


def test_openai_kind_requires_models(gpt6: str) -> None:
    with pytest.raises(CommandError, match="--model is required"):
        run("add_deployment", "v", "--kind", "openai", "--url", "http://127.0.0.1:9/v1")


def test_openai_deployment_routes_by_the_id_after_its_first_slash(gpt6: str) -> None:
    run(
        "add_deployment", "v", "--kind", "openai", "--url", "http://127.0.0.1:9/v1", "--model", gpt6
    )
    run("add_deployment", "a", "--url", "http://127.0.0.1:9", "--api-key", "sk-ant-x")  # serve-all
    snap = build_snapshot()
    routes = snap.by_name[gpt6].routes
    assert [(r.deployment.name, r.upstream_model_id) for r in routes] == [("v", "gpt-6-sol")]
    claude = next(m for m in snap.models if m.id.startswith("anthropic/"))
    assert "v" not in {r.deployment.name for r in claude.routes}


def test_model_ids_map_to_the_server_name(gpt6: str) -> None:
    mapping = json.dumps({gpt6: "Qwen/Qwen3-8B"})
    run(
        "add_deployment",
        "v",
        "--kind",
        "openai",
        "--url",
        "http://127.0.0.1:9/v1",
        "--model",
        gpt6,
        "--model-ids",
        mapping,
        "--max-tokens-param",
        "max_tokens",
    )
    snap = build_snapshot()
    route = snap.by_name[gpt6].routes[0]
    assert route.upstream_model_id == "Qwen/Qwen3-8B"
    assert route.deployment.options == {"max_tokens_param": "max_tokens"}
    assert route.deployment.api_key == ""  # keyless: no auth header is sent


def test_azure_endpoint_gets_the_v1_path_and_needs_a_key(gpt6: str) -> None:
    with pytest.raises(CommandError, match="--api-key"):
        run("add_deployment", "z", "--kind", "azure-openai", "--url", "https://r.openai.azure.com")
    out = run(
        "add_deployment",
        "z",
        "--kind",
        "azure-openai",
        "--url",
        "https://r.openai.azure.com/",
        "--api-key",
        "azkey",
        "--model",
        gpt6,
    )
    assert "https://r.openai.azure.com/openai/v1" in out
    assert Deployment.objects.get(name="z").base_url == "https://r.openai.azure.com/openai/v1"


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (PlatformConfig("openai"), "url"),
        (PlatformConfig("openai", base_url="http://h/v1", region="us-east-1"), "region"),
        (PlatformConfig("openai", base_url="http://h/v1", options={"nope": "x"}), "options"),
        (
            PlatformConfig("openai", base_url="http://h/v1", options={"max_tokens_param": "n"}),
            "options.max_tokens_param",
        ),
        (
            PlatformConfig("anthropic", base_url="http://h", api_key="k", options={"a": "b"}),
            "options",
        ),
        # responses_api is a JSON boolean: neither the string nor 1 passes for true.
        (
            PlatformConfig("openai", base_url="http://h/v1", options={"responses_api": "true"}),
            "options.responses_api",
        ),
        (
            PlatformConfig("openai", base_url="http://h/v1", options={"responses_api": 1}),
            "options.responses_api",
        ),
        (
            PlatformConfig(
                "anthropic", base_url="http://h", api_key="k", options={"responses_api": True}
            ),
            "options",
        ),
    ],
)
def test_bad_openai_configs_name_their_field(config: PlatformConfig, field: str) -> None:
    with pytest.raises(PlatformConfigError) as caught:
        check(config)
    assert caught.value.field == field


def test_responses_api_option_from_the_command_line(gpt6: str) -> None:
    args = ["v", "--kind", "openai", "--url", "http://127.0.0.1:9/v1", "--model", gpt6]
    run("add_deployment", *args, "--responses-api")
    route = build_snapshot().by_name[gpt6].routes[0]
    assert route.deployment.options == {"responses_api": True}
    run("add_deployment", *args)  # an update says again what it wants: translated
    assert build_snapshot().by_name[gpt6].routes[0].deployment.options == {}
    with pytest.raises(CommandError, match="--responses-api is for openai"):
        run(
            "add_deployment",
            "a",
            "--url",
            "http://127.0.0.1:9",
            "--api-key",
            "k",
            "--responses-api",
        )


def test_responses_api_option_checked_and_kept_as_a_boolean() -> None:
    config = check(
        PlatformConfig("openai", base_url="http://h/v1", options={"responses_api": False})
    )
    assert config.options == {"responses_api": False}
    config = check(PlatformConfig("azure-openai", base_url="https://r", api_key="k",
                                  options={"responses_api": True}))  # fmt: skip
    assert config.options["responses_api"] is True
