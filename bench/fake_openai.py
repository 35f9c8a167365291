"""The fake upstream's OpenAI Chat Completions answers (`POST /v1/chat/completions`).

Issue 30 item 11 compares the gateway's OpenAI-kind paths with its Claude path on the SAME fake
upstream process, so these replies are built the way bench/fake_upstream.py builds its
`/v1/messages` ones: prebuilt bytes, the body never JSON-parsed (`stream`, `model`, the output
limit and `stream_options.include_usage` found with `bytes.find`), and the same number of text
deltas per request, K = min(limit, --events), each one "token" (`tok `), so a chat stream and a
Messages stream of the same request carry the same tokens and their costs compare.

Shape (OpenAI's, as simulator/openai_render.py renders it):
- JSON: one `chat.completion` with the K tokens as the message content and the usage
  (`prompt_tokens` = body bytes // 4, as /v1/messages counts, `completion_tokens` = K);
- stream: `chat.completion.chunk` SSE (`data: {...}` lines, no `event:` lines): a role chunk
  with empty content, K content chunks, a chunk with the finish reason, then (only with
  `stream_options.include_usage`) a chunk with `choices: []` and the usage, and `data: [DONE]`.
  With include_usage every other chunk carries `"usage": null`, as OpenAI's do.
The output limit is `max_completion_tokens` (what EZAT's translation sends) or `max_tokens`
(what a relayed client may send).
"""

from __future__ import annotations

import itertools
import re
from typing import Protocol

_MAX_RE = re.compile(rb'"(?:max_completion_tokens|max_tokens)"\s*:\s*(\d{1,9})')
_MODEL_RE = re.compile(rb'"model"\s*:\s*"([^"\\]{1,128})"')
_INCLUDE_USAGE_RE = re.compile(rb'"include_usage"\s*:\s*true')
_TEXT = b"tok "  # the same token as the /v1/messages replies
DEFAULT_MODEL = b"gpt-bench"
CREATED = 1765065600  # a fixed `created`: nothing reads it, and a clock call would cost CPU


def _chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk (chunked transfer encoding, as for the /v1/messages streams)."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class _Limits(Protocol):
    events: int  # fake_upstream.Config: changed at run time by POST /_bench/config


class ChatReplies:
    """Prebuilt chat.completion(.chunk) fragments; ids, model and counts filled in per request."""

    stream_head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n"
        b"x-request-id: req_bench\r\n\r\n"
    )

    def __init__(self, config: _Limits) -> None:
        self.config = config
        self.ids = itertools.count(1)

    def tokens_for(self, body: bytes) -> int:
        for name in (b'"max_completion_tokens"', b'"max_tokens"'):
            idx = body.find(name)
            if idx >= 0:
                m = _MAX_RE.match(body, idx)
                if m:
                    return max(1, min(int(m.group(1)), self.config.events))
        return self.config.events

    @staticmethod
    def model_for(body: bytes) -> bytes:
        idx = body.find(b'"model"')
        if idx >= 0:
            m = _MODEL_RE.match(body, idx)
            if m:
                return m.group(1)
        return DEFAULT_MODEL

    @staticmethod
    def include_usage(body: bytes) -> bool:
        idx = body.find(b'"include_usage"')
        return idx >= 0 and _INCLUDE_USAGE_RE.match(body, idx) is not None

    @staticmethod
    def usage(prompt: int, completion: int) -> bytes:
        return (
            b'{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,'
            b'"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},'
            b'"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,'
            b'"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}'
            % (prompt, completion, prompt + completion)
        )

    def _finish_reason(self, tokens: int) -> bytes:
        return b"length" if tokens < self.config.events else b"stop"

    def completion_json(self, body: bytes) -> bytes:
        tokens = self.tokens_for(body)
        payload = (
            b'{"id":"chatcmpl-bench%d","object":"chat.completion","created":%d,"model":"%s",'
            b'"choices":[{"index":0,"message":{"role":"assistant","content":"%s","refusal":null,'
            b'"annotations":[]},"logprobs":null,"finish_reason":"%s"}],"usage":%s,'
            b'"service_tier":"default","system_fingerprint":"fp_bench"}'
            % (
                next(self.ids),
                CREATED,
                self.model_for(body),
                _TEXT * tokens,
                self._finish_reason(tokens),
                self.usage(len(body) // 4, tokens),
            )
        )
        return (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"x-request-id: req_bench\r\n\r\n%s" % (len(payload), payload)
        )

    @staticmethod
    def _head(cid: bytes, model: bytes) -> bytes:
        return (
            b'data: {"id":"chatcmpl-bench%s","object":"chat.completion.chunk","created":%d,'
            b'"model":"%s","service_tier":"default","system_fingerprint":"fp_bench",'
            b'"choices":' % (cid, CREATED, model)
        )

    @staticmethod
    def _choice(delta: bytes, finish: bytes = b"null") -> bytes:
        return b'[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]' % (delta, finish)

    def stream_events(self, body: bytes, *, paced: bool) -> list[bytes]:
        """HTTP chunks after the headers; index 0 is the role chunk (the first delay precedes
        it), the last ends the chunked body. Paced: the role chunk and the first token go
        together, then one write per token, as fake_upstream's Messages streams."""
        tokens = self.tokens_for(body)
        model = self.model_for(body)
        with_usage = self.include_usage(body)
        tail = b',"usage":null}\n\n' if with_usage else b"}\n\n"
        # Every chunk carries the completion's id (as OpenAI's do), so chunks are built per
        # request; a 1,024-token stream is ~200 KB of copying, a few µs of the upstream's CPU.
        head = self._head(b"%d" % next(self.ids), model)
        role = _chunk(
            head + self._choice(b'{"role":"assistant","content":"","refusal":null}') + tail
        )
        delta = _chunk(head + self._choice(b'{"content":"' + _TEXT + b'"}') + tail)
        finish = _chunk(head + self._choice(b"{}", b'"%s"' % self._finish_reason(tokens)) + tail)
        end = b""
        if with_usage:
            end = _chunk(head + b'[],"usage":' + self.usage(len(body) // 4, tokens) + b"}\n\n")
        end += _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        if paced:
            return [role + delta, *[delta] * max(0, tokens - 1), finish, end]
        return [role, delta * tokens + finish + end]
