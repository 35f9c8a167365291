"""Bedrock and Vertex deployments without credentials of their own, and Bedrock API keys.

A Bedrock deployment with no keys signs with botocore's standard AWS credential chain; a Vertex
deployment with no service-account key uses Application Default Credentials (google-auth). Both
read the gateway process's environment, so these tests start a gateway subprocess of their own
with the environment under test (the metadata endpoints disabled: nothing leaves the machine),
each in front of a simulator that verifies SigV4 with the secret and session token it is
configured with, or issues OAuth2 tokens to the service account whose token_uri points at it.
A request that the deployment could not authenticate would fail over to the stack's serve-all
deployment, so each test asserts one attempt, answered `ok` by the deployment under test.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import call_command

from simulator.platforms import PlatformSim
from simulator.testing import SimulatorThread
from tests.support.routing_lab import BASE_MODEL, Lab, LabDeployment, user, wait_for_model
from tests.support.stack import Stack, database_url, e2e_redis_url, start_gateway

pytestmark = pytest.mark.e2e

REGION = "us-east-1"
# Every variable through which botocore or google-auth could find credentials elsewhere.
CREDENTIAL_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_CREDENTIAL_EXPIRATION",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "CLOUDSDK_CONFIG",
)


def temporary_keys() -> tuple[str, str, str]:
    """(access key id, secret, session token) shaped like STS's temporary credentials."""
    return (
        "ASIA" + secrets.token_hex(8).upper(),
        base64.b64encode(secrets.token_bytes(30)).decode(),  # 40 characters, as AWS's
        "IQoJb3JpZ2luX2Vj" + secrets.token_urlsafe(48),
    )


def bedrock_sim(keys: tuple[str, str, str] | None = None, api_key: str = "") -> SimulatorThread:
    """A Bedrock front (started by `with`) accepting these keys or this API key."""
    akid, secret, token = keys or ("", "", "")
    return SimulatorThread(
        platform=PlatformSim(
            platform="bedrock",
            region=REGION,
            aws_access_key_id=akid,
            aws_secret_access_key=secret,
            aws_session_token=token,
            bedrock_api_key=api_key,
        )
    )


