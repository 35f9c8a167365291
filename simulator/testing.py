"""Run the simulator in a background thread, for tests and demos in the same process.

    with SimulatorThread(api_key="sk-sim") as sim:
        sim.script({"status": 529})
        client = anthropic.Anthropic(base_url=sim.url, api_key="sk-sim", max_retries=0)

A thread (not the caller's event loop) so synchronous clients -- the anthropic SDK, httpx,
Django's test client -- can call it without deadlocking.
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Any

import httpx
from aiohttp import web

from simulator.app import build_app
from simulator.platforms import PlatformSim, make_service_account, trust_service_account

START_TIMEOUT = 10.0


class SimulatorThread:
    def __init__(
        self,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        platform: PlatformSim | None = None,
    ) -> None:
        """`platform`: the Bedrock or Vertex front (a Vertex one with no trusted service account
        gets a fresh one, its token_uri pointing here: `service_account`)."""
        self.api_key = api_key
        self.platform = platform
        self.service_account: dict[str, str] | None = None
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> SimulatorThread:
        self._thread = threading.Thread(target=self._run, name="ezat-simulator", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            raise RuntimeError("simulator did not start in time")
        if self._error is not None:
            raise RuntimeError("simulator failed to start") from self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._start())
        except OSError as exc:  # e.g. the port is taken
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self._cleanup())
            loop.close()

    async def _start(self) -> None:
        app = build_app(self.api_key, self.platform)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        sim = self.platform
        if sim is not None and sim.platform == "vertex" and sim.public_key is None:
            self.service_account = make_service_account(f"{self.url}/token", sim.project)
            trust_service_account(sim, self.service_account)

    async def _cleanup(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> SimulatorThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- control API helpers ---------------------------------------------------------------

    def _control(self, method: str, path: str, json: Any = None) -> Any:
        response = httpx.request(method, f"{self.url}/_sim/{path}", json=json, timeout=60)
        response.raise_for_status()
        return response.json()

    def reset(self) -> None:
        self._control("POST", "reset")

    def release(self) -> None:
        """End every scripted pause in progress."""
        self._control("POST", "release")

    def script(self, *faults: dict[str, Any]) -> int:
        """Append fault entries; returns how many are pending."""
        return int(self._control("POST", "script", {"faults": list(faults)})["pending"])

    def clear_script(self) -> int:
        """Drop pending faults (cache and records stay); returns how many were dropped."""
        return int(self._control("DELETE", "script")["dropped"])

    def advance_clock(self, seconds: float) -> float:
        """Move the simulated clock on (taking it over from the wall clock on first use)."""
        return float(self._control("POST", "clock", {"advance": seconds})["now"])

    def requests(self) -> list[dict[str, Any]]:
        return list(self._control("GET", "requests"))

    def platform_state(self, **change: Any) -> dict[str, Any]:
        """The Bedrock/Vertex front's state and the OpenAI front's settings; keyword arguments
        change them (token_ttl, …, openai_auth="none", openai_flavour="vllm",
        openai_reasoning_field="reasoning")."""
        if change:
            return dict(self._control("POST", "platform", change))
        return dict(self._control("GET", "platform"))

    def stats(self) -> dict[str, Any]:
        return dict(self._control("GET", "stats"))
