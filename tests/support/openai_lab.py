"""A GPT-like model behind the stack's simulator's OpenAI-compatible front (issue 30).

Each lab makes its own catalog model (`test/gpt-sim-<token>`, thinking by native reasoning
effort) served by its own `openai`-kind deployment(s) on the stack's sim-a, whose OpenAI front
answers as `gpt-sim` (or another of its models). The stack's serve-all Claude deployment never
routes it (catalog/snapshot.py), so every call it gets goes to the OpenAI front.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from tests.support.routing_lab import wait_for_model
from tests.support.stack import SIM_KEYS, Key, Stack

CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"


@dataclass
class OpenAILab:
    stack: Stack
    model: str
    server_model: str
    deployments: list[str]
    key: Key

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.stack.sim.requests() if r["path"] == CHAT_PATH]

    def responses_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.stack.sim.requests() if r["path"] == RESPONSES_PATH]

    def messages_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.stack.sim.requests() if r["path"].startswith("/v1/messages")]


def make_openai_lab(
    stack: Stack,
    *,
    server_model: str = "gpt-sim",
    deployments: int = 1,
    options: dict[str, Any] | None = None,
    server_models: tuple[str, ...] = (),
    **model: Any,
) -> OpenAILab:
    """`options`: the deployments' provider options (`{"responses_api": True}` relays the
    Responses API to the simulator's /v1/responses). `server_models`: the simulator model each
    deployment answers as (one deployment per name, so a fault can `match` one deployment's
    requests by their `"model"`)."""
    from django.db import transaction

    from catalog.models import Model
    from catalog.services import copy_model, upsert_deployment

    token = secrets.token_hex(4)
    model_id = f"test/gpt-sim-{token}"
    changes = {
        "thinking": Model.Thinking.EFFORT,
        "reasoning_efforts": ["none", "low", "medium", "high"],
        "default_effort": "medium",
        "forced_tool_choice": True,
        "sampling": True,
        **model,
    }
    names = []
    with stack.blocker.unblock(), transaction.atomic():
        copy_model(Model.objects.get(id="anthropic/claude-sonnet-5-5"), model_id, **changes)
        for n, served in enumerate(server_models or (server_model,) * deployments):
            dep, _ = upsert_deployment(
                name=f"oai-{token}-{n}",
                kind="openai",
                base_url=stack.sim.url + "/v1",
                api_key=SIM_KEYS[0],
                model_ids=[model_id],
                platform_model_ids={model_id: served},
                options=options,
            )
            names.append(dep.name)
    key = stack.new_key()
    wait_for_model(stack.url, key.secret, model_id)
    return OpenAILab(stack, model_id, server_model, names, key)
