from __future__ import annotations

# What we accept as an image, and how much of it we are willing to hold in memory.
#
# The media type comes from the magic bytes only: Content-Type is whatever the remote
# server claims and the upstream model provider validates the bytes, not our header.
from collections.abc import AsyncIterable
from typing import TYPE_CHECKING, Final

from gateway.images.errors import MESSAGE_NOT_IMAGE, ImageContentError
from gateway.protocols.media import sniff_media_type
from gateway.sizes import format_size

if TYPE_CHECKING:
    from gateway.images.memory import DownloadsInFlight

# Enough bytes to recognise every supported format (WebP needs 12).
SNIFF_BYTES: Final = 12


def image_too_large(limit: int) -> ImageContentError:
    return ImageContentError(f"the image is larger than {format_size(limit)}")


class BudgetExceeded(ImageContentError):
    """The request's images together are too large (answered 413, not 400)."""


def budget_exceeded(limit: int) -> ImageContentError:
    return BudgetExceeded(f"image downloads exceed {format_size(limit)} for this request")


class ByteBudget:
    """Bytes all downloads of one request may still receive together.

    No lock: every consumer runs on the same event loop and `take` does not await.
    Bytes are charged as they arrive, so the budget is exact even with parallel downloads.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.remaining = limit

    def ensure_available(self, size: int) -> None:
        """Fail early on a declared Content-Length that can no longer fit."""
        if size > self.remaining:
            raise budget_exceeded(self.limit)

    def take(self, size: int) -> None:
        if size > self.remaining:
            self.remaining = 0
            raise budget_exceeded(self.limit)
        self.remaining -= size


async def read_image_body(
    chunks: AsyncIterable[bytes],
    *,
    max_bytes: int,
    budget: ByteBudget,
    in_flight: DownloadsInFlight | None = None,
) -> tuple[bytes, str]:
    """Read a response body into memory within the limits; return (data, media_type).

    Each chunk is checked BEFORE it is kept, so at most `max_bytes` are ever buffered
    (plus the one network read in flight, 64 KiB in httpcore). The magic bytes are checked
    as soon as enough have arrived, so a multi-megabyte non-image is abandoned early.
    The chunks are joined once at the end: a growing bytearray over-allocates as it grows
    and then needed a second full copy to become bytes (two 10 MB buffers per image).
    """
    parts: list[bytes] = []
    size = 0
    head = b""
    media_type: str | None = None
    chunk = b""
    if in_flight is not None:
        in_flight.downloads += 1
    try:
        async for chunk in chunks:
            if not chunk:
                continue
            if size + len(chunk) > max_bytes:
                raise image_too_large(max_bytes)
            budget.take(len(chunk))
            if in_flight is not None:
                in_flight.charge(len(chunk))
            parts.append(chunk)
            size += len(chunk)
            if media_type is None and len(head) < SNIFF_BYTES:
                head += chunk[: SNIFF_BYTES - len(head)]
                if len(head) >= SNIFF_BYTES:
                    media_type = sniff_media_type(head)
                    if media_type is None:
                        raise ImageContentError(MESSAGE_NOT_IMAGE)
        if media_type is None:
            # Short bodies: sniff what there is (a 10-byte "JPEG" is still refused later by
            # the provider, but it is not our job to validate image structure).
            media_type = sniff_media_type(head)
            if media_type is None:
                raise ImageContentError(MESSAGE_NOT_IMAGE)
        return b"".join(parts), media_type
    except BaseException:
        # Drop the buffers now: the exception's traceback keeps this frame alive, and with it
        # everything it refers to, until the cyclic garbage collector runs; collections are
        # triggered by object counts, which a few megabyte-sized buffers never reach (issue
        # 31: memory grew by 2 GiB over 140 refused requests).
        parts.clear()
        chunk = b""
        raise
    finally:
        if in_flight is not None:
            in_flight.discharge(size)
            in_flight.downloads -= 1
