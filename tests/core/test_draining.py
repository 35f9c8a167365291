"""core/draining.py: the shutdown state the graceful server (ezat/graceful.py) sets."""

from __future__ import annotations

from core import draining


def test_draining_begins_once() -> None:
    draining.reset()
    try:
        assert not draining.is_draining()
        draining.begin()
        first = draining.draining_since
        draining.begin()  # a second SIGTERM does not restart the grace period
        assert draining.is_draining() and draining.draining_since == first
    finally:
        draining.reset()
