"""Process-level tuning for a serving process, applied once at ASGI startup."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

from django.conf import settings

logger = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's initial value, kept from now on


def pin_mmap_threshold() -> bool:
    """Keep large buffers (image downloads, their base64 text, upstream bodies) out of the heap.

    glibc serves allocations above a threshold with their own mmap, returned to the system when
    freed; but it raises that threshold to the size of each such block freed (up to 32 MiB), so
    after the first large image the next multi-megabyte buffers come from the heap, and once
    requests interleave, the heap cannot shrink past the ones still alive. Measured with 16
    concurrent requests of 3 × 7 MB images: RSS stayed 23 % above its baseline afterwards; with
    the threshold pinned it came back below it, and the peak fell from +153 to +100 MiB.
    Setting it with mallopt also stops the dynamic adjustment. Not glibc: nothing to do.
    """
    path = ctypes.util.find_library("c")
    if path is None:
        return False
    try:
        libc = ctypes.CDLL(path)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):  # musl and others have no mallopt
        logger.info("mallopt not available; the allocator keeps its own threshold")
        return False


def tune_garbage_collector() -> None:
    """Keep the cycle collector off the hot path.

    Measured on the benchmark (1,000 streams started at once, one worker): 47 % of the worker's
    CPU went to full collections, each one walking every object Django and the apps created at
    import (~150 ms apiece), and the young generation was collected every 700 allocations while a
    request allocates thousands. Freezing the start-up objects takes them out of every later
    collection; a young-generation threshold of 20,000 makes collections rarer but no longer
    (they walk young objects only). The trade-off: cyclic garbage lives a little longer. The
    request path avoids reference cycles (see ApiRequest.close), and the benchmark's memory
    phase checks that RSS stays flat over 1,000 requests of 100k tokens.
    """
    gen0 = settings.EZAT_GC_GEN0_THRESHOLD
    if gen0 <= 0:
        return
    gc.collect()
    gc.freeze()
    # The middle generation every 50 young collections (CPython: 10): a burst of streams keeps
    # ~100k young objects alive, and walking them again and again cost more than it freed.
    _, _, gen2 = gc.get_threshold()
    gc.set_threshold(gen0, 50, gen2)
