"""Types shared by the Responses API translators (inbound, outbound, stream)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gateway.protocols.media import MediaTally
from gateway.protocols.openai.types import ImageRef

# (blob, param) -> the thinking block sealed in it; raises InvalidRequest naming `param`.
Unseal = Callable[[str, str], dict[str, Any]]
# thinking block -> the opaque `encrypted_content` a stateless client carries.
Seal = Callable[[dict[str, Any]], str]

# Built-in (hosted) tools of the Responses API. None runs here: each is refused by name, but
# web search is dropped and custom/namespace tools are translated (tools.py).
# Source: openai-python v3.3.1 `types/responses/tool_param.py` (platforms-and-responses.md §4.1).
BUILT_IN_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "computer",
        "computer_use_preview",
        "computer_use",
        "image_generation",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "custom",
        "tool_search",
        "namespace",
    }
)

ENCRYPTED_REASONING = "reasoning.encrypted_content"


@dataclass(frozen=True, slots=True)
class ToolName:
    """How a call to an upstream tool goes back to the client: its name within its namespace
    (None: a top-level tool), and whether it is a custom tool (a `custom_tool_call` item)."""

    name: str
    namespace: str | None
    custom: bool


# Upstream tool name -> its client-side name; only namespaced and custom tools are in it.
ToolMap = dict[str, ToolName]


class Rendering(NamedTuple):
    """What a Responses answer is rendered with, the reply's translation (outbound.py) and the
    stream's (stream.py) alike: the response's identity, the request fields it echoes, how its
    reasoning is sealed and shown, and how calls to namespaced and custom tools are returned.
    A NamedTuple: built on every request, cheaper than a frozen dataclass's __init__."""

    request_id: str
    model_name: str
    created_at: int
    echo: dict[str, Any]
    seal: Seal | None
    summary: bool
    include_encrypted: bool
    tools: ToolMap | None = None


@dataclass(slots=True)
class TranslatedResponsesRequest:
    """One Responses request as a Messages body, plus what the answer must echo or keep."""

    body: dict[str, Any]  # Anthropic Messages body without "model"
    stream: bool
    store: bool
    include_encrypted: bool  # include: ["reasoning.encrypted_content"]
    summary: bool  # reasoning.summary asked for: thinking text is returned as summary_text
    session_hint: str | None
    reasoning_effort: str | None  # effective level (x-ezat-reasoning-effort), None if not sent
    thinking: bool
    # The response object's request-echo fields (instructions, tools, text, reasoning, ...).
    echo: dict[str, Any]
    # The conversation so far as Responses input items (previous response's context, then this
    # request's input with item references resolved): what a stored response keeps.
    items: list[dict[str, Any]]
    images: list[ImageRef] = field(default_factory=list)
    # Inline media (data URLs) validated and bounded; image URLs are bounded once downloaded.
    media: MediaTally = field(default_factory=MediaTally)
    # Assistant tool_use turns that carried no reasoning: with thinking on, the gateway turns
    # thinking off for this request rather than let the upstream refuse it.
    tool_turn_without_thinking: bool = False
    # How calls to namespaced and custom tools are returned (see tools.py).
    tool_map: ToolMap = field(default_factory=dict)
    # Hosted tools left out of the request (x-ezat-dropped-tools), e.g. ["web_search"].
    dropped_tools: list[str] = field(default_factory=list)
