"""Streams that fail after their first token bill the usage produced so far (issue 13 item 2,
issue 15 "the usage produced so far is billed"), on every API and platform, to the nano-dollar.

The simulator fails the stream after N events (an `error` event, a dropped connection, a Bedrock
exception frame or broken CRC). The client gets an error; the usage record has the input and
cache tokens of `message_start` and the output delivered until then (4 characters a token, at
least `message_start`'s placeholder 1, `output_exact` false), with status `stream_failed`. Its
cost is checked against the catalog's prices computed here, independently of the gateway.
A failure before the first token stays unbilled (tests/billing/test_limits_billing_usage.py).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import anthropic
import openai
import pytest

from simulator.testing import SimulatorThread
from tests.support.limits_billing_support import SONNET, expected_cost_nano, wait_for
from tests.support.platforms_lab import PlatformLab, make_platform_lab, platform_simulators
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

# Cached, so message_start carries cache tokens that the partial bill must include.
POLICY = "You are the support assistant of a bank. Answer in two sentences. " * 60
FAULTS = {
    # message_start, ping, content_block_start and three text deltas reach the client.
    "error_event": {"error_after_events": 6},
    "dropped": {"drop_after_events": 6},
}


def expected_nano(usage: dict[str, int], output: int) -> int:
    """The catalog's price of these tokens (tests/support/limits_billing_support.py), half up."""
    write_1h = usage.get("cache_write_1h", 0)
    record = SimpleNamespace(
        input_tokens=usage["input"],
        output_tokens=output,
        cache_read_tokens=usage.get("cache_read", 0),
        cache_write_5m_tokens=usage.get("cache_write", 0) - write_1h,
        cache_write_1h_tokens=write_1h,
    )
    return expected_cost_nano(record)


def estimated_output(chars: int) -> int:
    """The gateway's estimate of delivered output: 4 characters a token, at least the
    placeholder 1 of message_start's usage."""
    return max(1, math.ceil(chars / 4))


def billed(stack: Stack, request_id: str) -> Any:
    return wait_for(
        lambda: next(iter(stack.usage(request_id=request_id)), None),
        timeout=60,
        what=f"the usage record of {request_id}",
    )


def _assert_partial(record: Any, usage: dict[str, int], chars: int, api: str) -> int:
    output = estimated_output(chars)
    nano = expected_nano(usage, output)
    print(  # the figures, for the run's log
        f"{api}: failed after {chars} chars delivered; billed input {record.input_tokens} "
        f"cache r/w {record.cache_read_tokens}/{record.cache_write_5m_tokens} "
        f"output {record.output_tokens} = {record.cost_nano} nano-USD"
    )
    assert record.status == "stream_failed"
    assert record.output_exact is False
    assert record.input_tokens == usage["input"]
    assert record.cache_read_tokens == usage.get("cache_read", 0)
    assert record.cache_write_5m_tokens + record.cache_write_1h_tokens == usage.get(
        "cache_write", 0
    )
    assert record.output_tokens == output
    assert record.cost_nano == nano > 0
    return nano


# --- /v1/messages with the anthropic SDK -------------------------------------------------------
def _anthropic_failing_stream(
    client: anthropic.Anthropic, model: str, text: str, request_id: str, system: Any = None
) -> tuple[dict[str, int], int, BaseException]:
    """Read an SDK stream until it raises: (message_start's usage, text chars, the error)."""
    usage: dict[str, int] = {}
    chars = 0
    extra: dict[str, Any] = {"system": system} if system is not None else {}
    with (
        pytest.raises(anthropic.APIError) as raised,
        client.messages.stream(
            model=model,
            max_tokens=1000,
            messages=[{"role": "user", "content": text}],
            extra_headers={"x-request-id": request_id},
            **extra,
        ) as stream,
    ):
        for event in stream:
            if event.type == "message_start":
                u = event.message.usage
                usage = {
                    "input": u.input_tokens,
                    "cache_read": u.cache_read_input_tokens or 0,
                    "cache_write": u.cache_creation_input_tokens or 0,
                }
                split = getattr(u, "cache_creation", None)
                if split is not None:
                    usage["cache_write_1h"] = split.ephemeral_1h_input_tokens or 0
            elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                chars += len(event.delta.text)
    assert usage, "message_start must have been delivered"
    assert chars > 0, "the failure must come after output"
    return usage, chars, raised.value


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_messages_stream_failing_after_output_bills_what_was_produced(
    e2e: Stack, fault: str
) -> None:
    key = e2e.new_key()
    client = anthropic.Anthropic(base_url=e2e.url, api_key=key.secret, max_retries=0, timeout=30)
    text = f"long answer partial-{uuid.uuid4().hex}"
    system = [{"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral"}}]
    e2e.sim.script({"match": text, **FAULTS[fault]})
    request_id = f"partial-msg-{uuid.uuid4().hex}"
    usage, chars, error = _anthropic_failing_stream(client, SONNET, text, request_id, system)
    assert usage["cache_write"] + usage["cache_read"] > 0  # the cache side is in the bill too
    record = billed(e2e, request_id)
    nano = _assert_partial(record, usage, chars, f"messages/{fault}")
    assert [r.request_id for r in e2e.usage(org_id=key.org_id)] == [request_id]  # once
    # The request log says it failed, and what it cost.
    from billing.models import RequestLog

    def logged() -> Any:
        with e2e.blocker.unblock():
            return RequestLog.objects.filter(request_id=request_id).first()

    row = wait_for(logged, timeout=60, what="the request-log row")
    assert (row.status, row.http_status, row.cost_nano) == ("error", 502, nano)
    assert row.output_exact is False
    assert str(error)


