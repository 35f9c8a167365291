"""The cache benchmark's workload: seeded multi-turn conversations. Pure: no I/O, no clock.

Shape (full profile; the quick one is a scaled-down copy for the CI smoke):
- 200 conversations of 2-30 turns, started uniformly over 90 simulated minutes.
- Each belongs to one of 40 *apps*: a system prompt plus tools of 2k-40k tokens (log-uniform),
  shared by every conversation of that app, as a product's prompt is shared by its users. App
  popularity is Zipf (s = 1): a few apps carry many conversations, most carry a few.
  With `prompts="own"` every conversation is an app of its own instead (its own system prompt
  and tools, drawn the same way): nothing is shared between conversations, so only a
  conversation's own earlier turns can be read from a cache.
- An app speaks one API, as a product uses one SDK: half `/v1/messages` with explicit
  `cache_control` (a breakpoint on the system prompt, 1-hour TTL for half of those apps and
  5 minutes for the rest, and one on the newest user message), half
  `/openai/v1/chat/completions` with the gateway's automatic breakpoints, half of those sending
  `prompt_cache_key` (the conversation's id).
- A turn: a user message of 20-2,000 tokens, an answer that takes 1 s plus 60 tokens/s of
  simulated time to a length of 50-1,500 tokens (kept in the client's history, as a client
  does), then a think time before the next turn: 3-60 s (60 %), 1-5 min (30 %) or
  5-60 min (10 %), log-uniform within each band. So some gaps outlive a 5-minute cache entry.
- Half the conversations stream.

Every draw comes from one `random.Random(seed)` in a fixed order, so a seed always gives the
same requests, byte for byte (`Workload.fingerprint`).

Text is cut from one seeded corpus (~4 characters a token, as the simulator counts), each piece
tagged with what it is, so different apps, conversations and turns never share a prefix by
accident. A request names its conversation and turn in its newest user message
(`[conv 12 turn 3]`); the benchmark's simulators read it to attribute the request.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

MODEL = "anthropic/claude-sonnet-5-5"
CHARS_PER_TOKEN = 4
MAX_TOKENS = 64  # the simulator's answers are short; the history carries the long ones
MARKER = re.compile(r"^\[conv (\d+) turn (\d+)\]")
PROMPTS = ("shared", "own")  # Profile.prompts

_VOCABULARY = (
    "account adapter agent answer balance batch budget cache client cluster config context "
    "cursor deploy digest document engine error event field filter format gateway handler "
    "header index invoice key ledger limit message metric model module network order output "
    "packet parser payload policy prompt provider query queue quota record region reply "
    "request result retry route router schema script search server session signal stream "
    "summary system table task tenant token tool trace upstream usage user value window worker"
)
_WORDS = _VOCABULARY.split()


@dataclass(frozen=True, slots=True)
class Profile:
    conversations: int
    apps: int
    min_turns: int
    max_turns: int
    min_prefix_tokens: int
    max_prefix_tokens: int
    arrival_window_s: float
    # "shared": the conversations draw their app (system prompt + tools) from `apps`, Zipf.
    # "own": every conversation has a system prompt + tools of its own (`apps` unused), so no
    # prefix is shared between conversations and a hit needs the conversation's own history.
    prompts: str = "shared"

    @classmethod
    def named(cls, quick: bool, prompts: str = "shared") -> Profile:
        if prompts not in PROMPTS:
            raise ValueError(f"prompts must be one of {PROMPTS}, not {prompts!r}")
        if quick:
            return cls(24, 6, 2, 8, 2_000, 6_000, 1_800.0, prompts)
        return cls(200, 40, 2, 30, 2_000, 40_000, 5_400.0, prompts)


@dataclass(frozen=True, slots=True)
class App:
    index: int
    api: str  # "messages" or "chat"
    system: str
    tools: tuple[dict[str, Any], ...]
    system_ttl: str  # "5m" or "1h" (the Messages API apps; chat gets the gateway's 5m)
    sends_cache_key: bool  # chat apps: prompt_cache_key = the conversation's id


@dataclass(frozen=True, slots=True)
class Turn:
    start: float  # simulated seconds from the start of the run
    duration: float  # simulated seconds from the request to the end of its answer
    user: str
    assistant: str

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True, slots=True)
class Conversation:
    id: int
    app: App
    stream: bool
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class Request:
    """One turn of one conversation, as the client sends it."""

    conversation: Conversation
    turn: int

    @property
    def start(self) -> float:
        return self.conversation.turns[self.turn].start

    @property
    def end(self) -> float:
        return self.conversation.turns[self.turn].end

    @property
    def path(self) -> str:
        app = self.conversation.app
        return "/v1/messages" if app.api == "messages" else "/openai/v1/chat/completions"

    def body(self) -> dict[str, Any]:
        if self.conversation.app.api == "messages":
            return _messages_body(self.conversation, self.turn)
        return _chat_body(self.conversation, self.turn)


@dataclass(frozen=True, slots=True)
class Workload:
    seed: int
    profile: Profile
    apps: tuple[App, ...]
    conversations: tuple[Conversation, ...]

    @property
    def span(self) -> float:
        """Simulated seconds from the first request to the end of the last answer."""
        return max(c.turns[-1].end for c in self.conversations)

    def churn_window(self) -> tuple[float, float]:
        """When the churn scenario's deployment goes and comes back: the start times of the
        requests one third and two thirds of the way through the run (by requests, not time:
        traffic thins out towards the end, and an outage in the tail would test little)."""
        reqs = self.requests()
        return reqs[len(reqs) // 3].start, reqs[2 * len(reqs) // 3].start

    def requests(self) -> list[Request]:
        """Every turn, in the order the clients send them (by start time, then id)."""
        reqs = [Request(c, k) for c in self.conversations for k in range(len(c.turns))]
        reqs.sort(key=lambda r: (r.start, r.conversation.id, r.turn))
        return reqs

    def fingerprint(self) -> str:
        """SHA-256 over every request (path, body, start, duration), in sending order."""
        digest = hashlib.sha256()
        for req in self.requests():
            digest.update(req.path.encode())
            digest.update(orjson.dumps(req.body(), option=orjson.OPT_SORT_KEYS))
            digest.update(f"{req.start:.6f}/{req.end:.6f}".encode())
        return digest.hexdigest()


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


class _Corpus:
    """Seeded filler text, cut into tagged pieces of a given token length."""

    def __init__(self, rng: random.Random, chars: int = 600_000) -> None:
        words: list[str] = []
        size = 0
        while size < chars:
            word = rng.choice(_WORDS)
            words.append(word)
            size += len(word) + 1
        self.text = " ".join(words)

    def piece(self, rng: random.Random, tag: str, tokens: int) -> str:
        head = f"{tag} "
        length = max(tokens * CHARS_PER_TOKEN - len(head), 1)
        if length >= len(self.text):
            repeats = length // len(self.text) + 1
            return head + (self.text * repeats)[:length]
        start = rng.randrange(0, len(self.text) - length)
        return head + self.text[start : start + length]


def _app(rng: random.Random, corpus: _Corpus, index: int, profile: Profile) -> App:
    prefix = int(_log_uniform(rng, profile.min_prefix_tokens, profile.max_prefix_tokens))
    api = "messages" if rng.random() < 0.5 else "chat"
    system_ttl = "1h" if api == "messages" and rng.random() < 0.5 else "5m"
    sends_cache_key = api == "chat" and rng.random() < 0.5
    tool_share = rng.uniform(0.0, 0.3)
    n_tools = rng.randint(1, 12) if tool_share > 0.05 else 0
    tools = []
    for t in range(n_tools):
        per_tool = max(int(prefix * tool_share / n_tools), 20)
        tools.append(
            {
                "name": f"app{index}_tool{t}",
                "description": corpus.piece(rng, f"[app {index} tool {t}]", per_tool),
                "input_schema": {
                    "type": "object",
                    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["query"],
                },
            }
        )
    tool_tokens = sum(len(t["description"]) // CHARS_PER_TOKEN for t in tools)
    system = corpus.piece(rng, f"[app {index} system]", max(prefix - tool_tokens, 200))
    return App(index, api, system, tuple(tools), system_ttl, sends_cache_key)


def _gap(rng: random.Random) -> float:
    band = rng.random()
    if band < 0.6:
        return _log_uniform(rng, 3.0, 60.0)
    if band < 0.9:
        return _log_uniform(rng, 60.0, 300.0)
    return _log_uniform(rng, 300.0, 3600.0)


def _zipf_weights(n: int, s: float = 1.0) -> list[float]:
    return [1.0 / (rank**s) for rank in range(1, n + 1)]


def generate(seed: int, profile: Profile) -> Workload:
    rng = random.Random(seed)
    corpus = _Corpus(rng)
    own = profile.prompts == "own"
    apps: tuple[App, ...] = ()
    if not own:
        apps = tuple(_app(rng, corpus, i, profile) for i in range(profile.apps))
    weights = _zipf_weights(profile.apps)
    conversations = []
    own_apps = []
    for cid in range(profile.conversations):
        if own:
            app = _app(rng, corpus, cid, profile)
            own_apps.append(app)
        else:
            app = rng.choices(apps, weights=weights)[0]
        stream = rng.random() < 0.5
        n_turns = rng.randint(profile.min_turns, profile.max_turns)
        start = rng.uniform(0.0, profile.arrival_window_s)
        turns = []
        for k in range(n_turns):
            user_tokens = int(_log_uniform(rng, 20, 2_000))
            answer_tokens = int(_log_uniform(rng, 50, 1_500))
            user = corpus.piece(rng, f"[conv {cid} turn {k}]", user_tokens)
            assistant = corpus.piece(rng, f"(answer {cid}.{k})", answer_tokens)
            duration = round(1.0 + answer_tokens / 60.0, 3)
            turns.append(Turn(round(start, 3), duration, user, assistant))
            start = start + duration + _gap(rng)
        conversations.append(Conversation(cid, app, stream, tuple(turns)))
    return Workload(seed, profile, apps or tuple(own_apps), tuple(conversations))


def parse_marker(text: str) -> tuple[int, int] | None:
    """(conversation id, turn) from the start of a request's newest user message."""
    found = MARKER.match(text)
    return (int(found.group(1)), int(found.group(2))) if found else None


