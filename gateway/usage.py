"""Anthropic usage as it accumulates over a stream or arrives in a reply, and the token counts
billed from it. Pure: no Django, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from catalog.pricing import TokenCounts

if TYPE_CHECKING:
    from catalog.snapshot import ModelInfo


@dataclass(slots=True)
class UsageTracker:
    """Anthropic usage as it accumulates over a stream or arrives in a reply."""

    usage: dict[str, Any] = field(default_factory=dict)
    output_chars: int = 0
    exact: bool = False
    stop_reason: str = ""  # from message_delta: the request log's finish reason

    def absorb(self, event_type: str, data: dict[str, Any]) -> None:
        if event_type == "content_block_delta":
            delta = data.get("delta") or {}
            text = delta.get("text") or delta.get("partial_json") or delta.get("thinking")
            if text:
                self.output_chars += len(text)
        elif event_type == "message_start":
            self.usage.update((data.get("message") or {}).get("usage") or {})
        elif event_type == "message_delta":
            self.usage.update(data.get("usage") or {})
            self.exact = True
            stop = (data.get("delta") or {}).get("stop_reason")
            if isinstance(stop, str):
                self.stop_reason = stop

    def tokens(self, model: ModelInfo) -> TokenCounts:
        u = self.usage
        output = int(u.get("output_tokens") or 0)
        if not self.exact:
            # The upstream's final count never arrived: estimate from what was produced.
            output = max(output, -(-self.output_chars // 4))
        creation = int(u.get("cache_creation_input_tokens") or 0)
        split = u.get("cache_creation") or {}
        write_1h = int(split.get("ephemeral_1h_input_tokens") or 0)
        write_5m = creation - write_1h if creation >= write_1h else 0
        read = int(u.get("cache_read_input_tokens") or 0)
        input_tokens = int(u.get("input_tokens") or 0)
        if not model.prompt_caching:
            # Breakpoints were stripped for this model; anything cache-ish is plain input.
            input_tokens += read + write_5m + write_1h
            read = write_5m = write_1h = 0
        details = u.get("output_tokens_details") or {}
        reasoning = min(int(details.get("thinking_tokens") or 0), output)
        return TokenCounts(
            input=input_tokens,
            output=output,
            cache_read=read,
            cache_write_5m=write_5m,
            cache_write_1h=write_1h,
            reasoning=reasoning,
        )