# --- the OpenAI APIs with the openai SDK ---------------------------------------------------------
def _reference_usage(e2e: Stack, secret: str, org_id: int, api: str, text: str) -> dict[str, int]:
    """The input side of the failed stream, from the same request answered whole just after it.

    The gateway adds a cache breakpoint to OpenAI-API requests, so the failed stream (the first
    of its prefix) wrote the cache and this one reads exactly what it wrote: its input and cache
    read are the failed stream's input and cache write."""
    oc = openai.OpenAI(base_url=e2e.url + "/openai/v1", api_key=secret, max_retries=0)
    if api == "chat":
        oc.chat.completions.create(
            model=SONNET, max_tokens=1000, messages=[{"role": "user", "content": text}]
        )
    else:
        oc.responses.create(model=SONNET, max_output_tokens=1000, input=text)
    full = e2e.usage(org_id=org_id)[-1]  # recorded before the answer went out
    assert full.cache_write_5m_tokens == full.cache_write_1h_tokens == 0
    return {"input": full.input_tokens, "cache_write": full.cache_read_tokens}


def _openai_failing_stream(oc: openai.OpenAI, api: str, text: str, request_id: str) -> int:
    """Read an SDK stream until it fails; the text characters delivered before."""
    chars = 0
    headers = {"x-request-id": request_id}
    if api == "chat":
        with pytest.raises(openai.APIError):
            for chunk in oc.chat.completions.create(
                model=SONNET, max_tokens=1000, stream=True, extra_headers=headers,
                messages=[{"role": "user", "content": text}],
            ):  # fmt: skip
                if chunk.choices and chunk.choices[0].delta.content:
                    chars += len(chunk.choices[0].delta.content)
    else:
        types = []
        for event in oc.responses.create(
            model=SONNET, max_output_tokens=1000, stream=True, input=text, extra_headers=headers
        ):
            types.append(event.type)
            if event.type == "response.output_text.delta":
                chars += len(event.delta)
        assert types[-2:] == ["error", "response.failed"], types[-3:]
    assert chars > 0, "the failure must come after output"
    return chars


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_openai_stream_failing_after_output_bills_what_was_produced(
    e2e: Stack, api: str, fault: str
) -> None:
    key = e2e.new_key()
    text = f"long answer partial-{uuid.uuid4().hex}"
    oc = openai.OpenAI(
        base_url=e2e.url + "/openai/v1", api_key=key.secret, max_retries=0, timeout=30
    )
    e2e.sim.script({"match": text, **FAULTS[fault]})
    request_id = f"partial-{api}-{uuid.uuid4().hex}"
    chars = _openai_failing_stream(oc, api, text, request_id)
    record = billed(e2e, request_id)
    usage = _reference_usage(e2e, key.secret, key.org_id, api, text)
    _assert_partial(record, usage, chars, f"{api}/{fault}")
    assert record.api == api
    assert len(e2e.usage(org_id=key.org_id)) == 2  # the reference and this one, once


# --- Bedrock and Vertex ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, SimulatorThread]]:
    with platform_simulators() as started:
        yield started


@pytest.fixture
def lab(e2e: Stack, sims: dict[str, SimulatorThread]) -> PlatformLab:
    return make_platform_lab(e2e, sims)


@pytest.mark.parametrize(
    ("label", "fault"),
    [
        # Paced, so the broken frame arrives in a read of its own, after the first token.
        ("bedrock", {"bad_crc_after_events": 5, "event_delay": 0.05}),
        ("bedrock", {"error_after_events": 6}),  # a modelStreamErrorException-style frame
        ("vertex", {"error_after_events": 6}),
        ("vertex", {"drop_after_events": 6}),
    ],
    ids=["bedrock-bad-crc", "bedrock-exception", "vertex-error", "vertex-dropped"],
)
def test_platform_stream_failing_after_output_bills_what_was_produced(
    lab: PlatformLab, label: str, fault: dict[str, Any]
) -> None:
    lab.sims[label].script(fault)
    client = lab.anthropic(session=lab.header_session(label))
    request_id = f"partial-{label}-{uuid.uuid4().hex}"
    usage, chars, _ = _anthropic_failing_stream(
        client, lab.model, f"long answer {label}", request_id
    )
    record = billed(lab.stack, request_id)
    assert lab.label(record.deployment) == label
    _assert_partial(record, usage, chars, f"{label}/{sorted(fault)[0]}")
    # Nothing retried after the first token: one attempt, on this platform.
    assert [a["outcome"] for a in record.attempts] == ["ok"]
    assert [r.request_id for r in lab.usage()] == [request_id]