# --- request bodies -------------------------------------------------------------------------
def _history(conv: Conversation, turn: int) -> Iterator[tuple[str, str]]:
    for k in range(turn):
        yield "user", conv.turns[k].user
        yield "assistant", conv.turns[k].assistant
    yield "user", conv.turns[turn].user


def _messages_body(conv: Conversation, turn: int) -> dict[str, Any]:
    """Anthropic Messages with the client's own breakpoints: the system prompt (the app's TTL)
    and the newest user message (5 minutes). Earlier messages keep their block form without a
    breakpoint, as a client that moves its breakpoint forward sends them."""
    app = conv.app
    system_cc: dict[str, Any] = {"type": "ephemeral"}
    if app.system_ttl == "1h":
        system_cc["ttl"] = "1h"
    messages: list[dict[str, Any]] = [
        {"role": role, "content": [{"type": "text", "text": text}]}
        for role, text in _history(conv, turn)
    ]
    messages[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": MAX_TOKENS,
        "system": [{"type": "text", "text": app.system, "cache_control": system_cc}],
        "messages": messages,
        "stream": conv.stream,
    }
    if app.tools:
        body["tools"] = list(app.tools)
    return body


def _chat_body(conv: Conversation, turn: int) -> dict[str, Any]:
    """OpenAI Chat Completions without breakpoints: the gateway adds its automatic ones."""
    app = conv.app
    messages: list[dict[str, Any]] = [{"role": "system", "content": app.system}]
    messages += [{"role": role, "content": text} for role, text in _history(conv, turn)]
    body: dict[str, Any] = {
        "model": MODEL,
        "max_completion_tokens": MAX_TOKENS,
        "messages": messages,
        "stream": conv.stream,
    }
    if conv.stream:
        body["stream_options"] = {"include_usage": True}
    if app.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["input_schema"],
                },
            }
            for t in app.tools
        ]
    if app.sends_cache_key:
        body["prompt_cache_key"] = f"conversation-{conv.id}"
    return body
