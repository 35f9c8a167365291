"""A deployment created over the operator API serves the next request, no restart (issue 30,
contract item 2): an operator signs in at the running gateway's admin login (session + CSRF, as a
browser does), POSTs an `openai`-kind deployment pointing at the simulator's OpenAI front, and a
chat call with the official openai SDK is answered through it and billed."""

from __future__ import annotations

import re
import secrets
from typing import Any

import httpx
import openai
import pytest

from tests.support.limits_billing_support import records_by_request
from tests.support.openai_lab import CHAT_PATH
from tests.support.routing_lab import wait_for_model
from tests.support.stack import SIM_KEYS, Stack
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

PASSWORD = "operator-pass-" + secrets.token_hex(8)


def _cookie(response: httpx.Response, name: str) -> str:
    # Read from Set-Cookie: the cookies are Secure (production settings), which a client jar
    # would keep off a plain-http test URL.
    for header in response.headers.get_list("set-cookie"):
        found = re.match(rf"{name}=([^;]+)", header)
        if found:
            return found.group(1)
    raise AssertionError(f"no {name} cookie in {response.headers}")


def _sign_in(url: str, username: str) -> dict[str, str]:
    """The headers of a signed-in operator: session cookie, CSRF cookie and token."""
    form = httpx.get(f"{url}/admin/login/", timeout=30)
    assert form.status_code == 200, form.text
    csrf = _cookie(form, "csrftoken")
    signed_in = httpx.post(
        f"{url}/admin/login/?next=/admin/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": csrf},
        headers={"cookie": f"csrftoken={csrf}"},
        timeout=30,
    )
    assert signed_in.status_code == 302, signed_in.text
    session = _cookie(signed_in, "sessionid")
    return {"cookie": f"csrftoken={csrf}; sessionid={session}", "x-csrftoken": csrf}


def _chat(client: openai.OpenAI, model_id: str) -> Any:
    return client.chat.completions.with_raw_response.create(
        model=model_id, messages=[{"role": "user", "content": "hi"}], max_completion_tokens=100
    )


def _served(client: openai.OpenAI, model_id: str) -> Any:
    try:
        return _chat(client, model_id)
    except openai.APIStatusError as exc:
        assert exc.status_code == 503, exc  # anything but "not served (yet)" is a failure
        return None


def test_a_deployment_created_over_the_api_serves_the_next_request(e2e: Stack) -> None:
    from django.contrib.auth import get_user_model

    from catalog.models import Model
    from catalog.services import copy_model

    token = secrets.token_hex(4)
    model_id = f"test/gpt-op-{token}"
    username = f"operator-{token}"
    with e2e.blocker.unblock():
        # Effort thinking, like a GPT model: the stack's serve-all Claude deployment never routes it.
        copy_model(
            Model.objects.get(id="anthropic/claude-sonnet-5-5"),
            model_id,
            thinking=Model.Thinking.EFFORT,
            reasoning_efforts=["low", "medium", "high"],
            default_effort="medium",
        )
        get_user_model().objects.create_superuser(username, f"{username}@example.com", PASSWORD)
    key = e2e.new_key()
    client = openai.OpenAI(api_key=key.secret, base_url=e2e.url + "/openai/v1", max_retries=0)
    wait_for_model(e2e.url, key.secret, model_id)  # in the gateway's catalog, with its prices
    with pytest.raises(openai.APIStatusError) as unserved:  # but no deployment serves it yet
        _chat(client, model_id)
    assert unserved.value.status_code == 503 and "no deployment serves" in str(unserved.value)

    operator = _sign_in(e2e.url, username)
    created = httpx.post(
        f"{e2e.url}/api/v1/operator/deployments",
        json={
            "name": f"op-{token}",
            "kind": "openai",
            "base_url": e2e.sim.url + "/v1",
            "api_key": SIM_KEYS[0],
            "models": [model_id],
            "model_ids": {model_id: "gpt-sim"},
        },
        headers=operator,
        timeout=30,
    )
    assert created.status_code == 201, created.text
    assert SIM_KEYS[0] not in created.text and created.json()["api_key_set"] is True

    # The gateway's catalog poll (EZAT_CATALOG_POLL_INTERVAL) picks it up: no restart.
    raw = wait_for(
        lambda: _served(client, model_id), what="the new deployment to serve", interval=0.2
    )
    answer = raw.parse()
    assert answer.choices[0].message.content
    [call] = [r for r in e2e.sim.requests() if r["path"] == CHAT_PATH]
    assert call["body"]["model"] == "gpt-sim"  # the deployment's model_ids
    assert call["headers"]["authorization"] == f"Bearer {SIM_KEYS[0]}"  # its sealed key
    request_id = raw.headers["x-request-id"]
    record = wait_for(
        lambda: records_by_request(e2e, [request_id]).get(request_id), what="the usage record"
    )
    assert record.model_id == model_id and record.deployment == f"op-{token}"
    assert answer.usage is not None
    assert (record.input_tokens, record.output_tokens) == (
        answer.usage.prompt_tokens,
        answer.usage.completion_tokens,
    )
    assert record.cost_nano > 0
