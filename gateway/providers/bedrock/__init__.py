"""Claude on Amazon Bedrock (InvokeModel): URL, body, SigV4 or API-key auth, errors, framing.

Reference §1 (botocore's service model, the AWS docs, the official SDK):
- `POST /model/{modelId}/invoke` and `/invoke-with-response-stream`; count_tokens is
  `POST /model/{modelId}/count-tokens` with the InvokeModel body base64-encoded inside
  `{"input": {"invokeModel": {"body": …}}}`, answered `{"inputTokens": N}`.
- The body has `anthropic_version: bedrock-2023-05-31`, no `model`, no `stream`; betas go in
  the body as `anthropic_beta` (Bedrock refuses extraneous keys, and betas sent only as a header
  were reported not to take effect).
- The model id is one percent-encoded path segment, as botocore encodes it (`:` → `%3A`,
  `/` → `%2F`); SigV4 then encodes the path once more in its canonical request.
- Authentication: a Bedrock API key as `Authorization: Bearer`, or SigV4 (service `bedrock`)
  over the deployment's keys or botocore's standard AWS credential chain. The signing key and
  the signature are botocore's (`SigV4Auth.signature`); the canonical request is built here, the
  way botocore's SigV4Auth builds it, because its request machinery (AWSRequest, header objects
  on email.message) cost ~260 µs per request on the bench machine against a whole Anthropic-kind
  request of ~1.5 ms (target: Bedrock ≤ 1.3×).
tests/gateway/providers/test_bedrock_signing.py checks every
  signature against botocore's own add_auth path (hypothesis), and the simulator verifies them
  with botocore on every e2e request.
- Errors: `{"message": …}` with the exception name in `x-amzn-ErrorType`; throttling is a 429,
  unavailability (ServiceUnavailable, ModelNotReady) is overloaded (529 → 503 on OpenAI's API).

This module imports botocore, and is itself imported only when a Bedrock deployment is used.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import logging
import threading
from typing import Any
from urllib.parse import quote

import orjson
from botocore.auth import SigV4Auth
from botocore.credentials import Credentials, ReadOnlyCredentials, RefreshableCredentials
from botocore.exceptions import BotoCoreError
from botocore.utils import normalize_url_path

from catalog.platform_config import BEDROCK_VERSION
from catalog.snapshot import DeploymentInfo
from gateway.errors import GatewayError
from gateway.providers import COUNT_PATH, PlatformAuthError, ProviderCall, ProviderRequest
from gateway.providers.bedrock.eventstream import BedrockStreamDecoder
from gateway.providers.platforms import Status, credentials_refused, platform_body, platform_error

logger = logging.getLogger(__name__)

SERVICE = "bedrock"  # the signing name, not the endpoint prefix bedrock-runtime

# Exception name → (status the gateway reports, Anthropic error type).
ERRORS: dict[str, tuple[int, str]] = {
    "ThrottlingException": Status.RATE_LIMITED,
    "ModelNotReadyException": Status.OVERLOADED,
    "ServiceUnavailableException": Status.OVERLOADED,
    "ModelStreamErrorException": Status.OVERLOADED,
    "InternalServerException": Status.SERVER_ERROR,
    "ModelErrorException": Status.SERVER_ERROR,
    "ModelTimeoutException": Status.TIMED_OUT,
    "ValidationException": Status.INVALID_REQUEST,
    "ServiceQuotaExceededException": Status.RATE_LIMITED,
    "ResourceNotFoundException": Status.NOT_FOUND,
}
# Refusals of the deployment's own credentials: the deployment's fault, not the caller's, so a
# 502 that another deployment may not share (it fails over and counts toward a cooldown).
CREDENTIAL_ERRORS = frozenset(
    {
        "AccessDeniedException",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "ExpiredTokenException",
        "IncompleteSignatureException",
    }
)


def model_path(model_id: str) -> str:
    """`/model/{id}` with the id as one segment, encoded as botocore encodes a URI label."""
    return "/model/" + quote(model_id, safe="-._~")


class _Signer:
    """SigV4 for one deployment: its own keys, or the standard chain (refreshable creds)."""

    def __init__(self, deployment: DeploymentInfo) -> None:
        secrets = deployment.secrets
        self.region = deployment.region
        self._static: ReadOnlyCredentials | None = None
        self._chain: Any = None
        if secrets.get("aws_access_key_id"):
            self._static = Credentials(
                secrets["aws_access_key_id"],
                secrets["aws_secret_access_key"],
                secrets.get("aws_session_token") or None,
            ).get_frozen_credentials()
        self._lock = threading.Lock()

    def _resolve(self) -> ReadOnlyCredentials:
        """The chain's current credentials (blocking: botocore reads files, runs a
        credential_process, or calls STS or the instance/container metadata endpoints)."""
        try:
            if self._chain is None:
                with self._lock:
                    if self._chain is None:
                        import botocore.session

                        self._chain = botocore.session.get_session().get_credentials()
            if self._chain is None:
                raise PlatformAuthError("no AWS credentials found in the standard chain")
            # Refreshable credentials (role, web identity, SSO, credential_process, container)
            # refresh themselves here when they are close to expiring: read on every request.
            frozen: ReadOnlyCredentials = self._chain.get_frozen_credentials()
        except BotoCoreError as exc:  # a missing profile, a failing credential_process, …
            raise PlatformAuthError(f"AWS credential chain: {exc}") from exc
        return frozen

    async def ready(self) -> None:
        """Resolve the chain, or refresh its credentials when due, in a worker thread, so the
        blocking providers never stall the event loop; `credentials()` then only reads."""
        if self._static is not None:
            return
        chain = self._chain
        if chain is None or (isinstance(chain, RefreshableCredentials) and chain.refresh_needed()):
            await asyncio.to_thread(self._resolve)

    def credentials(self) -> ReadOnlyCredentials:
        if self._static is not None:
            return self._static
        return self._resolve()

    def headers(
        self,
        path: str,
        host: str,
        body: bytes,
        accept: tuple[str, str],
        now: dt.datetime | None = None,
    ) -> str:
        """The request's headers with its SigV4 signature (the canonical request as botocore's
        SigV4Auth builds it; the key derivation and HMAC are botocore's own)."""
        creds = self.credentials()
        amz_date = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
        headers = {
            accept[0]: accept[1],
            "content-type": "application/json",
            "host": host,
            "x-amz-date": amz_date,
        }
        if creds.token:
            headers["x-amz-security-token"] = creds.token
        names = sorted(headers)
        signed = ";".join(names)
        canonical = "POST\n{}\n\n{}\n{}\n{}".format(
            quote(normalize_url_path(path), safe="/~"),
            "".join(f"{n}:{' '.join(headers[n].split())}\n" for n in names),
            signed,
            hashlib.sha256(body).hexdigest(),
        )
        scope = f"{amz_date[:8]}/{self.region}/{SERVICE}/aws4_request"
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        string_to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{digest}"
        signature = SigV4Auth(creds, SERVICE, self.region).signature(
            string_to_sign, _Timestamped(amz_date)
        )
        del headers["host"]  # the client writes it
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature}"
        )
        return "".join(f"{n}: {v}\r\n" for n, v in headers.items())


