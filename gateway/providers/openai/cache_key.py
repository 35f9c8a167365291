"""The prompt_cache_key EZAT sends to OpenAI-kind providers, shared by the translated path
(provider.py) and the relay (gateway/handlers/chat_relay.py). OpenAI routes its prompt cache by
this key (https://platform.openai.com/docs/guides/prompt-caching). Pure; kept apart so the relay
does not load the translators."""

from __future__ import annotations

import functools
import hashlib

from catalog.snapshot import DeploymentInfo


def derives_cache_key(deployment: DeploymentInfo) -> bool:
    """Whether EZAT sends a prompt_cache_key of its own when the client sent none ("client":
    the server refuses the field, so only a client's own may go)."""
    return deployment.options.get("prompt_cache_key", "derived") == "derived"


# A conversation keeps its session, so its key is asked for again on every turn: remembered for
# the most recent sessions rather than hashed each time (blake2b and the text cost ~2 µs).
@functools.lru_cache(maxsize=4096)
def tenant_cache_key(org_id: int, session: str) -> str:
    """The prompt_cache_key for a session: made per tenant, so one org's sessions never share
    another's key (docs/providers.md, "Prompt caching")."""
    digest = hashlib.blake2b(f"{org_id}:{session}".encode(), digest_size=12)
    return "ezat-" + digest.hexdigest()
