"""One request as the exchange needs it: built once by its handler, after the request was read,
its model chain resolved and its body translated, and handed to `Exchange` whole.

What is in it does not change while the request runs (the exchange keeps its own moving state:
the candidate trying, the route, the hold, the attempts). The handler pipeline of the translated
APIs (gateway/handlers/pipeline.py) and the Messages handler build it with `request_context`;
tests and the token counts, which have one model and build their own bodies, with `sole`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accounts.keycache import KeyInfo
from catalog.snapshot import ModelInfo, Route
from gateway.chain import Candidate, ModelChain, Prepared
from gateway.prefix_digest import prefix_identity
from gateway.routing import session_key
from gateway.signed_kinds import signatures_in
from gateway.walk import HIGH_EFFORTS


@dataclass(slots=True, kw_only=True)
class RequestContext:
    """What one request is: who asks, for which models in which order, and what routing keys
    on. `candidates` are the models that may answer, in order, each with its upstream body."""

    api: str  # the usage record's label: "messages", "chat", "responses", …
    request_id: str
    key: KeyInfo
    model_name: str  # the model as the caller named it (usage records)
    stream: bool
    session: str  # the routing session (gateway/routing.py session_key)
    candidates: list[Candidate]
    requested_id: str | None = None  # the canonical id or ezat/auto; None: the first candidate's
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (model id, why), not called
    prefix: str | None = None  # the shared prefix's identity (prefix_digest.prefix_identity)
    # The conversation's thinking signatures, newest first, when it carries signed thinking:
    # then it stays on the platform that signed them (gateway/walk.py). None: it carries none.
    signatures: list[str] | None = None
    high_effort: bool = False  # a reasoning effort that gets the longer start deadline
    # Set when the chain had fallbacks this request may not use (signed thinking): the error
    # then says why no other model was tried.
    fallbacks_barred: str | None = None


def request_context(
    *,
    api: str,
    request_id: str,
    headers: dict[str, str],
    key: KeyInfo,
    models: ModelChain,
    candidates: list[Candidate],
    body: dict[str, Any],
    stream: bool,
    signed: bool,
    effort: object = None,
    session_hint: str | None = None,
    fallbacks_barred: str | None = None,
) -> RequestContext:
    """The context of an inference request whose upstream Messages body is `body` (the routing
    session, the shared prefix and the thinking signatures are read from it)."""
    return RequestContext(
        api=api,
        request_id=request_id,
        key=key,
        model_name=models.name,
        stream=stream,
        session=session_key(headers.get("x-ezat-session"), session_hint, body),
        candidates=candidates,
        requested_id=models.requested_id,
        skipped=models.skipped,
        prefix=prefix_identity(body),
        signatures=signatures_in(body) if signed else None,
        high_effort=effort in HIGH_EFFORTS,
        fallbacks_barred=fallbacks_barred,
    )


def _no_body(route: Route) -> bytes:
    raise AssertionError("this exchange's attempts build their own bodies")


# A single-model exchange whose handler builds each attempt's body itself (token counts).
_OWN_BODIES = Prepared(_no_body)


def sole(model: ModelInfo, name: str) -> list[Candidate]:
    """The candidates of a one-model request whose attempts build their own bodies."""
    return [Candidate(model, name, prepared=_OWN_BODIES)]
