"""A private routing lab for the routing e2e tests: a fresh model served by fresh deployments,
each on its own simulator, so faults, failure counts and cooldowns of one test cannot leak into
another (health is keyed by deployment id, and every lab has new ids).

The catalog has serve-all deployments (the stack's `sim-a`) that also serve every new model. The
lab knows them and computes the gateway's order with the gateway's own rendezvous function, so a
test can pick a session whose preference is, say, x → y → serve-all; a serve-all deployment that
happens to be cooling only moves further back, which keeps that order.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai

from catalog.snapshot import DeploymentInfo, Route
from gateway.routing import rendezvous_order
from simulator.testing import SimulatorThread
from tests.support.stack import Key, Stack

BASE_MODEL = "anthropic/claude-sonnet-5-5"
LABELS = ("x", "y", "z")


@contextlib.contextmanager
def lab_simulators(labels: tuple[str, ...] = LABELS) -> Iterator[dict[str, SimulatorThread]]:
    sims = {label: SimulatorThread(api_key=f"sk-lab-{label}").start() for label in labels}
    try:
        yield sims
    finally:
        for sim in sims.values():
            sim.stop()


@dataclass(frozen=True)
class LabDeployment:
    name: str
    id: int
    weight: int
    max_concurrency: int
    base_url: str


@dataclass
class Lab:
    stack: Stack
    model: str
    upstream_model: str
    token: str
    key: Key
    mine: dict[str, LabDeployment]  # label -> deployment
    serve_all: list[LabDeployment]
    sims: dict[str, SimulatorThread]
    _routes: list[Route] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._routes = [
            Route(
                DeploymentInfo(
                    id=d.id,
                    name=d.name,
                    kind="anthropic",
                    base_url=d.base_url,
                    api_key="",
                    weight=d.weight,
                    max_concurrency=d.max_concurrency,
                ),
                self.upstream_model,
            )
            for d in [*self.mine.values(), *self.serve_all]
        ]

    def name(self, label: str) -> str:
        return self.mine[label].name

    def label(self, deployment_name: str) -> str:
        """x/y/z for lab deployments, the deployment's own name for serve-all ones."""
        for label, dep in self.mine.items():
            if dep.name == deployment_name:
                return label
        return deployment_name

    def order(self, session: str) -> list[str]:
        """The gateway's preference for a session key (all healthy), as labels."""
        return [self.label(r.deployment.name) for r in rendezvous_order(self._routes, session)]

    def header_session(self, *preferred: str) -> str:
        """An `x-ezat-session` value whose order starts with `preferred`, then the lab's other
        deployments, and only then the serve-all ones (which other tests may have cooled)."""
        rest = [label for label in self.mine if label not in preferred]
        for n in range(100_000):
            value = f"{self.token}-s{n}"
            order = self.order("h:" + value)
            head = order[: len(self.mine)]
            if tuple(order[: len(preferred)]) == preferred and sorted(head) == sorted(
                [*preferred, *rest]
            ):
                return value
        raise AssertionError(f"no session prefers {preferred}")

    def serve_all_sims(self) -> dict[str, SimulatorThread]:
        """The stack's simulators behind the serve-all deployments (to script them too)."""
        by_url = {sim.url: sim for sim in self.stack.sims.values()}
        found = {}
        for dep in self.serve_all:
            assert dep.base_url in by_url, f"serve-all deployment {dep.name} has no known simulator"
            found[dep.name] = by_url[dep.base_url]
        return found

    def all_sims(self) -> dict[str, SimulatorThread]:
        return {**self.sims, **self.serve_all_sims()}

    def received(self, label: str, marker: str) -> int:
        sim = self.all_sims()[label]
        return sum(
            1 for r in sim.requests() if r["path"] == "/v1/messages" and marker in str(r["body"])
        )

    def usage(self, key: Key | None = None) -> list[Any]:
        return self.stack.usage(org_id=(key or self.key).org_id)

    def anthropic(
        self, url: str | None = None, *, session: str | None = None, key: Key | None = None
    ) -> anthropic.Anthropic:
        headers = {"x-ezat-session": session} if session else None
        return anthropic.Anthropic(
            base_url=url or self.stack.url,
            api_key=(key or self.key).secret,
            max_retries=0,
            timeout=30,
            default_headers=headers,
        )

    def openai(
        self, url: str | None = None, *, session: str | None = None, key: Key | None = None
    ) -> openai.OpenAI:
        headers = {"x-ezat-session": session} if session else None
        return openai.OpenAI(
            base_url=(url or self.stack.url) + "/openai/v1",
            api_key=(key or self.key).secret,
            max_retries=0,
            timeout=30,
            default_headers=headers,
        )


def make_lab(
    stack: Stack,
    sims: dict[str, SimulatorThread],
    *,
    weights: dict[str, int] | None = None,
    max_concurrency: dict[str, int] | None = None,
    gateways: tuple[str, ...] = (),
) -> Lab:
    """Create the model and one deployment per simulator in one transaction (a catalog reload
    never sees half a lab), then wait until every gateway's snapshot serves the model."""
    from django.db import transaction

    from catalog.models import Deployment, Model
    from catalog.services import copy_model, upsert_deployment

    for sim in sims.values():
        sim.reset()
    token = secrets.token_hex(4)
    model_id = f"test/routing-lab-{token}"
    mine: dict[str, LabDeployment] = {}
    with stack.blocker.unblock(), transaction.atomic():
        clone = copy_model(Model.objects.get(id=BASE_MODEL), model_id)
        for label, sim in sims.items():
            dep, _ = upsert_deployment(
                name=f"lab-{token}-{label}",
                base_url=sim.url,
                api_key=sim.api_key or "",
                model_ids=[model_id],
                weight=(weights or {}).get(label, 1),
                max_concurrency=(max_concurrency or {}).get(label, 100),
            )
            mine[label] = LabDeployment(
                dep.name, dep.id, dep.weight, dep.max_concurrency, dep.base_url
            )
        serve_all = [
            LabDeployment(d.name, d.id, d.weight, d.max_concurrency, d.base_url)
            for d in Deployment.objects.filter(enabled=True, serves_all_models=True)
        ]
        upstream_model = clone.default_upstream_id
    lab = Lab(
        stack=stack,
        model=model_id,
        upstream_model=upstream_model,
        token=token,
        key=stack.new_key(),
        mine=mine,
        serve_all=serve_all,
        sims=sims,
    )
    for url in gateways or (stack.url,):
        wait_for_model(url, lab.key.secret, model_id)
    return lab


def wait_for_model(url: str, secret: str, model_id: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # The model lookup answers 200 once the gateway's catalog snapshot has the model.
        found = httpx.get(f"{url}/v1/models/{model_id}", headers={"x-api-key": secret}, timeout=5)
        if found.status_code == 200 and found.json()["id"] == model_id:
            return
        time.sleep(0.1)
    raise AssertionError(f"{url} did not load {model_id} within {timeout} s")


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def sse_events(body: str) -> list[tuple[str, str]]:
    """(kind, payload) per SSE block: kind is the event name, "comment" or "data"."""
    events = []
    for block in body.split("\n\n"):
        lines = [line for line in block.split("\n") if line]
        if not lines:
            continue
        name = next((line[7:] for line in lines if line.startswith("event: ")), None)
        data = "\n".join(line[6:] for line in lines if line.startswith("data: "))
        if name is not None:
            events.append((name, data))
        elif data:
            events.append(("data", data))
        elif all(line.startswith(":") for line in lines):
            events.append(("comment", "\n".join(lines)))
    return events
