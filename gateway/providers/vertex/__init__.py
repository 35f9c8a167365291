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

import orjson

from catalog.platform_config import VERTEX_VERSION
from catalog.snapshot import DeploymentInfo
from gateway.errors import GatewayError, from_upstream
from gateway.providers import COUNT_PATH, AnthropicAnswers, ProviderCall, ProviderRequest
from gateway.providers.platforms import Status, credentials_refused, platform_body, platform_error
from gateway.providers.vertex.google_tokens import tokens

GOOGLE_STATUS: dict[str, tuple[int, str]] = {
    "RESOURCE_EXHAUSTED": Status.RATE_LIMITED,
    "UNAVAILABLE": Status.OVERLOADED,
    "DEADLINE_EXCEEDED": Status.TIMED_OUT,
    "INTERNAL": Status.SERVER_ERROR,
    "INVALID_ARGUMENT": Status.INVALID_REQUEST,
    "FAILED_PRECONDITION": Status.INVALID_REQUEST,
    "NOT_FOUND": Status.NOT_FOUND,
}


def model_base(deployment: DeploymentInfo) -> str:
    return (
        f"/projects/{deployment.project}/locations/{deployment.region}/publishers/anthropic/models/"
    )


class VertexProvider(AnthropicAnswers):
    async def prepare(self, call: ProviderCall) -> ProviderRequest:
        deployment, beta = call.deployment, call.beta
        counting = call.path == COUNT_PATH
        data, stream, model = platform_body(
            call.body, VERTEX_VERSION, keep_model=counting, keep_stream=True
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
        if status in (401, 403):  # the deployment's token or project permissions
            return credentials_refused("Vertex AI", f"HTTP {status}")
        try:
            parsed = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return from_upstream(status, payload)
        if isinstance(parsed, list) and parsed:  # Google sometimes wraps its envelope
            parsed = parsed[0]
        error = parsed.get("error") if isinstance(parsed, dict) else None
        if isinstance(error, dict) and "status" in error and "type" not in error:
            message = str(error.get("message") or error["status"])
            return platform_error(GOOGLE_STATUS.get(str(error["status"])), status, message)
        return from_upstream(status, payload)


PROVIDER = VertexProvider()
