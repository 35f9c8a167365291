"""The simulator as Claude on Amazon Bedrock or Google Vertex AI.

`--platform bedrock` / `--platform vertex` put the platform's front in front of the same model
simulation (replies, prompt cache, faults) the Anthropic API simulation uses. The front verifies
what the real platform verifies (reference/platforms-and-responses.md §1–§2):

- Bedrock: `POST /model/{modelId}/invoke | invoke-with-response-stream | count-tokens`; a SigV4
  signature (service `bedrock`, the configured region and secret; recomputed with botocore) or a
  Bedrock API key as Bearer; `anthropic_version: bedrock-2023-05-31`; no `model`, no `stream`
  (Bedrock's "extraneous key" 400); errors as `{"message"}` + `x-amzn-ErrorType`; the stream as
  `application/vnd.amazon.eventstream` chunk events, the last one with invocation metrics, and
  faults as exception messages (rate_limit_error → throttlingException, overloaded_error →
  serviceUnavailableException, api_error → modelStreamErrorException, invalid_request_error →
  validationException); `bad_crc_after_events` sends a frame with a broken CRC.
- Vertex: `POST /v1/projects/{p}/locations/{r}/publishers/anthropic/models/{m}:rawPredict |
  :streamRawPredict`, `…/models/count-tokens:rawPredict`; a bearer token this simulator issued at
  its own OAuth2 token endpoint (`POST /token`, the JWT-bearer grant of a service-account key whose
  `token_uri` points here, signature checked with the key's public half); `anthropic_version:
  vertex-2023-10-16`; no `model` (count-tokens keeps it); Google's error envelope for its own
  refusals; the stream is Anthropic's SSE.
"""

from __future__ import annotations

import base64
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import orjson
from aiohttp import web

from simulator.errors import DEFAULT_MESSAGES

BEDROCK_VERSION = "bedrock-2023-05-31"
VERTEX_VERSION = "vertex-2023-10-16"


@dataclass(slots=True)
class PlatformSim:
    platform: str = "anthropic"
    region: str = "us-east-1"
    project: str = "ezat-sim-project"
    aws_access_key_id: str = ""
    aws_secret_access_key: str = ""
    # Temporary credentials: when set, requests must carry it as x-amz-security-token.
    aws_session_token: str = ""
    bedrock_api_key: str = ""
    # Vertex: the service account whose JWTs the token endpoint accepts.
    client_email: str = ""
    public_key: Any = None
    token_ttl: int = 3600
    token_fail: bool = False
    tokens: dict[str, float] = field(default_factory=dict)
    tokens_issued: int = 0
    # The OpenAI-compatible front (simulator/openai_front.py), on every platform.
    openai_auth: str = "required"
    openai_flavour: str = "openai"
    openai_reasoning_field: str = "reasoning_content"


# Allowed values of the OpenAI front's settings (POST /_sim/platform), the first the default
# that POST /_sim/reset restores.
OPENAI_SETTINGS: dict[str, tuple[str, ...]] = {
    "openai_auth": ("required", "none"),
    "openai_flavour": ("openai", "vllm"),
    "openai_reasoning_field": ("reasoning_content", "reasoning"),
}


PLATFORM = web.AppKey("ezat_simulator_platform", PlatformSim)

# Bedrock and Vertex ids back to the model names the simulation knows (its rules are per model).
_BEDROCK_PREFIX = re.compile(r"^(?:(?:us|eu|apac|jp|au|global|us-gov)\.)?(?:anthropic\.)?")
_BEDROCK_SUFFIX = re.compile(r"(?:-\d{8})?-v\d+(?::\d+)?$")


def reset_openai_settings(sim: PlatformSim) -> None:
    for name, allowed in OPENAI_SETTINGS.items():
        setattr(sim, name, allowed[0])


def bedrock_model(model_id: str) -> str:
    return _BEDROCK_SUFFIX.sub("", _BEDROCK_PREFIX.sub("", model_id, count=1))


def vertex_model(model_id: str) -> str:
    return model_id.split("@", 1)[0]


