"""The Responses API relayed to the provider's /responses where the deployment says it has one
(issue 30 item 5, `"responses_api": true`): the body reaches the simulator's /v1/responses as
the client sent it with the model renamed, the answer and its events come back with the model
renamed back, usage is billed once from the provider's figures, failover happens before the
first event, errors keep OpenAI's envelope, and a relayed stored response is continued on the
deployment that keeps it (and only by its own org). Driven with the official openai SDK and
validated against its types (tests/support/schemas.py)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response

from tests.support import schemas
from tests.support.limits_billing_support import records_by_request
from tests.support.openai_lab import OpenAILab, make_openai_lab
from tests.support.responses_support import SONNET
from tests.support.stack import Stack
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

RELAY = {"responses_api": True}


@pytest.fixture(scope="module")
def lab(stack: Stack) -> OpenAILab:
    return make_openai_lab(stack, options=RELAY)


@pytest.fixture(scope="module")
def pair(stack: Stack) -> OpenAILab:
    """Two relaying deployments of one model: failover, and which one keeps a conversation."""
    return make_openai_lab(stack, options=RELAY, deployments=2)


def sdk(lab: OpenAILab, url: str, secret: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(
        api_key=secret or lab.key.secret, base_url=url + "/openai/v1", max_retries=0
    )


@pytest.fixture
def client(lab: OpenAILab, e2e: Stack) -> openai.OpenAI:
    return sdk(lab, e2e.url)


def record(stack: Stack, request_id: str) -> Any:
    return wait_for(
        lambda: records_by_request(stack, [request_id]).get(request_id),
        what=f"the usage record of {request_id}",
    )


def test_json_body_as_sent_model_renamed_and_billed_once(
    lab: OpenAILab, client: openai.OpenAI
) -> None:
    raw = client.responses.with_raw_response.create(
        model=lab.model,
        input="hello there",
        instructions="be brief",
        temperature=0.3,
        max_output_tokens=200,
        reasoning={"effort": "low"},
        metadata={"who": "test"},
        store=False,
    )
    response = raw.parse()
    Response.model_validate(response.model_dump())
    assert response.model == lab.model
    assert response.output_text
    sent = lab.responses_requests()[-1]["body"]
    assert sent["model"] == lab.server_model
    for name, value in {
        "input": "hello there",
        "instructions": "be brief",
        "temperature": 0.3,
        "max_output_tokens": 200,
        "reasoning": {"effort": "low"},
        "metadata": {"who": "test"},
        "store": False,
    }.items():
        assert sent[name] == value, name
    assert sent["prompt_cache_key"].startswith("ezat-")  # derived, as on the Chat relay
    assert lab.chat_requests() == []  # not translated
    rec = record(lab.stack, raw.headers["x-request-id"])
    usage = response.usage
    assert usage is not None
    cached = usage.input_tokens_details.cached_tokens
    assert rec.input_tokens == usage.input_tokens - cached
    assert rec.cache_read_tokens == cached
    assert rec.output_tokens == usage.output_tokens
    assert rec.reasoning_tokens == usage.output_tokens_details.reasoning_tokens
    assert rec.model_id == lab.model and rec.api == "responses" and rec.status == "ok"
    assert len(records_by_request(lab.stack, [raw.headers["x-request-id"]])) == 1
    assert raw.headers["x-ezat-cost-usd"]


def test_the_cost_is_the_models_prices_times_the_providers_usage(
    lab: OpenAILab, client: openai.OpenAI
) -> None:
    from catalog.snapshot import build_snapshot

    raw = client.responses.with_raw_response.create(
        model=lab.model, input="price me " * 50, store=False
    )
    usage = raw.parse().usage
    assert usage is not None
    rec = record(lab.stack, raw.headers["x-request-id"])
    with lab.stack.blocker.unblock():
        prices = build_snapshot().by_name[lab.model].pricing.tier_for(usage.input_tokens).prices
    cached = usage.input_tokens_details.cached_tokens
    # Prices are pico-USD per token; the cost is rounded once, half up, to nano-USD.
    pico = (
        (usage.input_tokens - cached) * prices.input
        + cached * prices.cache_read
        + usage.output_tokens * prices.output
    )
    assert rec.cost_nano == (pico + 500) // 1000 > 0


def test_stream_events_come_back_renamed_and_billed_once(
    lab: OpenAILab, client: openai.OpenAI
) -> None:
    with client.responses.with_streaming_response.create(
        model=lab.model, input="tell me a story", stream=True, store=False
    ) as raw:
        request_id = raw.headers["x-request-id"]
        events = list(raw.parse())
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-1]
    assert done.type == "response.completed"
    assert done.response.model == lab.model
    assert events[0].response.model == lab.model  # type: ignore[union-attr]
    sent = lab.responses_requests()[-1]["body"]
    assert sent["stream"] is True and sent["model"] == lab.server_model
    rec = record(lab.stack, request_id)
    usage = done.response.usage
    assert usage is not None
    assert rec.output_exact and rec.status == "ok"
    assert rec.output_tokens == usage.output_tokens
    assert rec.input_tokens + rec.cache_read_tokens == usage.input_tokens
    assert len(records_by_request(lab.stack, [request_id])) == 1


def test_hosted_tools_are_left_out_and_named(lab: OpenAILab, client: openai.OpenAI) -> None:
    raw = client.responses.with_raw_response.create(
        model=lab.model,
        input="search?",
        tools=[
            {"type": "web_search"},
            {"type": "function", "name": "lookup", "parameters": {"type": "object"}},
        ],
        store=False,
    )
    raw.parse()
    assert raw.headers["x-ezat-dropped-tools"] == "web_search"
    sent = lab.responses_requests()[-1]["body"]
    assert [t["type"] for t in sent["tools"]] == ["function"]


def test_the_providers_refusal_reaches_the_client(lab: OpenAILab, client: openai.OpenAI) -> None:
    # The simulator is as strict as OpenAI: an unknown field is the provider's 400, not EZAT's.
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=lab.model, input="hi", extra_body={"no_such_field": 1})
    assert "no_such_field" in str(raised.value)
    assert raised.value.param == "no_such_field"  # type: ignore[attr-defined]


def test_a_429_comes_back_with_its_retry_after(lab: OpenAILab, e2e: Stack) -> None:
    e2e.sim.script({"path": "responses", "status": 429, "retry_after": "7"})
    response = httpx.post(
        e2e.url + "/openai/v1/responses",
        headers={"authorization": f"Bearer {lab.key.secret}"},
        json={"model": lab.model, "input": "hi"},
        timeout=60,
    )
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert response.json()["error"]["type"] == "rate_limit_error"


def test_an_error_mid_stream_is_passed_on_and_not_billed(
    lab: OpenAILab, e2e: Stack, sdk_schemas: schemas.Watch
) -> None:
    long = {"content": [{"type": "text", "text": "word " * 40}]}
    e2e.sim.script({"path": "responses", "reply": long, "error_after_events": 5})
    with httpx.stream(
        "POST",
        e2e.url + "/openai/v1/responses",
        headers={"authorization": f"Bearer {lab.key.secret}"},
        json={"model": lab.model, "input": "go", "stream": True},
        timeout=60,
    ) as response:
        assert response.status_code == 200
        request_id = response.headers["x-request-id"]
        body = response.read().decode()
    kinds = [line[7:] for line in body.splitlines() if line.startswith("event: ")]
    assert kinds[-2:] == ["error", "response.failed"], kinds
    assert '"model":"' + lab.model + '"' in body and lab.server_model + '"' not in body
    assert records_by_request(e2e, [request_id]) == {}
    # The provider's own `error` event, passed on as sent: the real API's wire nests the error
    # object (reference/platforms-and-responses.md §4.4, recorded streams), which openai-python
    # raises APIError on; its typed union has only the flat shape. That one is not EZAT's.
    nested = [v for v in sdk_schemas.violations if "{'type': 'error', 'sequence_number'" in v]
    assert len(nested) == 1, sdk_schemas.violations
    sdk_schemas.violations.remove(nested[0])


def test_5xx_fails_over_to_the_next_deployment_billed_once(pair: OpenAILab, e2e: Stack) -> None:
    client = sdk(pair, e2e.url)
    before = len(pair.responses_requests())
    e2e.sim.script({"path": "responses", "status": 500})
    raw = client.responses.with_raw_response.create(model=pair.model, input="hi", store=False)
    raw.parse()
    calls = pair.responses_requests()[before:]
    assert [c["status"] for c in calls] == ["500", "200"]
    rec = record(e2e, raw.headers["x-request-id"])
    assert rec.status == "ok"
    assert len(records_by_request(e2e, [raw.headers["x-request-id"]])) == 1


def test_a_relayed_conversation_is_continued_where_it_is_kept(pair: OpenAILab, e2e: Stack) -> None:
    client = sdk(pair, e2e.url)
    first = client.responses.with_raw_response.create(model=pair.model, input="my name is Ada")
    answer = first.parse()
    kept = record(e2e, first.headers["x-request-id"]).deployment
    for _ in range(4):
        follow = client.responses.with_raw_response.create(
            model=pair.model, input="what is my name?", previous_response_id=answer.id
        )
        follow.parse()
        sent = pair.responses_requests()[-1]["body"]
        assert sent["previous_response_id"] == answer.id  # relayed: the provider has it
        assert record(e2e, follow.headers["x-request-id"]).deployment == kept
    # The stored copy answers GET as the client saw it.
    assert client.responses.retrieve(answer.id).model == pair.model
    # Another org never resolves it, and the provider is not asked.
    stranger = sdk(pair, e2e.url, e2e.new_key().secret)
    before = len(pair.responses_requests())
    with pytest.raises(openai.NotFoundError):
        stranger.responses.create(model=pair.model, input="hi", previous_response_id=answer.id)
    assert len(pair.responses_requests()) == before
    # A Claude model cannot continue it: a clear 400, not a silent empty history.
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=SONNET, input="hi", previous_response_id=answer.id)
    assert "previous_response_id" in str(raised.value)


def test_a_kept_conversation_whose_deployment_stops_relaying_is_a_clear_400(
    stack: Stack, e2e: Stack
) -> None:
    from catalog.models import Deployment
    from catalog.services import bump_catalog_version

    lab = make_openai_lab(stack, options=RELAY)
    client = sdk(lab, e2e.url)
    answer = client.responses.create(model=lab.model, input="remember me")
    with stack.blocker.unblock():
        Deployment.objects.filter(name__in=lab.deployments).update(options={})
        bump_catalog_version()

    def refused() -> openai.BadRequestError | None:
        try:
            client.responses.create(model=lab.model, input="again", previous_response_id=answer.id)
        except openai.BadRequestError as exc:
            return exc
        return None  # still relayed, until the gateway loads the change

    error = wait_for(refused, what="the 400 for a conversation its deployment no longer keeps")
    assert "previous_response_id" in str(error) and lab.deployments[0] in str(error)


def test_a_response_ezat_stored_is_continued_by_translation(
    lab: OpenAILab, e2e: Stack, client: openai.OpenAI
) -> None:
    # Stored by EZAT (a Claude model: translated), continued on the relaying model: the
    # translated path expands the stored conversation itself and calls Chat Completions.
    claude = sdk(lab, e2e.url)
    first = claude.responses.create(model=SONNET, input="my name is Ada")
    before = len(lab.responses_requests())
    follow = client.responses.create(
        model=lab.model, input="what is my name?", previous_response_id=first.id
    )
    assert follow.model == lab.model
    assert len(lab.responses_requests()) == before
    assert "my name is Ada" in str(lab.chat_requests()[-1]["body"]["messages"])


def test_a_stream_the_provider_cuts_ends_with_ezats_failure_not_billed(
    lab: OpenAILab, e2e: Stack, client: openai.OpenAI
) -> None:
    long = {"content": [{"type": "text", "text": "word " * 40}]}
    e2e.sim.script({"path": "responses", "reply": long, "drop_after_events": 6})
    with client.responses.with_streaming_response.create(
        model=lab.model, input="go", stream=True, store=False
    ) as raw:
        request_id = raw.headers["x-request-id"]
        events = list(raw.parse())
    # Validated as the SDK's own types (the watcher), numbered on from the provider's.
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    failed = events[-1]
    assert failed.type == "response.failed" and failed.response.model == lab.model
    assert records_by_request(e2e, [request_id]) == {}


def test_items_by_id_are_not_followed_in_a_relayed_conversation(
    lab: OpenAILab, client: openai.OpenAI
) -> None:
    first = client.responses.create(model=lab.model, input="hello")
    before = len(lab.responses_requests())
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(
            model=lab.model,
            previous_response_id=first.id,
            input=[{"type": "item_reference", "id": first.output[0].id}],  # type: ignore[list-item]
        )
    assert raised.value.param == "input"  # type: ignore[attr-defined]
    assert len(lab.responses_requests()) == before
