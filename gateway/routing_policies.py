"""Routing policies: how the healthy deployments of a model are ranked for one request (the first
is tried first, the rest are the failover order). Chosen by `EZAT_ROUTING_POLICY`.

`rendezvous` (the default) is EZAT's routing: sticky weighted rendezvous hashing on the session
key (gateway/routing.py), so a conversation keeps its deployment -- and its prompt cache -- and a
deployment that cools down moves only its own conversations. The others are the naive routers
other gateways ship. They exist so the cache benchmark (bench/cache.py) measures them through the
same gateway, on the same workload, in the same run; nobody should run them in production:

- `modulo`: hash(session) mod the number of healthy deployments. As sticky as rendezvous while
  the set is stable, but when a deployment comes or goes, most sessions map elsewhere.
- `round_robin`: healthy deployments in turn (a per-process counter), like nginx's default.
- `random`: a uniformly random healthy deployment (seeded by `EZAT_ROUTING_SEED`, for
  reproducible benchmarks).
- `least_busy`: the healthy deployment with the fewest requests in flight from this process;
  ties are taken in turn, as nginx's `least_conn` does ("If there are several such servers, they
  are tried in turn using a weighted round-robin balancing method",
  https://nginx.org/en/docs/http/ngx_http_upstream_module.html#least_conn). LiteLLM's
  `least-busy` counts the same thing (litellm/router_strategy/least_busy.py) but breaks ties by
  dictionary order, which at low load sends everything to one deployment.

The comparison policies ignore deployment weights. Their state (counter, in-flight counts,
generator) is per process, as nginx's is per worker without a shared zone.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from typing import Protocol

from django.conf import settings

from catalog.snapshot import Route


class Policy(Protocol):
    name: str

    def rank(self, healthy: Sequence[Route], session: str) -> list[Route]:
        """Every route of `healthy`, best first."""
        ...


_TWO_64 = float(2**64)


def _score(session: str, deployment_id: int, weight: int) -> float:
    digest = hashlib.blake2b(f"{session}|{deployment_id}".encode(), digest_size=8).digest()
    unit = (int.from_bytes(digest, "big") + 0.5) / _TWO_64  # in (0, 1)
    # Weighted rendezvous (Schindelhauer & Schomaker): smallest -ln(u)/w wins, with P ∝ w.
    return -math.log(unit) / weight


def rendezvous_order(routes: Sequence[Route], session: str) -> list[Route]:
    return sorted(routes, key=lambda r: _score(session, r.deployment.id, r.deployment.weight))


def _session_hash(session: str) -> int:
    return int.from_bytes(hashlib.blake2b(session.encode(), digest_size=8).digest(), "big")


def _by_id(routes: Sequence[Route]) -> list[Route]:
    # A stable base order for the index-based policies, whatever order the catalog lists them.
    return sorted(routes, key=lambda r: r.deployment.id)


def _rotated(routes: list[Route], start: int) -> list[Route]:
    if not routes:
        return routes
    start %= len(routes)
    return routes[start:] + routes[:start]


class Rendezvous:
    name = "rendezvous"

    def rank(self, healthy: Sequence[Route], session: str) -> list[Route]:
        return rendezvous_order(healthy, session)


class Modulo:
    name = "modulo"

    def rank(self, healthy: Sequence[Route], session: str) -> list[Route]:
        ordered = _by_id(healthy)
        return _rotated(ordered, _session_hash(session) % max(1, len(ordered)))


class RoundRobin:
    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def rank(self, healthy: Sequence[Route], session: str) -> list[Route]:
        turn, self._next = self._next, self._next + 1
        return _rotated(_by_id(healthy), turn)


class Random:
    name = "random"

    def __init__(self, seed: int | None) -> None:
        self._rng = random.Random(seed)

    def rank(self, healthy: Sequence[Route], session: str) -> list[Route]:
        return self._rng.sample(_by_id(healthy), len(healthy))


class InFlight:
    """Requests in flight per deployment in this process: an attempt counts from the moment it
    is sent until it fails or its request ends (the whole stream, for a stream)."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}

    def begin(self, deployment_id: int) -> None:
        self._counts[deployment_id] = self._counts.get(deployment_id, 0) + 1

    def end(self, deployment_id: int) -> None:
        left = self._counts.get(deployment_id, 0) - 1
        if left > 0:
            self._counts[deployment_id] = left
        else:
            self._counts.pop(deployment_id, None)

    def count(self, deployment_id: int) -> int:
        return self._counts.get(deployment_id, 0)

    def clear(self) -> None:
        self._counts.clear()


in_flight = InFlight()


class LeastBusy:
    name = "least_busy"

    def __init__(self, counts: InFlight) -> None:
        self._counts = counts
        self._next = 0

    def rank(self, healthy: Sequence[Route], session: str) -> list[Route]:
        turn, self._next = self._next, self._next + 1
        # Stable sort of a rotated list: fewest in flight first, ties in turn.
        rotated = _rotated(_by_id(healthy), turn)
        return sorted(rotated, key=lambda r: self._counts.count(r.deployment.id))


_active: Policy | None = None


def current() -> Policy:
    """The policy named by EZAT_ROUTING_POLICY (built once per process, rebuilt if it changes)."""
    global _active
    name = settings.EZAT_ROUTING_POLICY
    if _active is None or _active.name != name:
        _active = _build(name)
    return _active


def _build(name: str) -> Policy:
    if name == "rendezvous":
        return Rendezvous()
    if name == "modulo":
        return Modulo()
    if name == "round_robin":
        return RoundRobin()
    if name == "random":
        return Random(settings.EZAT_ROUTING_SEED)
    if name == "least_busy":
        return LeastBusy(in_flight)
    # settings.py refuses unknown names at start-up; this is for a setting changed at run time.
    raise ValueError(f"unknown routing policy {name!r}")


def reset() -> None:
    """Forget counters, generators and in-flight counts (tests)."""
    global _active
    _active = None
    in_flight.clear()
