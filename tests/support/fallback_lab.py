"""A private lab for the model-fallback e2e tests: three fresh models, two of them served by two
deployments each on their own simulators, so faults and cooldowns of one test never leak into
another (health is keyed by deployment id, and every lab has new ids).

- `a`: the requested model (Claude Sonnet 5.5's figures and prices);
- `b`: the fallback, with prices of its own (so a bill shows which model answered);
- `c`: a small model served by the stack's serve-all deployment only: no vision, a 2,000-token
  output limit (a fallback that cannot serve every request).

The stack's serve-all deployment (`sim-a`) serves every catalog model, these three included; a
model is taken down by scripting its own simulators and, on the serve-all ones, the requests
that name its upstream id.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import anthropic
import httpx
import openai

from simulator.testing import SimulatorThread
from tests.support.routing_lab import wait_for_model
from tests.support.stack import Key, Stack

BASE_MODEL = "anthropic/claude-sonnet-5-5"
SIM_LABELS = ("a1", "a2", "b1", "b2")
# The fallback's prices (USD per million tokens): unlike any bundled model's.
B_PRICES = {
    "input": Decimal("7"),
    "output": Decimal("33"),
    "cacheRead": Decimal("0.7"),
    "cacheWrite5m": Decimal("8.75"),
    "cacheWrite1h": Decimal("14"),
}


@contextlib.contextmanager
def lab_simulators() -> Iterator[dict[str, SimulatorThread]]:
    sims = {label: SimulatorThread(api_key=f"sk-fb-{label}").start() for label in SIM_LABELS}
    try:
        yield sims
    finally:
        for sim in sims.values():
            sim.stop()


@dataclass
class FallbackLab:
    stack: Stack
    token: str
    ids: dict[str, str]  # label (a, b, c) → canonical model id
    key: Key
    sims: dict[str, SimulatorThread]  # a1, a2, b1, b2
    b_version: int  # B's price version

    def upstream(self, label: str) -> str:
        return self.ids[label].split("/", 1)[1]

    def own_sims(self, label: str) -> list[SimulatorThread]:
        return [sim for name, sim in self.sims.items() if name.startswith(label)]

    def serve_all_sims(self) -> list[SimulatorThread]:
        return list(self.stack.sims.values())

    def take_down(self, label: str, status: int = 500, message: str = "down for the test") -> None:
        """Every deployment of the model answers `status` to every request for it."""
        fault = {"status": status, "times": -1, "message": message}
        for sim in self.own_sims(label):
            sim.script(fault)
        for sim in self.serve_all_sims():
            sim.script({**fault, "match": f'"model":"{self.upstream(label)}"'})

    def bring_up(self, label: str) -> None:
        for sim in self.own_sims(label):
            sim.reset()
        for sim in self.serve_all_sims():
            sim.reset()

    def received(self, label: str) -> list[dict[str, Any]]:
        """Requests for the model that reached any simulator (served or refused)."""
        wanted = self.upstream(label)
        found = []
        for sim in [*self.sims.values(), *self.serve_all_sims()]:
            for record in sim.requests():
                body = record.get("body")
                if (
                    record["path"] == "/v1/messages"
                    and isinstance(body, dict)
                    and body.get("model") == wanted
                ):
                    found.append(record)
        return found

    def usage(self, key: Key | None = None) -> list[Any]:
        return self.stack.usage(org_id=(key or self.key).org_id)

    def anthropic(
        self, *, key: Key | None = None, headers: dict[str, str] | None = None
    ) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            base_url=self.stack.url,
            api_key=(key or self.key).secret,
            max_retries=0,
            timeout=30,
            default_headers=headers,
        )

    def openai(
        self, *, key: Key | None = None, headers: dict[str, str] | None = None
    ) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.stack.url + "/openai/v1",
            api_key=(key or self.key).secret,
            max_retries=0,
            timeout=30,
            default_headers=headers,
        )

    def post(self, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
        return httpx.post(
            self.stack.url + path,
            json=body,
            headers={"authorization": f"Bearer {self.key.secret}", **headers},
            timeout=30,
        )

    def set_policy(self, model: str, fallbacks: list[str], key: Key | None = None) -> None:
        from accounts.models import Organization
        from accounts.services import set_fallbacks

        with self.stack.blocker.unblock():
            org = Organization.objects.get(pk=(key or self.key).org_id)
            set_fallbacks(org=org, model=model, fallbacks=fallbacks, actor="e2e")


def make_fallback_lab(stack: Stack, sims: dict[str, SimulatorThread]) -> FallbackLab:
    """Create the models and deployments in one transaction (a catalog reload never sees half
    a lab), then wait until the gateway's snapshot serves them."""
    from django.db import transaction

    from catalog.models import Model
    from catalog.schema import TierFigures
    from catalog.services import copy_model, create_price_version, upsert_deployment

    for sim in sims.values():
        sim.reset()
    token = secrets.token_hex(4)
    ids = {label: f"test/fb-{label}-{token}" for label in ("a", "b", "c")}
    with stack.blocker.unblock(), transaction.atomic():
        base = Model.objects.get(id=BASE_MODEL)
        copy_model(base, ids["a"], source_note="e2e fallback model")
        b = copy_model(base, ids["b"], source_note="e2e fallback model")
        version = create_price_version(b, [TierFigures(None, B_PRICES)], source="e2e")
        copy_model(
            base, ids["c"], source_note="e2e fallback model", vision=False, max_output_tokens=2000
        )
        for label, sim in sims.items():
            upsert_deployment(
                name=f"fb-{token}-{label}",
                base_url=sim.url,
                api_key=sim.api_key or "",
                model_ids=[ids[label[0]]],
            )
    lab = FallbackLab(
        stack=stack, token=token, ids=ids, key=stack.new_key(), sims=sims, b_version=version.pk
    )
    for model_id in ids.values():
        wait_for_model(stack.url, lab.key.secret, model_id)
    return lab


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]
