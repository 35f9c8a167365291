"""First tokens before bulk: while another stream's first token has arrived from the provider
and not yet gone out, a stream past its first token waits before its next batch of events.

Why: asyncio runs ready callbacks first come, first served. In a burst (1,000 streams asked at
once), each provider answer arrives whole in one read; the stream that read first translated,
relayed and settled all of it before the next stream's first token went out, so the last first
token of the burst waited behind every earlier stream's bulk (issue 22: the burst's TTFT p99).
A stream that has committed gives way here, so the queue holds first tokens first.

How it counts: `_Connection._wake` (gateway/upstream.py) counts a reader that is waiting for
its first token when its data arrives (`arrived`), and the reader uncounts itself when it runs
(`taken`). So `ready` is the number of first tokens sitting in the loop's queue right now; in
steady traffic it is almost always 0 and `wait_turn` costs one comparison.

Trade-off: a stream's later events can wait while first tokens go out, at most MAX_WAIT per
batch (and a count that does not come down is reset then, so it cannot hold streams back).
The work is the same, only reordered: the burst's first tokens come sooner, its last events
no later.
"""

from __future__ import annotations

import asyncio

from gateway.metrics import FIRST_TOKEN_GATE_TIMEOUTS

# Longer than a burst's first tokens take to go out (~0.2 ms each), far shorter than a client's
# patience between two events.
MAX_WAIT = 0.25


class FirstTokenGate:
    """One per process (the module's `gate`): counts first tokens waiting to run."""

    __slots__ = ("_drained", "_loop", "ready")

    def __init__(self) -> None:
        self.ready = 0
        self._drained: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def arrived(self) -> None:
        """A stream waiting for its first token has data to read (called from I/O callbacks).
        Only counted: `wait_turn` clears the event itself before each wait."""
        self.ready += 1

    def taken(self) -> None:
        """That stream is running now."""
        self.ready = max(self.ready - 1, 0)
        if self.ready == 0 and self._drained is not None:
            self._drained.set()

    async def wait_turn(self) -> None:
        """Return once no first token is waiting: at once when none is (the usual case), at the
        latest after MAX_WAIT."""
        if self.ready == 0:
            return
        loop = asyncio.get_running_loop()
        if self._drained is None or self._loop is not loop:
            self._drained, self._loop = asyncio.Event(), loop  # an Event belongs to one loop
        try:
            async with asyncio.timeout(MAX_WAIT):
                # Again after each wake-up: first tokens that arrived meanwhile (in the loop's
                # I/O poll between the release and this task's turn) still go first.
                while self.ready:
                    self._drained.clear()  # clear while any waits: so `wait` suspends
                    await self._drained.wait()
        except TimeoutError:
            # A count that did not come down (a reader that never ran) must not hold every
            # stream back by MAX_WAIT from now on: start counting afresh.
            FIRST_TOKEN_GATE_TIMEOUTS.inc()
            self.ready = 0
            self._drained.set()

    def reset(self) -> None:
        """Forget the count and the event (tests)."""
        self.ready = 0
        self._drained = None
        self._loop = None


gate = FirstTokenGate()
