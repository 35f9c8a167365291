"""The Bedrock front's authentication, seen with botocore's own signer: SigV4 with the
configured secret (and session token, when one is configured) or the configured Bedrock API key
as Bearer; anything else is a 403 in Bedrock's envelope."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from simulator.platforms import PlatformSim
from simulator.testing import SimulatorThread

KEY_ID = "ASIAEZATSIMTEST00001"
SECRET = "c2ltdWxhdG9yIHNlY3JldCBmb3IgdGVzdHMgb25seQ"
TOKEN = "IQoJb3JpZ2luX2VjEXAMPLEsessiontoken"
API_KEY = "ABSKQmVkcm9ja0FQSUtleS1leGFtcGxlLWtleQ"
PATH = "/model/anthropic.claude-sonnet-4-6/invoke"
BODY = json.dumps(
    {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
    }
).encode()


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorThread]:
    platform = PlatformSim(
        platform="bedrock",
        region="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        aws_session_token=TOKEN,
        bedrock_api_key=API_KEY,
    )
    with SimulatorThread(platform=platform) as started:
        yield started


def signed(sim: SimulatorThread, secret: str, token: str | None) -> httpx.Response:
    request = AWSRequest(
        method="POST",
        url=sim.url + PATH,
        data=BODY,
        headers={"content-type": "application/json", "accept": "application/json"},
    )
    SigV4Auth(Credentials(KEY_ID, secret, token), "bedrock", "us-east-1").add_auth(request)
    return httpx.post(sim.url + PATH, content=BODY, headers=dict(request.headers.items()))


def bearer(sim: SimulatorThread, key: str) -> httpx.Response:
    return httpx.post(
        sim.url + PATH,
        content=BODY,
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
    )


def test_sigv4_with_the_configured_secret_and_session_token(sim: SimulatorThread) -> None:
    assert signed(sim, SECRET, TOKEN).status_code == 200


@pytest.mark.parametrize(
    ("secret", "token"),
    [
        (SECRET, None),
        (SECRET, "IQoJb3JpZ2luX2VjOTHERtoken"),
        ("d3Jvbmcgc2VjcmV0IGZvciB0ZXN0cw", TOKEN),
    ],
    ids=["no-session-token", "wrong-session-token", "wrong-secret"],
)
def test_sigv4_refusals_are_403(sim: SimulatorThread, secret: str, token: str | None) -> None:
    refused = signed(sim, secret, token)
    assert refused.status_code == 403
    assert refused.headers["x-amzn-errortype"].split(":", 1)[0] == "InvalidSignatureException"
    assert refused.json()["message"]


def test_the_configured_bedrock_api_key_as_bearer(sim: SimulatorThread) -> None:
    assert bearer(sim, API_KEY).status_code == 200
    refused = bearer(sim, API_KEY[:-1] + "X")
    assert refused.status_code == 403
    assert refused.json()["message"]