class _Timestamped:
    """What SigV4Auth.signature reads from a request: the signing time."""

    __slots__ = ("context",)

    def __init__(self, amz_date: str) -> None:
        self.context = {"timestamp": amz_date}


class BedrockProvider:
    def __init__(self) -> None:
        self._signers: dict[tuple[int, str, str, str, str], _Signer] = {}

    def _signer(self, deployment: DeploymentInfo) -> _Signer:
        # Keyed by the credentials too: an operator's new secret takes effect with the snapshot.
        secrets = deployment.secrets
        key = (
            deployment.id,
            deployment.region,
            secrets.get("aws_access_key_id", ""),
            secrets.get("aws_secret_access_key", ""),
            secrets.get("aws_session_token", ""),
        )
        signer = self._signers.get(key)
        if signer is None:
            signer = self._signers[key] = _Signer(deployment)
        return signer

    async def prepare(self, call: ProviderCall) -> ProviderRequest:
        deployment, target, path, beta = call.deployment, call.target, call.path, call.beta
        data, stream, model = platform_body(
            call.body, BEDROCK_VERSION, keep_model=False, keep_stream=False
        )
        if beta:
            data.setdefault("anthropic_beta", [b.strip() for b in beta.split(",") if b.strip()])
        invoke = orjson.dumps(data)
        if path == COUNT_PATH:
            data.pop("anthropic_beta", None)
            inner = base64.b64encode(orjson.dumps(data)).decode()
            payload = orjson.dumps({"input": {"invokeModel": {"body": inner}}})
            route = f"{model_path(str(model))}/count-tokens"
            accept = ("accept", "application/json")
        else:
            payload = invoke
            action = "invoke-with-response-stream" if stream else "invoke"
            route = f"{model_path(str(model))}/{action}"
            # The streaming operation names the payload's type in its own header (reference §1.2).
            accept = (
                ("x-amzn-bedrock-accept", "application/json")
                if stream
                else (
                    "accept",
                    "application/json",
                )
            )
        if deployment.api_key:
            head = (
                f"{accept[0]}: {accept[1]}\r\ncontent-type: application/json\r\n"
                f"authorization: Bearer {deployment.api_key}\r\n"
            )
        else:
            signer = self._signer(deployment)
            await signer.ready()
            head = signer.headers(
                f"{target.path_prefix}{route}", target.host_header, payload, accept
            )
        return ProviderRequest(route, head, payload)

    def error(self, status: int, headers: dict[str, str], payload: bytes) -> GatewayError:
        name = headers.get("x-amzn-errortype", "").split(":", 1)[0]
        try:
            parsed = orjson.loads(payload)
            message = str(parsed.get("message") or parsed.get("Message") or "")
        except (orjson.JSONDecodeError, AttributeError):
            message = ""
        if name in CREDENTIAL_ERRORS or status in (401, 403):
            return credentials_refused("Bedrock", str(name or status), message)
        mapped = ERRORS.get(name)
        fallback = name if mapped is not None else f"Bedrock answered HTTP {status}"
        return platform_error(mapped, status, message or fallback)

    def decoder(self, state: Any) -> BedrockStreamDecoder:
        return BedrockStreamDecoder()

    def json_reply(self, path: str, payload: bytes, state: Any) -> bytes:
        if path != COUNT_PATH:
            return payload
        try:
            count = orjson.loads(payload)["inputTokens"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise GatewayError(502, "Bedrock answered count-tokens without inputTokens") from None
        return orjson.dumps({"input_tokens": count})


PROVIDER = BedrockProvider()
