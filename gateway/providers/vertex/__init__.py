"""Claude on Google Vertex AI (rawPredict): URL, body, OAuth2 tokens, errors.

Reference §2 (the official SDK, Google's and Anthropic's docs):
- `POST {base}/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict`
  (JSON) or `:streamRawPredict` (SSE, the same events as Anthropic's API); count_tokens is
  `…/models/count-tokens:rawPredict` with the model id kept in the body.
- The body has `anthropic_version: vertex-2023-10-16` and no `model`; `stream` stays.
- Betas stay in the `anthropic-beta` header (Vertex checks them against its own list).
- `Authorization: Bearer <OAuth2 access token>` from a service-account key or Application
  Default Credentials (google-auth), scope cloud-platform.
- Platform errors come in Google's envelope (`{"error": {"code", "message", "status"}}`,
  sometimes inside a JSON array); model errors in Anthropic's.

Tokens are fetched once on first use, then refreshed in the background before they expire
(google_tokens.py here): no request waits for a refresh. A refresh that fails cools the
deployment down, so routing prefers the others while its token runs out.
"""

from __future__ import annotations

from typing import Any

import orjson

from catalog.platform_config import VERTEX_VERSION
from catalog.snapshot import DeploymentInfo
from gateway.errors import GatewayError, from_upstream
from gateway.protocols.anthropic.sse import SSEParser
from gateway.providers import COUNT_PATH, ProviderRequest, platform_body
from gateway.providers.vertex.google_tokens import tokens

GOOGLE_STATUS: dict[str, tuple[int, str]] = {
    "RESOURCE_EXHAUSTED": (429, "rate_limit_error"),
    "UNAVAILABLE": (529, "overloaded_error"),
    "DEADLINE_EXCEEDED": (504, "timeout_error"),
    "INTERNAL": (500, "api_error"),
    "INVALID_ARGUMENT": (400, "invalid_request_error"),
    "FAILED_PRECONDITION": (400, "invalid_request_error"),
    "NOT_FOUND": (404, "not_found_error"),
}


def model_base(deployment: DeploymentInfo) -> str:
    return (
        f"/projects/{deployment.project}/locations/{deployment.region}/publishers/anthropic/models/"
    )


class VertexProvider:
    async def prepare(
        self,
        deployment: DeploymentInfo,
        target: Any,
        path: str,
        body: bytes,
        beta: str | None,
        **call: Any,
    ) -> ProviderRequest:
        counting = path == COUNT_PATH
        data, stream, model = platform_body(
            body, VERTEX_VERSION, keep_model=counting, keep_stream=True
        )
        if counting:
            route = model_base(deployment) + "count-tokens:rawPredict"
        else:
            action = "streamRawPredict" if stream else "rawPredict"
            route = f"{model_base(deployment)}{model}:{action}"
        token = await tokens.token(deployment)
        head = f"content-type: application/json\r\nauthorization: Bearer {token}\r\n"
        if beta:
            head += f"anthropic-beta: {beta}\r\n"
        return ProviderRequest(route, head, orjson.dumps(data))

    def error(self, status: int, headers: dict[str, str], payload: bytes) -> GatewayError:
        if status in (401, 403):
            # The deployment's token or project permissions: its fault, not the caller's; a
            # 502 fails over to another deployment and counts toward this one's cooldown.
            return GatewayError(
                502, f"Vertex AI refused this deployment's credentials (HTTP {status})"
            )
        try:
            parsed = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return from_upstream(status, payload)
        if isinstance(parsed, list) and parsed:  # Google sometimes wraps its envelope
            parsed = parsed[0]
        error = parsed.get("error") if isinstance(parsed, dict) else None
        if isinstance(error, dict) and "status" in error and "type" not in error:
            mapped = GOOGLE_STATUS.get(str(error["status"]))
            message = str(error.get("message") or error["status"])
            if mapped is None:
                code = 529 if status == 503 else status
                return GatewayError(code, message)
            return GatewayError(mapped[0], message, type_=mapped[1])
        return from_upstream(status, payload)

    def decoder(self, state: Any) -> SSEParser:
        return SSEParser()

    def json_reply(self, path: str, payload: bytes, state: Any) -> bytes:
        return payload


PROVIDER = VertexProvider()