# --- service accounts (Vertex) -------------------------------------------------------------------
def make_service_account(token_uri: str, project: str) -> dict[str, str]:
    """A fresh service-account key file for the simulator's token endpoint (tests, make run)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return {
        "type": "service_account",
        "project_id": project,
        "private_key_id": secrets.token_hex(20),
        "private_key": pem,
        "client_email": f"ezat-sim@{project}.iam.gserviceaccount.com",
        "client_id": str(secrets.randbelow(10**20)),
        "token_uri": token_uri,
    }


def trust_service_account(sim: PlatformSim, info: dict[str, str]) -> None:
    from cryptography.hazmat.primitives import serialization

    private = serialization.load_pem_private_key(info["private_key"].encode(), password=None)
    sim.public_key = private.public_key()
    sim.client_email = info["client_email"]


def load_or_write_service_account(sim: PlatformSim, path: str, token_uri: str) -> None:
    """Trust the key file at `path`; write a new one there (token_uri: here) if it is missing."""
    file = Path(path)
    if file.exists():
        info = json.loads(file.read_text())
    else:
        info = make_service_account(token_uri, sim.project)
        file.write_text(json.dumps(info, indent=2))
        file.chmod(0o600)
    trust_service_account(sim, info)


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


async def handle_token(request: web.Request) -> web.Response:
    """OAuth2 token endpoint: the JWT-bearer grant (RFC 7523) google-auth sends."""
    sim = request.app[PLATFORM]
    form = parse_qs((await request.read()).decode())
    assertion = (form.get("assertion") or [""])[0]
    if sim.token_fail:
        return _oauth_error(503, "temporarily_unavailable", "token endpoint failing (scripted)")
    try:
        head, payload, signature = assertion.split(".")
        claims = json.loads(_b64url(payload))
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        sim.public_key.verify(
            _b64url(signature), f"{head}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256()
        )
    except Exception:  # noqa: BLE001 — any malformed or unverifiable assertion is a refusal
        return _oauth_error(400, "invalid_grant", "Invalid JWT Signature.")
    if claims.get("iss") != sim.client_email or claims.get("exp", 0) < time.time():
        return _oauth_error(400, "invalid_grant", "Invalid JWT: wrong issuer or expired.")
    token = "ya29.sim-" + secrets.token_urlsafe(24)
    sim.tokens[token] = time.time() + sim.token_ttl
    sim.tokens_issued += 1
    return web.json_response(
        {"access_token": token, "expires_in": sim.token_ttl, "token_type": "Bearer"}
    )


def _oauth_error(status: int, error: str, description: str) -> web.Response:
    return web.json_response({"error": error, "error_description": description}, status=status)


def _google_error(status: int, state: str, message: str) -> web.Response:
    body = {"error": {"code": status, "message": message, "status": state}}
    return web.json_response(body, status=status)


def vertex_authorized(sim: PlatformSim, request: web.Request) -> bool:
    auth = request.headers.get("authorization", "")
    token = auth[7:] if auth[:7].lower() == "bearer " else ""
    expires = sim.tokens.get(token)
    return expires is not None and expires > time.time()


# --- SigV4 (Bedrock) ---------------------------------------------------------------------------
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<akid>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, ?SignedHeaders=(?P<signed>[^,]+), ?"
    r"Signature=(?P<sig>[0-9a-f]+)$"
)


def sigv4_problem(sim: PlatformSim, request: web.Request, body: bytes) -> str | None:
    """Why the request's SigV4 signature is not valid for the configured secret; None if it is."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    match = _AUTH.match(request.headers.get("authorization", ""))
    if match is None:
        return "Authorization header is not AWS4-HMAC-SHA256"
    if match["akid"] != sim.aws_access_key_id:
        return "The security token included in the request is invalid."
    if match["service"] != "bedrock" or match["region"] != sim.region:
        return f"Credential should be scoped to a valid region and service bedrock ({sim.region})"
    given_token = request.headers.get("x-amz-security-token", "")
    if sim.aws_session_token and not hmac.compare_digest(given_token, sim.aws_session_token):
        return "The security token included in the request is invalid."
    amz_date = request.headers.get("x-amz-date", "")
    signed = match["signed"].split(";")
    headers = {name: request.headers.get(name, "") for name in signed}
    aws = AWSRequest(
        method=request.method, url=f"http://{request.host}{request.raw_path}", data=body
    )
    for name, value in headers.items():
        aws.headers[name] = value
    aws.context["timestamp"] = amz_date
    token = request.headers.get("x-amz-security-token")
    signer = SigV4Auth(
        Credentials(sim.aws_access_key_id, sim.aws_secret_access_key, token), "bedrock", sim.region
    )
    canonical = signer.canonical_request(aws)
    expected = signer.signature(signer.string_to_sign(aws, canonical), aws)
    if not hmac.compare_digest(expected, match["sig"]):
        return (
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method."
        )
    return None


