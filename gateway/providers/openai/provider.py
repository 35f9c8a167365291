"""The OpenAI-compatible providers as the exchange calls them: OpenAI's API and any server that
speaks its Chat Completions (vLLM, Ollama, SGLang, llama.cpp, Groq, DeepSeek, Together, Gemini's
OpenAI endpoint), and Azure OpenAI's v1 API.

A Messages call (the internal dialect, gateway/dialect.py) is translated to Chat Completions
(request.py), and the answer back to Anthropic events or a Message (stream.py, reply.py), so
every client API and every gateway rule (holds, caps, routing, the request log) works on these
models unchanged. Chat Completions clients are not translated at all: they are relayed
(gateway/handlers/chat_relay.py), and so are Responses clients where the deployment has
`/responses` (gateway/handlers/responses_relay.py). count_tokens is answered here, without a
call (tokens.py).

Wire facts (docs/providers.md, with sources):
- `POST {base}/chat/completions`; `Authorization: Bearer KEY`, or no auth header for a keyless
  server (https://platform.openai.com/docs/api-reference/authentication);
- Azure OpenAI v1: `POST {endpoint}/openai/v1/chat/completions` with an `api-key` header
  (https://learn.microsoft.com/en-us/azure/ai-foundry/openai/reference-preview-latest).
"""

from __future__ import annotations

import functools

import orjson

from catalog.snapshot import DeploymentInfo, Route
from gateway.errors import GatewayError
from gateway.providers import COUNT_PATH, ProviderCall, ProviderRequest, StreamDecoder
from gateway.providers.openai.cache_key import derives_cache_key, tenant_cache_key
from gateway.providers.openai.errors import provider_error
from gateway.providers.openai.relay import RelayDecoder, RelayState
from gateway.providers.openai.reply import to_message
from gateway.providers.openai.request import ChatRequest, ChatTarget, UntranslatableRequest, to_chat
from gateway.providers.openai.responses_relay import (
    RESPONSES_PATH,
    ResponsesRelayDecoder,
    ResponsesRelayState,
)
from gateway.providers.openai.stream import ChatStreamDecoder

CHAT_PATH = "/chat/completions"


def chat_target(
    deployment: DeploymentInfo, route: Route | None, tenant: tuple[int, str] | None
) -> ChatTarget:
    return ChatTarget(
        max_tokens_param=deployment.options.get("max_tokens_param", "max_completion_tokens"),
        efforts=route.efforts if route is not None else (),
        default_effort=route.default_effort if route is not None else None,
        # A Messages request has no prompt_cache_key of its own: derived, or none at all.
        prompt_cache_key=tenant_cache_key(*tenant)
        if tenant is not None and derives_cache_key(deployment)
        else None,
    )


def request_headers(deployment: DeploymentInfo) -> str:
    """A call's header lines: the content type and what authenticates it to this deployment
    (nothing for a keyless one)."""
    return _headers(deployment.kind, deployment.api_key)


@functools.lru_cache(maxsize=256)
def _headers(kind: str, api_key: str) -> str:
    """A call's header lines, built once per deployment credential rather than per request."""
    if not api_key:
        return "content-type: application/json\r\n"
    if kind == "azure-openai":
        return f"content-type: application/json\r\napi-key: {api_key}\r\n"
    return f"content-type: application/json\r\nauthorization: Bearer {api_key}\r\n"


class OpenAIProvider:
    async def prepare(self, call: ProviderCall) -> ProviderRequest:
        deployment, path, body = call.deployment, call.path, call.body
        headers = request_headers(deployment)
        if path == CHAT_PATH:
            # A relayed Chat Completions call (gateway/handlers/chat_relay.py): the body is the
            # client's, already made ready for this route.
            return ProviderRequest(CHAT_PATH, headers, body, RelayState(len(body) // 4))
        if path == RESPONSES_PATH:
            # A relayed Responses call (gateway/handlers/responses_relay.py), likewise.
            return ProviderRequest(path, headers, body, ResponsesRelayState(len(body) // 4))
        try:
            translated = to_chat(
                orjson.loads(body), chat_target(deployment, call.route, call.tenant)
            )
        except UntranslatableRequest as exc:
            raise GatewayError(400, exc.message, param=exc.param) from None
        return ProviderRequest(CHAT_PATH, headers, orjson.dumps(translated.body), translated)

    def local_reply(self, path: str, body: bytes) -> bytes | None:
        """count_tokens is counted here: a Chat Completions server has no such endpoint."""
        if path != COUNT_PATH:
            return None
        from gateway.providers.openai.tokens import count_input_tokens  # its tokenizer, lazily

        data = orjson.loads(body)
        return orjson.dumps({"input_tokens": count_input_tokens(data, str(data.get("model")))})

    def error(self, status: int, headers: dict[str, str], payload: bytes) -> GatewayError:
        return provider_error(status, headers, payload)

    def decoder(self, state: ChatRequest | RelayState | ResponsesRelayState) -> StreamDecoder:
        if isinstance(state, RelayState):
            return RelayDecoder(state.input_estimate)
        if isinstance(state, ResponsesRelayState):
            return ResponsesRelayDecoder(state.input_estimate)
        return ChatStreamDecoder(
            model=str(state.body.get("model")),
            tool_names=state.tool_names,
            thinking=state.thinking,
            input_estimate=state.input_estimate,
        )

    def json_reply(
        self, path: str, payload: bytes, state: ChatRequest | RelayState | ResponsesRelayState
    ) -> bytes:
        if isinstance(state, RelayState | ResponsesRelayState):
            return payload
        try:
            reply = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise GatewayError(
                502, "the provider answered with something that is not JSON"
            ) from None
        message = to_message(
            reply,
            model=str(state.body.get("model")),
            tool_names=state.tool_names,
            thinking=state.thinking,
        )
        return orjson.dumps(message)


OPENAI = OpenAIProvider()
