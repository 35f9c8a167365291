"""The admission interface: one atomic step per request for rate, money and capacity.

Two implementations sit behind it: Redis (a Lua script: one round trip, shared by every gateway
process) when REDIS_URL is set, and an in-process one for the embedded default. Both keep money
as integer nano-USD and hold a request's worst-case cost from admission until it settles, so
concurrent requests cannot overspend a spend cap or a balance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class RateInfo:
    limit: int
    remaining: int
    reset_at: float  # epoch seconds when the current window ends


@dataclass(frozen=True, slots=True)
class AdmitRequest:
    request_id: str
    key_id: int
    org_id: int
    rpm_limit: int
    spend_cap_nano: int | None  # per calendar month (UTC); None = no cap
    hold_nano: int  # worst-case cost; 0 for free requests (count_tokens): rate limit only
    # (deployment_id, max_concurrency) in preference order; a slot is taken on the first with room.
    candidates: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Admitted:
    rate: RateInfo
    deployment_id: int | None  # the deployment whose slot was taken (None if no candidates)


class AdmissionError(Exception):
    """Base of every refusal; nothing is counted or held when admission is refused."""


class RateLimited(AdmissionError):
    def __init__(self, rate: RateInfo, retry_after: int) -> None:
        super().__init__("requests per minute exceeded")
        self.rate = rate
        self.retry_after = retry_after


class InsufficientFunds(AdmissionError):
    """`scope` is "key_cap" (the key's monthly spend cap) or "org_balance"."""

    def __init__(self, scope: str, rate: RateInfo) -> None:
        super().__init__(scope)
        self.scope = scope
        self.rate = rate


class CapacityExhausted(AdmissionError):
    def __init__(self, rate: RateInfo, retry_after: int = 1) -> None:
        super().__init__("every deployment is at capacity")
        self.rate = rate
        self.retry_after = retry_after


class LimiterUnavailable(AdmissionError):
    """Money cannot be checked (Redis down): money checks fail closed."""


class Limiter(Protocol):
    async def admit(self, req: AdmitRequest) -> Admitted: ...

    async def acquire_slot(self, request_id: str, deployment_id: int, max_concurrency: int) -> bool:
        """Take a slot on another deployment (failover). False when it is full."""
        ...

    async def release_slot(self, request_id: str, deployment_id: int) -> None: ...

    async def settle(
        self,
        request_id: str,
        *,
        key_id: int,
        org_id: int,
        hold_nano: int,
        cost_nano: int,
        deployment_id: int | None = None,
    ) -> None:
        """Release the request's hold and charge `cost_nano` (0 = nothing) to key and org.

        With `deployment_id`, the request's capacity slot there is released in the same step
        (one round trip instead of two at the end of every request).
        """
        ...

    async def in_flight(self, deployment_ids: list[int]) -> dict[int, int]:
        """Current concurrent requests per deployment (for the operator console)."""
        ...