def bedrock_authorized(sim: PlatformSim, request: web.Request, body: bytes) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        if sim.bedrock_api_key and hmac.compare_digest(auth[7:], sim.bedrock_api_key):
            return None
        return "Invalid API Key format: Must start with pre-defined prefix"
    if not sim.aws_access_key_id:
        return "Authorization header requires a Bedrock API key"
    return sigv4_problem(sim, request, body)


# Anthropic error type (what the simulation produces) → Bedrock exception and HTTP status.
BEDROCK_EXCEPTIONS: dict[str, tuple[str, int]] = {
    "rate_limit_error": ("ThrottlingException", 429),
    "overloaded_error": ("ServiceUnavailableException", 503),
    "api_error": ("InternalServerException", 500),
    "invalid_request_error": ("ValidationException", 400),
    "authentication_error": ("AccessDeniedException", 403),
    "permission_error": ("AccessDeniedException", 403),
    "not_found_error": ("ResourceNotFoundException", 404),
    "request_too_large": ("ValidationException", 400),
    "timeout_error": ("ModelTimeoutException", 408),
}
STREAM_EXCEPTIONS: dict[str, str] = {
    "rate_limit_error": "throttlingException",
    "overloaded_error": "serviceUnavailableException",
    "api_error": "modelStreamErrorException",
    "invalid_request_error": "validationException",
    "timeout_error": "modelTimeoutException",
}


def bedrock_error(status: int, exception: str, message: str) -> web.Response:
    return web.json_response(
        {"message": message},
        status=status,
        headers={
            "x-amzn-ErrorType": f"{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/"
        },
    )


def bedrock_from_anthropic(response: web.StreamResponse) -> web.StreamResponse:
    """An Anthropic-envelope error from the simulation, as Bedrock would have answered it."""
    if response.status == 200 or not isinstance(response, web.Response):
        return response
    try:
        error = orjson.loads(response.body or b"{}").get("error") or {}  # type: ignore[arg-type]
    except orjson.JSONDecodeError:
        error = {}
    error_type = str(error.get("type") or "api_error")
    exception, status = BEDROCK_EXCEPTIONS.get(error_type, ("InternalServerException", 500))
    message = str(error.get("message") or DEFAULT_MESSAGES.get(error_type, "Error"))
    return bedrock_error(status, exception, message)


async def platform_control(request: web.Request) -> web.Response:
    """GET: the front's state; POST {"token_ttl", "token_fail", "revoke_tokens", "openai_auth",
    "openai_flavour", "openai_reasoning_field"} changes it."""
    sim = request.app[PLATFORM]
    if request.method == "POST":
        try:
            change = orjson.loads(await request.read() or b"{}")
        except orjson.JSONDecodeError:
            return web.json_response({"error": "body must be JSON"}, status=400)
        if not isinstance(change, dict):
            return web.json_response({"error": "body must be a JSON object"}, status=400)
        if "token_ttl" in change:
            sim.token_ttl = int(change["token_ttl"])
        if "token_fail" in change:
            sim.token_fail = bool(change["token_fail"])
        for name, allowed in OPENAI_SETTINGS.items():
            if name in change and change[name] not in allowed:
                text = f"{name} must be one of: {', '.join(allowed)}"
                return web.json_response({"error": text}, status=400)
        # Settings first checked, then applied: a bad one leaves the front unchanged.
        for name in OPENAI_SETTINGS:
            if name in change:
                setattr(sim, name, change[name])
        if change.get("revoke_tokens"):
            sim.tokens.clear()
    return web.json_response(
        {
            "platform": sim.platform,
            "region": sim.region,
            "project": sim.project,
            "tokens_issued": sim.tokens_issued,
            "token_ttl": sim.token_ttl,
            "token_fail": sim.token_fail,
            **{name: getattr(sim, name) for name in OPENAI_SETTINGS},
        }
    )
