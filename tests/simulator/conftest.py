"""One simulator per test module (its API key is the module's API_KEY), reset before each test."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

from simulator.testing import SimulatorThread


@pytest.fixture(scope="module")
def sim(request: pytest.FixtureRequest) -> Iterator[SimulatorThread]:
    with SimulatorThread(api_key=request.module.API_KEY) as server:
        yield server


@pytest.fixture
def reset_sim(sim: SimulatorThread) -> None:
    sim.reset()


@pytest.fixture
def client(sim: SimulatorThread, request: pytest.FixtureRequest) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.url, api_key=request.module.API_KEY, max_retries=0)
