"""Waiting in tests: on a condition, with a deadline generous enough for a loaded 2-core box.

A fixed sleep is either too short under load (a flaky test) or too long when idle (a slow one);
a tight window (`timeout=2`) fails on a busy machine though nothing is wrong. Wait for the thing
itself, polling, and give up only after a deadline meant to be reached only when it is broken.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

# The default deadline: far beyond anything that works, even with six test runs on two cores.
DEADLINE = 60.0


class WaitTimeout(AssertionError):
    """The condition did not hold before the deadline (an AssertionError: a test failure)."""


def wait_for(
    condition: Callable[[], T | None],
    deadline: float = DEADLINE,
    *,
    what: str = "the condition",
    interval: float = 0.05,
) -> T:
    """Poll `condition` until it returns something truthy; returns that. Raises WaitTimeout
    after `deadline` seconds, naming `what` and the last value seen."""
    end = time.monotonic() + deadline
    last: T | None = None
    while True:
        last = condition()
        if last:
            return last
        if time.monotonic() >= end:
            raise WaitTimeout(f"timed out after {deadline:g} s waiting for {what} (last: {last!r})")
        time.sleep(min(interval, max(end - time.monotonic(), 0)))
        interval = min(interval * 1.5, 0.5)


async def async_wait_for(
    condition: Callable[[], Awaitable[T | None]],
    deadline: float = DEADLINE,
    *,
    what: str = "the condition",
    interval: float = 0.02,
) -> T:
    """`wait_for` for a coroutine condition, without blocking the event loop."""
    end = time.monotonic() + deadline
    last: T | None = None
    while True:
        last = await condition()
        if last:
            return last
        if time.monotonic() >= end:
            raise WaitTimeout(f"timed out after {deadline:g} s waiting for {what} (last: {last!r})")
        await asyncio.sleep(min(interval, max(end - time.monotonic(), 0)))
        interval = min(interval * 1.5, 0.5)
