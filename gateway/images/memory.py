from __future__ import annotations

# A per-process budget for downloaded image bytes held by requests in flight.
#
# Each request with image URLs reserves its worst case (every image at the per-image limit,
# within its total, base64-encoded) before downloading, shrinks the reservation to what it
# really holds once the downloads are done, and releases it when the request ends. A request
# that does not fit waits a little for others to finish, then is refused (503 + retry-after):
# concurrent image requests can no longer take the process's memory with them (issue 13: 16
# of them added 1.4 GiB). Reserving the worst case up front, not chunk by chunk, means no two
# half-downloaded requests can wait on each other.
import asyncio

from gateway.images.errors import DownloadMemoryFull


class ImageMemoryBusy(Exception):
    """The process's image memory budget stayed full for the whole wait."""


class MemoryLease:
    """One request's share of the budget; `release()` at the end of the request (idempotent)."""

    __slots__ = ("_budget", "size")

    def __init__(self, budget: ImageMemoryBudget, size: int) -> None:
        self._budget = budget
        self.size = size

    def shrink_to(self, size: int) -> None:
        if size < self.size:
            self._budget._give_back(self.size - size)
            self.size = size

    def release(self) -> None:
        self.shrink_to(0)


class DownloadsInFlight:
    """What this process's downloads hold now, measured: the raw bytes they have buffered and
    not yet handed over or dropped, and how many are running (`ezat_image_download_*`).

    The reservations of ImageMemoryBudget cap the worst case ahead; this counts the bytes as
    they arrive and caps them too, at the same budget: a chunk that would pass it ends its
    download (503). A backstop the reservations should never let trigger; what it proves is
    that every download gives its bytes back when it ends, however it ends (issue 31: buffers
    of refused requests outlived them and memory grew by 2 GiB).
    """

    __slots__ = ("bytes", "downloads", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.bytes = 0
        self.downloads = 0

    def charge(self, size: int) -> None:
        if self.bytes + size > self.limit:
            raise DownloadMemoryFull
        self.bytes += size

    def discharge(self, size: int) -> None:
        self.bytes -= size


class ImageMemoryBudget:
    """Bytes all requests of this process may hold in downloaded images at once.

    No lock: every user runs on the event loop and the bookkeeping does not await.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the image memory budget must be positive")
        self.limit = limit
        self.used = 0
        self._waiters: list[asyncio.Future[None]] = []
        self.in_flight = DownloadsInFlight(limit)

    async def reserve(self, size: int, *, wait_s: float) -> MemoryLease:
        """Take `size` bytes (at most the whole budget: one huge request may still run alone),
        waiting up to `wait_s` for room; ImageMemoryBusy when there is none by then."""
        size = max(0, min(size, self.limit))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while self.used + size > self.limit:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ImageMemoryBusy
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                raise ImageMemoryBusy from None
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self.used += size
        return MemoryLease(self, size)

    def _give_back(self, size: int) -> None:
        self.used -= size
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:  # each re-checks; those that still do not fit wait again
            if not waiter.done():
                waiter.set_result(None)
