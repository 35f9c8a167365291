"""Claude on Anthropic's own API: the request as the client's body, with EZAT's key.

Anthropic's API is EZAT's internal dialect, so nothing is translated: the body goes as it is,
the stream is split into events by the SSE parser, the reply passes as it came.
"""

from __future__ import annotations

from gateway.providers import AnthropicAnswers, ProviderCall, ProviderRequest

ANTHROPIC_VERSION = "2023-06-01"


class AnthropicProvider(AnthropicAnswers):
    async def prepare(self, call: ProviderCall) -> ProviderRequest:
        beta = call.beta
        headers = (
            f"x-api-key: {call.deployment.api_key}\r\n"
            f"anthropic-version: {ANTHROPIC_VERSION}\r\n"
            "content-type: application/json\r\n"
        )
        if beta:
            headers += f"anthropic-beta: {beta}\r\n"
        return ProviderRequest(call.path, headers, call.body)


PROVIDER = AnthropicProvider()
