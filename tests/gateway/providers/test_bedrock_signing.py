"""The gateway's SigV4 headers for Bedrock against botocore's own SigV4Auth.add_auth path: the
same canonical request, string to sign and signature, for any model id (`:` and `/` included,
encoded as one path segment), body, region, path prefix and session token."""

from __future__ import annotations

import datetime as dt

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import given
from hypothesis import strategies as st

from catalog.snapshot import DeploymentInfo
from gateway.providers.bedrock import _Signer, model_path

model_ids = st.one_of(
    st.sampled_from(
        [
            "anthropic.claude-haiku-4-5-20251001-v1:0",
            "us.anthropic.claude-sonnet-4-6",
            "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/jf2sje1c0jnb",
        ]
    ),
    st.text("abcdefghijklmnopqrstuvwxyz0123456789.-_:/~", min_size=1, max_size=60),
)


def parse(head: str) -> dict[str, str]:
    lines = [line for line in head.split("\r\n") if line]
    return {k: v for k, v in (line.split(": ", 1) for line in lines)}


@given(
    model=model_ids,
    body=st.binary(max_size=3000),
    region=st.sampled_from(["us-east-1", "eu-central-2", "ap-southeast-2"]),
    prefix=st.sampled_from(["", "/proxy", "/a/b"]),
    token=st.sampled_from(["", "FQoGZXIvYXdzEJr//////////wEaDO+token="]),
    stream=st.booleans(),
)
def test_signatures_match_botocore(
    model: str, body: bytes, region: str, prefix: str, token: str, stream: bool
) -> None:
    secrets = {"aws_access_key_id": "AKIAEZATTESTKEY00001", "aws_secret_access_key": "s" * 40}
    if token:
        secrets["aws_session_token"] = token
    dep = DeploymentInfo(
        id=1,
        name="b",
        kind="bedrock",
        base_url="",
        api_key="",
        weight=1,
        max_concurrency=1,
        region=region,
        secrets=secrets,
    )
    accept = ("x-amzn-bedrock-accept", "application/json") if stream else ("accept", "*/*")
    path = f"{prefix}{model_path(model)}/invoke"
    when = dt.datetime(2026, 12, 1, 12, 34, 56, tzinfo=dt.UTC)
    ours = parse(_Signer(dep).headers(path, "bedrock.test:8443", body, accept, now=when))

    # botocore's add_auth, with its clock pinned to the same instant.
    request = AWSRequest(
        method="POST",
        url=f"https://bedrock.test:8443{path}",
        data=body,
        headers={"content-type": "application/json", accept[0]: accept[1]},
    )
    auth = SigV4Auth(
        Credentials(secrets["aws_access_key_id"], secrets["aws_secret_access_key"], token or None),
        "bedrock",
        region,
    )
    request.context["timestamp"] = "20261201T123456Z"
    request.headers["X-Amz-Date"] = "20261201T123456Z"
    if token:
        request.headers["X-Amz-Security-Token"] = token
    canonical = auth.canonical_request(request)
    string_to_sign = auth.string_to_sign(request, canonical)
    signature = auth.signature(string_to_sign, request)

    assert ours["x-amz-date"] == "20261201T123456Z"
    assert ours["authorization"].endswith(f"Signature={signature}")
    signed = ours["authorization"].split("SignedHeaders=", 1)[1].split(",", 1)[0]
    assert signed == auth.signed_headers(auth.headers_to_sign(request))
    assert ours.get("x-amz-security-token", "") == token
