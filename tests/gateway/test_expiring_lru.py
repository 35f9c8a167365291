from __future__ import annotations

from gateway.expiring_lru import ExpiringLru


def test_an_expired_entry_reads_as_absent() -> None:
    lru: ExpiringLru[str] = ExpiringLru(10)
    lru.put("k", "v", expires=5.0)
    assert lru.get("k", now=4.9) == "v"
    assert lru.get("k", now=5.0) is None


def test_the_least_recently_written_goes_first_past_the_bound() -> None:
    lru: ExpiringLru[int] = ExpiringLru(2)
    lru.put("a", 1, expires=9.0)
    lru.put("b", 2, expires=9.0)
    lru.put("a", 3, expires=9.0)  # rewritten: now the newest
    lru.put("c", 4, expires=9.0)
    assert (lru.get("a", 0.0), lru.get("b", 0.0), lru.get("c", 0.0)) == (3, None, 4)
