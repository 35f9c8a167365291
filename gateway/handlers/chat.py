"""POST /openai/v1/chat/completions: translated to a Messages request and back.

The pipeline of the translated APIs (gateway/handlers/pipeline.py) runs it: admission, routing,
failover and billing as for /v1/messages. This module holds Chat Completions' hooks; translation
itself happens in the pure modules of gateway.protocols.openai.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import orjson

from accounts.keycache import KeyInfo
from catalog.snapshot import ModelInfo
from gateway.chain import ModelChain
from gateway.errors import GatewayError
from gateway.exchange import Exchange
from gateway.handlers.chat_relay import relay, relays
from gateway.handlers.pipeline import (
    After,
    Conversion,
    Diverted,
    Surface,
    auto_cache,
    openai_error_parts,
    serve,
)
from gateway.handlers.translated import caps, invalid
from gateway.http import ApiRequest, Send
from gateway.protocols.openai.inbound import (
    InvalidRequest,
    TranslatedRequest,
    attach_thinking,
    disable_thinking,
    translate_request,
)
from gateway.protocols.openai.outbound import thinking_blocks_by_tool_id, translate_response
from gateway.protocols.openai.stream import ChatStreamTranslator
from gateway.routing import has_thinking_signatures
from gateway.thinking_store import store as thinking_store


class _Chat(Conversion[TranslatedRequest]):
    """The chat request for the chain's models; besides the images, what only the first
    translation looked up: the stored thinking of its tool calls and the models that produced
    it, so another model's translation reuses them."""

    __slots__ = ("blocks", "org_id", "thinking_by")

    def __init__(self, body: dict[str, Any], auto_cache: bool, sent_len: int, org_id: int) -> None:
        super().__init__(body, auto_cache, sent_len)
        self.org_id = org_id
        self.blocks: dict[str, list[dict[str, Any]]] = {}  # stored thinking by tool call id
        self.thinking_by: set[str] = set()  # the models that produced it

    def translate(self, model: ModelInfo) -> TranslatedRequest:
        try:
            return translate_request(self.body, caps(model), auto_cache=self.auto_cache)
        except InvalidRequest as exc:
            raise invalid(exc) from None

    def sent_max_tokens(self, tr: TranslatedRequest) -> int | None:
        if self.body.get("max_completion_tokens") is None and self.body.get("max_tokens") is None:
            return None
        return int(tr.body["max_tokens"])

    async def restore(self, tr: TranslatedRequest) -> None:
        if not tr.tool_call_ids_needing_thinking:
            return
        stored = await thinking_store.lookup(self.org_id, tr.tool_call_ids_needing_thinking)
        self.blocks, self.thinking_by = stored.blocks, stored.models
        if not attach_thinking(tr.body, stored.blocks, tr.thinking):
            # The signed blocks are gone (expired, other process without Redis): the upstream
            # would refuse the turn, so this one request runs without thinking instead.
            disable_thinking(tr.body)

    def adapt(self, tr: TranslatedRequest, model: ModelInfo) -> None:
        # Signed thinking goes only to the model that produced it (this one, when the chain was
        # pinned to it; then the chain stops here): otherwise the blocks stay out, and a tool
        # loop whose thinking is not this model's runs without thinking.
        blocks = self.blocks if self.thinking_by == {model.id} else {}
        if not attach_thinking(tr.body, blocks, tr.thinking):
            disable_thinking(tr.body)


class ChatCompletions(Surface[TranslatedRequest, ChatStreamTranslator]):
    api = "chat"
    ping = ChatStreamTranslator.PING

    async def divert(
        self, key: KeyInfo, body: dict[str, Any], models: ModelChain
    ) -> Diverted | None:
        if not relays(models):
            return None

        # OpenAI-kind models only: relayed as sent, not translated (chat_relay.py says why).
        return partial(relay, models=models)

    async def conversion(
        self, request: ApiRequest, key: KeyInfo, body: dict[str, Any], models: list[ModelInfo]
    ) -> _Chat:
        return _Chat(body, auto_cache(request), len(request.body), key.org_id)

    def thinking_by(
        self, conv: Conversion[TranslatedRequest], tr: TranslatedRequest
    ) -> set[str] | None:
        assert isinstance(conv, _Chat)
        hint = orjson.dumps(tr.body) if tr.tool_call_ids_needing_thinking else b""
        return conv.thinking_by if has_thinking_signatures(hint) else None

    async def answer(
        self, exchange: Exchange, reply: dict[str, Any], tr: TranslatedRequest
    ) -> tuple[Any, After]:
        await thinking_store.put(
            exchange.key.org_id,
            thinking_blocks_by_tool_id(reply.get("content") or []),
            exchange.model.id,
        )
        completion = translate_response(
            reply,
            request_id=exchange.request_id,
            model_name=exchange.model_name,
            created=int(time.time()),
        )
        return completion, None

    def translator(
        self, exchange: Exchange, created: int, tr: TranslatedRequest
    ) -> ChatStreamTranslator:
        return ChatStreamTranslator(
            request_id=exchange.request_id,
            model_name=exchange.model_name,
            created=created,
            include_usage=tr.include_usage,
        )

    def stream_error(self, translator: ChatStreamTranslator, err: GatewayError) -> bytes:
        """`data: {"error": …}` then `data: [DONE]`: openai-python raises APIError on the first."""
        type_, code = openai_error_parts(err)
        return translator.error_chunk(err.message, type_, code) + ChatStreamTranslator.DONE

    async def stream_end(
        self, exchange: Exchange, translator: ChatStreamTranslator, tr: TranslatedRequest
    ) -> tuple[bytes, bytes, After]:
        blocks = translator.thinking_blocks_by_tool_id
        await thinking_store.put(exchange.key.org_id, blocks, exchange.model.id)
        return translator.usage_chunk(), ChatStreamTranslator.DONE, None


CHAT = ChatCompletions()


async def create_chat_completion(request: ApiRequest, send: Send) -> int:
    return await serve(request, send, CHAT)
