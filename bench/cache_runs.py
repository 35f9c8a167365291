"""The cache benchmark's runs: which routing policies it replays the workload through, in which
scenario and on which workload, and the gateway settings each run gets (bench/cache.py runs them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEPLOYMENTS = 4
CHURNED = 1  # index of the deployment that cools down in the churn scenario
# The gateway's defaults (ezat/settings.py); tests/bench/test_cache_bench.py keeps them in step.
DEFAULT_POLICY = "rendezvous"
PREFIX_AWARE_DEFAULT = True
COOLDOWN_FAILURES = 3
ARRIVAL_TIMEOUT = 60.0  # real seconds for the gateway to route one request


@dataclass(frozen=True, slots=True)
class RunSpec:
    scenario: str  # "base" or "churn"
    policy: str  # EZAT_ROUTING_POLICY
    prefix_aware: bool | None  # EZAT_ROUTING_PREFIX_AWARE; None = the gateway's default
    seed_offset: int = 0  # > 0: the fallback's A/B on another seed's workload
    attempt: int = 0  # > 0: run again (see CacheBench.one_deterministic)
    prompts: str = "shared"  # the workload's Profile.prompts

    @property
    def name(self) -> str:
        if self.policy == DEFAULT_POLICY and self.prefix_aware is None:
            return "ezat"
        if self.prefix_aware is not None:
            return f"{self.policy}-fallback-{'on' if self.prefix_aware else 'off'}"
        return self.policy

    @property
    def org(self) -> str:
        extra = f"-seed+{self.seed_offset}" if self.seed_offset else ""
        again = f"-again{self.attempt}" if self.attempt else ""
        own = "-own" if self.prompts == "own" else ""
        return f"cache-{self.scenario}-{self.name}{own}{extra}{again}"

    def env(self) -> dict[str, str]:
        env = {"EZAT_ROUTING_POLICY": self.policy}
        if self.prefix_aware is not None:
            env["EZAT_ROUTING_PREFIX_AWARE"] = "true" if self.prefix_aware else "false"
        return env


def run_specs(names: set[str] | None = None, prompts: Sequence[str] = ("shared",)) -> list[RunSpec]:
    """Every run, base scenario first, per workload; `names` keeps a subset (EZAT's runs always
    stay). The fallback's A/B runs on the shared-prompt workload only: with no prompt shared
    between conversations there is nothing for it to find elsewhere."""
    policies = [
        (DEFAULT_POLICY, None),  # EZAT: the gateway as shipped
        (DEFAULT_POLICY, not PREFIX_AWARE_DEFAULT),  # the fallback's A/B
        ("modulo", None),
        ("round_robin", None),
        ("random", None),
        ("least_busy", None),
    ]
    specs = [
        RunSpec(s, p, pa, prompts=w)
        for w in prompts
        for s in ("base", "churn")
        for p, pa in policies
        if w == "shared" or pa is None
    ]
    if names:
        specs = [spec for spec in specs if spec.name in names or spec.name == "ezat"]
    return specs


def ab_specs(extra_seeds: int) -> list[RunSpec]:
    """The breakpoint-aware fallback on and off, churn scenario, on other seeds' workloads: one
    seed's gain could be luck of that workload."""
    return [
        RunSpec("churn", DEFAULT_POLICY, on, offset)
        for offset in range(1, extra_seeds + 1)
        for on in (True, False)
    ]
