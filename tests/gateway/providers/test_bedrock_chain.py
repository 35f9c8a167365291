"""Bedrock signing with botocore's standard credential chain: refreshable credentials are
refreshed in a worker thread, never on the event loop, and re-read on every request; a chain
that fails (a missing profile, a failing credential_process) is an unreachable deployment."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from typing import Any

import pytest
from botocore.credentials import RefreshableCredentials
from botocore.exceptions import ProfileNotFound

from catalog.snapshot import DeploymentInfo
from gateway.providers import PlatformAuthError
from gateway.providers.bedrock import _Signer

DEPLOYMENT = DeploymentInfo(
    id=1,
    name="chain",
    kind="bedrock",
    base_url="http://bedrock.test",
    api_key="",
    weight=1,
    max_concurrency=1,
    region="us-east-1",
)


def metadata(n: int, minutes: int) -> dict[str, str]:
    expiry = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=minutes)
    return {
        "access_key": f"ASIAROTATED{n:09d}",
        "secret_key": f"secret-{n}",
        "token": f"token-{n}",
        "expiry_time": expiry.isoformat(),
    }


def test_refreshable_chain_credentials_are_refreshed_off_the_event_loop() -> None:
    threads: list[threading.Thread] = []

    def refresh() -> dict[str, str]:
        threads.append(threading.current_thread())
        return metadata(len(threads) + 1, 60)

    signer = _Signer(DEPLOYMENT)
    # Expiring in two minutes: inside botocore's mandatory refresh window.
    signer._chain = RefreshableCredentials.create_from_metadata(metadata(1, 2), refresh, "test")

    async def request() -> str:
        await signer.ready()
        return signer.headers("/model/m/invoke", "bedrock.test", b"{}", ("accept", "*/*"))

    loop_thread: list[threading.Thread] = []

    async def two_requests() -> tuple[str, str]:
        loop_thread.append(threading.current_thread())
        return await request(), await request()

    first, second = asyncio.run(two_requests())
    assert len(threads) == 1 and threads[0] is not loop_thread[0]
    for head in (first, second):
        assert "Credential=ASIAROTATED000000002/" in head
        assert "x-amz-security-token: token-2" in head


def test_a_failing_chain_is_a_platform_auth_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import botocore.session

    class Failing:
        def get_credentials(self) -> Any:
            raise ProfileNotFound(profile="missing")

    monkeypatch.setattr(botocore.session, "get_session", Failing)
    signer = _Signer(DEPLOYMENT)
    with pytest.raises(PlatformAuthError, match="missing"):
        asyncio.run(signer.ready())


def test_no_credentials_in_the_chain_is_a_platform_auth_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import botocore.session

    class Empty:
        def get_credentials(self) -> None:
            return None

    monkeypatch.setattr(botocore.session, "get_session", Empty)
    with pytest.raises(PlatformAuthError, match="no AWS credentials"):
        asyncio.run(_Signer(DEPLOYMENT).ready())
