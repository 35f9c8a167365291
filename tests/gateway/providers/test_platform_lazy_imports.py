"""A gateway process that serves no Bedrock or Vertex deployment never loads botocore or
google-auth (the issue's "idle RSS of a worker without Bedrock or Vertex deployments
unchanged"): a fresh interpreter loads the ASGI application, runs its lifespan startup and
answers one Messages request through the application itself (httpx's ASGI transport), then
reports which of those packages it imported. The control: the same script sending its request
to a Bedrock deployment does import botocore, so the check can see an import when there is one.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gateway.providers.test_platform_credentials import (
    REGION,
    bedrock_sim,
    single_lab,
    temporary_keys,
)
from tests.support.routing_lab import BASE_MODEL, user
from tests.support.stack import GATEWAY_ENV, ROOT, Stack, database_url, e2e_redis_url

pytestmark = pytest.mark.e2e

HEAVY = ("botocore", "boto3", "google.auth", "google.oauth2", "google.api_core")

SCRIPT = r"""
import asyncio, json, os, sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ezat.settings")
django.setup()
import httpx

from ezat.asgi import application

request = json.loads(sys.argv[1])
heavy = tuple(json.loads(sys.argv[2]))


async def main() -> dict:
    inbox, outbox = asyncio.Queue(), asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    life = asyncio.create_task(application(scope, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    started = await outbox.get()
    assert started["type"] == "lifespan.startup.complete", started
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        reply = await client.post(
            "/v1/messages",
            headers=request["headers"],
            json=request["body"],
            timeout=30,
        )
    await inbox.put({"type": "lifespan.shutdown"})
    await outbox.get()
    await life
    loaded = sorted(m for m in sys.modules if m.startswith(heavy))
    return {"status": reply.status_code, "body": reply.text[:500], "loaded": loaded}


print("RESULT " + json.dumps(asyncio.run(main())))
"""


def handled_in_fresh_process(stack: Stack, headers: dict[str, str], model: str) -> dict:
    from django.db import connection

    with stack.blocker.unblock():
        db_url = database_url(connection.settings_dict)
    env = {**os.environ, **GATEWAY_ENV, "DATABASE_URL": db_url, "REDIS_URL": e2e_redis_url()}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    request = {
        "headers": {"anthropic-version": "2023-06-01", **headers},
        "body": {"model": model, "max_tokens": 32, "messages": user("lazy imports")},
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(request), json.dumps(HEAVY)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    result: dict = json.loads(line[len("RESULT ") :])
    assert result["status"] == 200, result
    return result


def test_an_anthropic_request_loads_neither_botocore_nor_google_auth(e2e: Stack) -> None:
    key = e2e.new_key()
    result = handled_in_fresh_process(e2e, {"x-api-key": key.secret}, BASE_MODEL)
    assert result["loaded"] == []


def test_a_bedrock_request_does_load_botocore(e2e: Stack, tmp_path: Path) -> None:
    keys = (
        "AKIA" + secrets.token_hex(8).upper(),
        *temporary_keys()[1:],
    )
    with bedrock_sim(keys) as bedrock:
        config = {
            "kind": "bedrock",
            "base_url": bedrock.url,
            "region": REGION,
            "aws_access_key_id": keys[0],
            "aws_secret_access_key": keys[1],
            "aws_session_token": keys[2],
        }
        lab = single_lab(e2e, "bedrock", bedrock, config)
        headers = {"x-api-key": lab.key.secret, "x-ezat-session": lab.header_session("bedrock")}
        result = handled_in_fresh_process(e2e, headers, lab.model)
        assert len(bedrock.requests()) == 1
    assert "botocore" in result["loaded"]
    assert not [m for m in result["loaded"] if m.startswith("google")]
