"""How large a request body each platform kind accepts: the one place to look it up.

A body over the provider's limit is refused by the provider (Anthropic: 413 `request_too_large`
from its edge, before the API) after the gateway has done all its work, images downloaded
included. The gateway checks the exact upstream body against this table before sending and
answers 413 itself, with a message saying what is too large.

Kinds added later (Bedrock, Vertex) add their documented limit here; a kind missing from the
table gets the smallest limit known, so an unknown platform never receives an oversize body.
"""

from __future__ import annotations

# Anthropic API: "32 MB for standard endpoints" for Messages and count_tokens
# (https://platform.claude.com/docs/en/api/overview#request-size-limits, reference/protocol.md).
# Read as decimal megabytes, the stricter reading, so no body the edge refuses is sent.
MAX_REQUEST_BYTES: dict[str, int] = {
    "anthropic": 32_000_000,
    # Bedrock InvokeModel: the AWS user guide says "maximum size of the payload … 20MB", the
    # service model allows a 25,000,000-byte Body (reference/platforms-and-responses.md §1.2):
    # the stricter figure. Vertex documents none for rawPredict: it gets the smallest known.
    "bedrock": 20_000_000,
}


def max_request_bytes(kind: str) -> int:
    """The largest upstream body a deployment of this kind accepts."""
    limit = MAX_REQUEST_BYTES.get(kind)
    return limit if limit is not None else min(MAX_REQUEST_BYTES.values())


def too_large_message(size: int, kind: str, limit: int) -> str:
    return (
        f"the request is {size:,} bytes as sent to the provider (downloaded images included, "
        f"base64-encoded), over the {limit:,}-byte limit of the {kind} platform; send fewer or "
        "smaller images or documents"
    )
