"""Application Default Credentials for a Vertex deployment without a service-account key:
google.auth.default() runs in a worker thread (it reads files and, on Google Cloud, probes the
metadata server), and finding none is an unreachable deployment, cooled down, not a 500."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import google.auth
import pytest
from google.auth.exceptions import DefaultCredentialsError

from catalog.snapshot import DeploymentInfo
from gateway.providers import PlatformAuthError
from gateway.providers.vertex import google_tokens
from gateway.providers.vertex.google_tokens import TokenCache

DEPLOYMENT = DeploymentInfo(
    id=7,
    name="adc",
    kind="vertex",
    base_url="http://vertex.test/v1",
    api_key="",
    weight=1,
    max_concurrency=1,
    region="us-east5",
    project="ezat-adc-project",
)


def test_adc_is_resolved_off_the_event_loop_and_none_found_fails_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[threading.Thread] = []
    cooled: list[int] = []

    def default(**kwargs: Any) -> Any:
        seen.append(threading.current_thread())
        raise DefaultCredentialsError("Your default credentials were not found.")

    monkeypatch.setattr(google.auth, "default", default)
    monkeypatch.setattr(google_tokens, "_cool_down", cooled.append)

    async def request() -> threading.Thread:
        with pytest.raises(PlatformAuthError, match="no Google credentials"):
            await TokenCache().token(DEPLOYMENT)
        return threading.current_thread()

    loop_thread = asyncio.run(request())
    assert len(seen) == 1 and seen[0] is not loop_thread
    assert cooled == [DEPLOYMENT.id]
