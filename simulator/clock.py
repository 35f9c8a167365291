"""The simulator's notion of time, for the prompt cache's TTLs.

By default it is the wall clock (`time.monotonic`). A benchmark can take it over -- over the
control API (`POST /_sim/clock`) or, in-process, by calling `set`/`advance` -- so that a
conversation's five-minute and one-hour gaps take no real time: the cache then expires entries
on the simulated clock only. Time never goes backwards: taking the clock over freezes it at the
current reading, and from then on it moves only when told to.
"""

from __future__ import annotations

import time


class ClockError(ValueError):
    """A clock change that would move time backwards, or a value that is not a time."""


class SimClock:
    def __init__(self) -> None:
        self._fixed: float | None = None

    def __call__(self) -> float:
        return self._fixed if self._fixed is not None else time.monotonic()

    @property
    def simulated(self) -> bool:
        return self._fixed is not None

    def set(self, now: float) -> float:
        """Simulated time from now on, at `now` (seconds; not before the current reading)."""
        current = self()
        if now < current:
            raise ClockError(f"now must not be before the current time ({current})")
        self._fixed = float(now)
        return self._fixed

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ClockError("advance must be a non-negative number of seconds")
        # Not through set(): read once, or the wall clock would move between read and check.
        self._fixed = self() + seconds
        return self._fixed

    def real(self) -> None:
        """Back to the wall clock. Only together with clearing the cache (`SimState.reset`): the
        wall clock may be behind a simulated time that ran ahead."""
        self._fixed = None