@contextlib.contextmanager
def gateway_with(
    stack: Stack, tmp: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> Iterator[str]:
    """A gateway subprocess whose credential environment is exactly `env` (plus no metadata
    endpoints, no ~/.aws or gcloud files); its URL."""
    from django.db import connection

    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    isolated = {
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(tmp / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "no-aws-credentials"),
        "CLOUDSDK_CONFIG": str(tmp / "no-gcloud"),
        "NO_GCE_CHECK": "True",
        **env,
    }
    with stack.blocker.unblock():
        db_url = database_url(connection.settings_dict)
    gateway = start_gateway(db_url, e2e_redis_url(), tmp, isolated)
    try:
        yield gateway.url
    finally:
        gateway.stop()


def single_lab(stack: Stack, label: str, sim: SimulatorThread, config: dict[str, Any]) -> Lab:
    """A fresh model served by one deployment (`config`) and the stack's serve-all ones."""
    from django.db import transaction

    from catalog.models import Deployment, Model
    from catalog.services import copy_model, upsert_deployment

    token = secrets.token_hex(4)
    model_id = f"test/platform-creds-{token}"
    with stack.blocker.unblock(), transaction.atomic():
        clone = copy_model(Model.objects.get(id=BASE_MODEL), model_id)
        dep, _ = upsert_deployment(name=f"pcred-{token}-{label}", model_ids=[model_id], **config)
        serve_all = [
            LabDeployment(d.name, d.id, d.weight, d.max_concurrency, d.base_url)
            for d in Deployment.objects.filter(enabled=True, serves_all_models=True)
        ]
    return Lab(
        stack=stack,
        model=model_id,
        upstream_model=clone.default_upstream_id,
        token=token,
        key=stack.new_key(),
        mine={
            label: LabDeployment(dep.name, dep.id, dep.weight, dep.max_concurrency, dep.base_url)
        },
        serve_all=serve_all,
        sims={label: sim},
    )


def attempts(lab: Lab) -> list[list[tuple[str, str]]]:
    return [[(lab.label(a["deployment"]), a["outcome"]) for a in r.attempts] for r in lab.usage()]


def bedrock_json_and_stream(lab: Lab, url: str) -> None:
    """One JSON and one streamed call with the anthropic SDK, answered by the lab's deployment."""
    client = lab.anthropic(url, session=lab.header_session("bedrock"))
    reply = client.messages.create(model=lab.model, max_tokens=64, messages=user("chain json"))
    assert reply.content[0].type == "text"
    with client.messages.stream(
        model=lab.model, max_tokens=64, messages=user("chain stream")
    ) as events:
        assert "".join(events.text_stream)
    assert attempts(lab) == [[("bedrock", "ok")], [("bedrock", "ok")]]


def signed_with(sim: SimulatorThread, keys: tuple[str, str, str]) -> list[tuple[str, str]]:
    """(access key id, session token) of each Messages call the simulator accepted."""
    found = []
    for call in sim.requests():
        auth = call["headers"].get("authorization", "")
        assert auth.startswith("AWS4-HMAC-SHA256 Credential="), auth
        found.append(
            (
                auth.split("=", 1)[1].split("/", 1)[0],
                call["headers"].get("x-amz-security-token", ""),
            )
        )
    return found


def test_bedrock_signs_with_the_aws_chain_from_the_environment_and_vertex_uses_adc(
    e2e: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = temporary_keys()
    with (
        bedrock_sim(keys) as bedrock,
        SimulatorThread(
            platform=PlatformSim(platform="vertex", region="us-east5", project="ezat-adc-project")
        ) as vertex,
    ):
        assert vertex.service_account is not None
        adc_file = tmp_path / "adc-service-account.json"
        adc_file.write_text(json.dumps(vertex.service_account))
        env = {
            "AWS_ACCESS_KEY_ID": keys[0],
            "AWS_SECRET_ACCESS_KEY": keys[1],
            "AWS_SESSION_TOKEN": keys[2],
            "GOOGLE_APPLICATION_CREDENTIALS": str(adc_file),
        }
        blab = single_lab(
            e2e, "bedrock", bedrock, {"kind": "bedrock", "base_url": bedrock.url, "region": REGION}
        )
        vlab = single_lab(
            e2e,
            "vertex",
            vertex,
            {
                "kind": "vertex",
                "base_url": vertex.url + "/v1",
                "region": "us-east5",
                "project": "ezat-adc-project",
            },
        )
        with gateway_with(e2e, tmp_path, monkeypatch, env) as url:
            wait_for_model(url, blab.key.secret, blab.model)
            wait_for_model(url, vlab.key.secret, vlab.model)
            bedrock_json_and_stream(blab, url)
            assert signed_with(bedrock, keys) == [(keys[0], keys[2])] * 2

            client = vlab.openai(url, session=vlab.header_session("vertex"))
            done = client.chat.completions.create(
                model=vlab.model, max_tokens=64, messages=user("adc json")
            )
            assert done.choices[0].message.content
            chunks = list(
                client.chat.completions.create(
                    model=vlab.model, max_tokens=64, messages=user("adc stream"), stream=True
                )
            )
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert attempts(vlab) == [[("vertex", "ok")], [("vertex", "ok")]]
            calls = [c for c in vertex.requests() if c["path"] != "/token"]
            assert [c["headers"]["authorization"][:16] for c in calls] == ["Bearer ya29.sim-"] * 2
            # The token was issued to the ADC file's service account, once.
            assert vertex.platform_state()["tokens_issued"] == 1


def test_bedrock_signs_with_a_named_profile_of_a_shared_credentials_file(
    e2e: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = temporary_keys()
    other = temporary_keys()
    credentials = tmp_path / "aws-credentials"
    credentials.write_text(
        f"[default]\naws_access_key_id = {other[0]}\naws_secret_access_key = {other[1]}\n\n"
        f"[ezat-bedrock]\naws_access_key_id = {keys[0]}\naws_secret_access_key = {keys[1]}\n"
        f"aws_session_token = {keys[2]}\n"
    )
    env = {"AWS_SHARED_CREDENTIALS_FILE": str(credentials), "AWS_PROFILE": "ezat-bedrock"}
    with bedrock_sim(keys) as bedrock:
        lab = single_lab(
            e2e, "bedrock", bedrock, {"kind": "bedrock", "base_url": bedrock.url, "region": REGION}
        )
        with gateway_with(e2e, tmp_path, monkeypatch, env) as url:
            wait_for_model(url, lab.key.secret, lab.model)
            bedrock_json_and_stream(lab, url)
        assert signed_with(bedrock, keys) == [(keys[0], keys[2])] * 2


def test_rotating_credentials_from_the_chain_are_re_read(
    e2e: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profile's credential_process hands out temporary credentials that expire within
    botocore's refresh window: each request re-reads them (RefreshableCredentials), so after a
    rotation the next request signs with the new key and session token."""
    current = tmp_path / "current-credentials.json"

    def issue(keys: tuple[str, str, str]) -> None:
        expires = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
        current.write_text(
            json.dumps(
                {
                    "Version": 1,
                    "AccessKeyId": keys[0],
                    "SecretAccessKey": keys[1],
                    "SessionToken": keys[2],
                    "Expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            )
        )

    script = tmp_path / "credential_process.py"
    script.write_text("import sys\nsys.stdout.write(open(sys.argv[1]).read())\n")
    config = tmp_path / "aws-config"
    config.write_text(
        f"[profile rotating]\ncredential_process = {sys.executable} {script} {current}\n"
    )
    first, second = temporary_keys(), temporary_keys()
    issue(first)
    env = {"AWS_CONFIG_FILE": str(config), "AWS_PROFILE": "rotating"}
    with bedrock_sim(first) as bedrock:
        lab = single_lab(
            e2e, "bedrock", bedrock, {"kind": "bedrock", "base_url": bedrock.url, "region": REGION}
        )
        with gateway_with(e2e, tmp_path, monkeypatch, env) as url:
            wait_for_model(url, lab.key.secret, lab.model)
            client = lab.anthropic(url, session=lab.header_session("bedrock"))
            client.messages.create(model=lab.model, max_tokens=32, messages=user("before"))
            # Rotate: the platform now accepts only the new credentials.
            issue(second)
            sim = bedrock.platform
            assert sim is not None
            sim.aws_access_key_id, sim.aws_secret_access_key, sim.aws_session_token = second
            client.messages.create(model=lab.model, max_tokens=32, messages=user("after"))
        assert attempts(lab) == [[("bedrock", "ok")], [("bedrock", "ok")]]
        assert signed_with(bedrock, first) == [(first[0], first[2]), (second[0], second[2])]


def test_a_bedrock_api_key_deployment_from_the_cli(e2e: Stack) -> None:
    api_key = "ABSKQmVkcm9ja0FQSUtleS1" + secrets.token_urlsafe(32)
    with bedrock_sim(api_key=api_key) as bedrock:
        # Bedrock refuses a wrong key with 403, in its own error envelope.
        refused = httpx.post(
            f"{bedrock.url}/model/anthropic.claude-sonnet-4-6/invoke",
            headers={"authorization": "Bearer ABSK-not-the-key-0123456789"},
            json={"anthropic_version": "bedrock-2023-05-31", "max_tokens": 8, "messages": []},
        )
        assert refused.status_code == 403
        assert refused.headers["x-amzn-errortype"].startswith("InvalidSignatureException")
        assert "message" in refused.json()

        lab = single_lab(
            e2e,
            "bad",
            bedrock,
            {
                "kind": "bedrock",
                "base_url": bedrock.url,
                "region": REGION,
                "api_key": "ABSK-not-the-key-0123456789",
            },
        )
        name = f"pcred-{lab.token}-bedrock"
        with e2e.blocker.unblock():
            call_command(
                "add_deployment",
                name,
                "--kind",
                "bedrock",
                "--region",
                REGION,
                "--bedrock-api-key",
                api_key,
                "--url",
                bedrock.url,
                "--model",
                lab.model,
                stdout=open(os.devnull, "w"),  # noqa: SIM115
            )
            from catalog.models import Deployment

            dep = Deployment.objects.get(name=name)
        lab.mine["bedrock"] = LabDeployment(
            dep.name, dep.id, dep.weight, dep.max_concurrency, dep.base_url
        )
        lab.__post_init__()
        wait_for_model(e2e.url, lab.key.secret, lab.model)
        client = lab.anthropic(session=lab.header_session("bedrock"))
        reply = client.messages.create(model=lab.model, max_tokens=64, messages=user("key json"))
        assert reply.content[0].type == "text"
        with client.messages.stream(
            model=lab.model, max_tokens=64, messages=user("key stream")
        ) as events:
            assert "".join(events.text_stream)
        assert attempts(lab) == [[("bedrock", "ok")], [("bedrock", "ok")]]
        calls = bedrock.requests()[-2:]
        assert [c["headers"]["authorization"] for c in calls] == [f"Bearer {api_key}"] * 2
        assert [c["path"].rsplit("/", 1)[1] for c in calls] == [
            "invoke",
            "invoke-with-response-stream",
        ]

        # A session that tries the wrong key first: refused, then answered by the right one.
        bedrock.reset()
        session = lab.header_session("bad", "bedrock")
        reply = lab.anthropic(session=session).messages.create(
            model=lab.model, max_tokens=64, messages=user("wrong key first")
        )
        assert reply.content[0].type == "text"
        record = lab.usage()[-1]
        outcomes = [(lab.label(a["deployment"]), a["status"]) for a in record.attempts]
        assert outcomes == [("bad", 502), ("bedrock", 200)]
