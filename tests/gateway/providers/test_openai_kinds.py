"""Deployment kinds on the wire (issue 30, contract item 2): `azure-openai` calls
`{endpoint}/openai/v1/chat/completions` with an `api-key` header; a keyless `openai`
deployment (vLLM, Ollama) sends no auth header; the customer's key never reaches a provider."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import openai
import pytest

from simulator.testing import SimulatorThread
from tests.support.routing_lab import wait_for_model
from tests.support.stack import Key, Stack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def keyless_sim() -> Iterator[SimulatorThread]:
    sim = SimulatorThread().start()  # started without a key: it checks none, like vLLM
    try:
        yield sim
    finally:
        sim.stop()


def _model_on(stack: Stack, **deployment: object) -> tuple[str, Key]:
    from catalog.models import Model
    from catalog.services import copy_model, upsert_deployment

    model_id = f"test/kind-{secrets.token_hex(4)}"
    with stack.blocker.unblock():
        copy_model(
            Model.objects.get(id="anthropic/claude-sonnet-5-5"),
            model_id,
            thinking=Model.Thinking.NONE,
            reasoning_efforts=[],
            default_effort="",
        )
        upsert_deployment(
            name=f"kind-{secrets.token_hex(4)}",
            model_ids=[model_id],
            platform_model_ids={model_id: "gpt-sim"},
            **deployment,  # type: ignore[arg-type]
        )
    key = stack.new_key()
    wait_for_model(stack.url, key.secret, model_id)
    return model_id, key


def test_azure_openai_uses_its_path_and_api_key_header(e2e: Stack) -> None:
    model, key = _model_on(e2e, kind="azure-openai", base_url=e2e.sim.url, api_key="sk-sim-a")
    client = openai.OpenAI(api_key=key.secret, base_url=e2e.url + "/openai/v1", max_retries=0)
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}]
    )
    assert answer.choices[0].message.content
    [call] = [r for r in e2e.sim.requests() if r["path"] == "/openai/v1/chat/completions"]
    assert call["headers"]["api-key"] == "sk-sim-a"
    assert "authorization" not in call["headers"]
    assert key.secret not in str(call["headers"])


def test_a_keyless_deployment_sends_no_auth_header(
    e2e: Stack, keyless_sim: SimulatorThread
) -> None:
    keyless_sim.reset()
    model, key = _model_on(e2e, kind="openai", base_url=keyless_sim.url + "/v1")
    client = openai.OpenAI(api_key=key.secret, base_url=e2e.url + "/openai/v1", max_retries=0)
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}]
    )
    assert answer.choices[0].message.content
    [call] = [r for r in keyless_sim.requests() if r["path"] == "/v1/chat/completions"]
    assert "authorization" not in call["headers"] and "api-key" not in call["headers"]
