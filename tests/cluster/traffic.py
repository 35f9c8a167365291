"""Customers' traffic through the load balancer, with the official SDKs: OpenAI Chat Completions,
OpenAI Responses and Anthropic Messages, streamed and not. Every call returns an `Answer`: did
the caller get a whole answer, with which request id, from which node."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai

from tests.cluster.harness import NODE_HEADER
from tests.support.chat_support import SONNET, WEATHER_TOOL

KINDS = ("chat", "chat-stream", "messages", "messages-stream", "responses")


@dataclass(frozen=True)
class Answer:
    kind: str
    ok: bool
    request_id: str | None = None
    node: str | None = None
    status: int | None = None
    error: str | None = None


def _ids(headers: httpx.Headers) -> tuple[str | None, str | None]:
    return headers.get("x-request-id"), headers.get(NODE_HEADER)


def call(url: str, secret: str, kind: str, text: str, *, max_retries: int = 2) -> Answer:
    """One request of `kind`; a whole answer is ok, anything else (an error status, a stream
    cut before its end) is not, with what happened."""
    try:
        if kind.startswith("messages"):
            return _messages(url, secret, kind, text, max_retries)
        return _openai(url, secret, kind, text, max_retries)
    except (openai.APIStatusError, anthropic.APIStatusError) as exc:
        request_id, node = _ids(exc.response.headers)
        return Answer(kind, False, request_id, node, exc.status_code, str(exc)[:300])
    except (openai.APIError, anthropic.APIError, httpx.HTTPError) as exc:
        return Answer(kind, False, error=f"{type(exc).__name__}: {exc}"[:300])


def _openai(url: str, secret: str, kind: str, text: str, max_retries: int) -> Answer:
    client = openai.OpenAI(base_url=url + "/openai/v1", api_key=secret, max_retries=max_retries)
    messages = [{"role": "user", "content": text}]
    if kind == "chat":
        raw = client.chat.completions.with_raw_response.create(
            model=SONNET, messages=messages, max_tokens=64
        )
        done = raw.parse().choices[0].finish_reason is not None
        return Answer(kind, done, *_ids(raw.headers))
    if kind == "chat-stream":
        stream = client.chat.completions.create(
            model=SONNET,
            messages=messages,
            max_tokens=64,
            stream=True,
            stream_options={"include_usage": True},
        )
        usage = None
        for chunk in stream:
            usage = chunk.usage or usage
        return Answer(kind, usage is not None, *_ids(stream.response.headers))
    raw_response = client.responses.with_raw_response.create(
        model=SONNET, input=text, max_output_tokens=64
    )
    return Answer(kind, raw_response.parse().status == "completed", *_ids(raw_response.headers))


def _messages(url: str, secret: str, kind: str, text: str, max_retries: int) -> Answer:
    client = anthropic.Anthropic(base_url=url, api_key=secret, max_retries=max_retries)
    messages = [{"role": "user", "content": text}]
    if kind == "messages":
        raw = client.messages.with_raw_response.create(
            model=SONNET, messages=messages, max_tokens=64
        )
        return Answer(kind, raw.parse().stop_reason is not None, *_ids(raw.headers))
    stream = client.messages.create(model=SONNET, messages=messages, max_tokens=64, stream=True)
    stopped = False
    for event in stream:
        stopped = stopped or event.type == "message_stop"
    return Answer(kind, stopped, *_ids(stream.response.headers))


def drive(
    url: str,
    secret: str,
    count: int,
    *,
    threads: int = 8,
    kinds: Iterable[str] = KINDS,
    text: str = "cluster",
    max_retries: int = 2,
) -> list[Answer]:
    """`count` requests, the kinds in turn, from `threads` callers at once."""
    plan = list(itertools.islice(itertools.cycle(kinds), count))
    with ThreadPoolExecutor(threads) as pool:
        return list(
            pool.map(
                lambda n: call(url, secret, plan[n], f"{text} {n}", max_retries=max_retries),
                range(count),
            )
        )


class Load:
    """Requests sent without pause from `threads` callers until stopped (rolling restarts and
    kills happen under it); `answers` collects every outcome."""

    def __init__(
        self,
        url: str,
        secret: str,
        *,
        threads: int = 6,
        text: str = "load",
        max_retries: int = 2,
        on_answer: Callable[[Answer], Any] | None = None,
    ) -> None:
        self.answers: list[Answer] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._args = (url, secret, text, max_retries)
        self._on_answer = on_answer
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        url, secret, text, max_retries = self._args
        while not self._stop.is_set():
            n = next(self._counter)
            answer = call(
                url, secret, KINDS[n % len(KINDS)], f"{text} {n}", max_retries=max_retries
            )
            with self._lock:
                self.answers.append(answer)
            if self._on_answer is not None:
                self._on_answer(answer)

    def count(self) -> int:
        with self._lock:
            return len(self.answers)

    def stop(self) -> list[Answer]:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)
        return self.answers


@dataclass(frozen=True)
class ThinkingLoop:
    first_node: str
    second_node: str
    answer: str | None


def thinking_tool_loop(
    url: str, secret: str, place: str, result: str, *, between: Callable[[], Any] | None = None
) -> ThinkingLoop:
    """An OpenAI-format tool loop with thinking, two turns through `url`: the first ends in a
    tool call (its signed thinking block kept by the gateway, in Redis), the second sends the
    tool's `result` back. `between` runs between the turns (a wait for the stored block)."""
    api = openai.OpenAI(base_url=url + "/openai/v1", api_key=secret, max_retries=0)
    params: dict[str, Any] = {
        "model": SONNET,
        "max_completion_tokens": 2000,
        "tools": [WEATHER_TOOL],
        "reasoning_effort": "medium",
    }
    messages: list[Any] = [{"role": "user", "content": f"Weather in {place}? Use the tool."}]
    first_raw = api.chat.completions.with_raw_response.create(messages=messages, **params)
    first = first_raw.parse()
    assert first.choices[0].finish_reason == "tool_calls"
    tool_call = first.choices[0].message.tool_calls[0]
    if between is not None:
        between()
    messages += [
        first.choices[0].message,
        {"role": "tool", "tool_call_id": tool_call.id, "content": result},
    ]
    second_raw = api.chat.completions.with_raw_response.create(messages=messages, **params)
    return ThinkingLoop(
        first_raw.headers[NODE_HEADER],
        second_raw.headers[NODE_HEADER],
        second_raw.parse().choices[0].message.content,
    )


def second_turns_sent(sims: Iterable[Any], place: str) -> list[dict[str, Any]]:
    """The bodies the upstreams got for a loop's second turn (user, assistant, tool result)."""
    return [
        r["body"]
        for sim in sims
        for r in sim.requests()
        if place in str(r.get("body")) and len(r["body"].get("messages", [])) == 3
    ]
