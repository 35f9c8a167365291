"""A platforms lab: one model served by three fresh deployments, one per kind, each on its own
simulator front (the Anthropic API, Bedrock with SigV4, Vertex with OAuth2 tokens from the
simulator's own token endpoint), so faults and cooldowns of one test stay in it.

The stack's serve-all deployment also serves the model; tests pick an `x-ezat-session` whose
order starts with the deployments they mean (routing_lab.Lab.header_session).
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from typing import Any

from simulator.platforms import PlatformSim
from simulator.testing import SimulatorThread
from tests.support.routing_lab import BASE_MODEL, Lab, LabDeployment, wait_for_model
from tests.support.stack import Stack

AWS_KEY_ID = "AKIAEZATSIMULATOR001"
AWS_SECRET = "ezatSimulatorSecret/0123456789+abcdefghij"
LABELS = ("anthropic", "bedrock", "vertex")

# The paths each front serves Messages calls on (what `received` counts).
MESSAGE_PATHS = {
    "anthropic": ("/v1/messages",),
    "bedrock": ("/invoke", "/invoke-with-response-stream"),
    "vertex": (":rawPredict", ":streamRawPredict"),
}


@contextlib.contextmanager
def platform_simulators() -> Iterator[dict[str, SimulatorThread]]:
    sims = {
        "anthropic": SimulatorThread(api_key="sk-lab-anthropic"),
        "bedrock": SimulatorThread(
            platform=PlatformSim(
                platform="bedrock",
                region="us-east-1",
                aws_access_key_id=AWS_KEY_ID,
                aws_secret_access_key=AWS_SECRET,
            )
        ),
        "vertex": SimulatorThread(
            platform=PlatformSim(platform="vertex", region="us-east5", project="ezat-lab-project")
        ),
    }
    for sim in sims.values():
        sim.start()
    try:
        yield sims
    finally:
        for sim in sims.values():
            sim.stop()


class PlatformLab(Lab):
    def received(self, label: str, marker: str) -> int:
        sim = self.all_sims()[label]
        paths = MESSAGE_PATHS.get(label, ("/v1/messages",))
        return sum(
            1
            for r in sim.requests()
            if r["path"].endswith(paths) and marker in json.dumps(r["body"])
        )

    def requests(self, label: str) -> list[dict[str, Any]]:
        return [r for r in self.sims[label].requests() if r["path"] != "/token"]


def make_platform_lab(stack: Stack, sims: dict[str, SimulatorThread]) -> PlatformLab:
    from django.db import transaction

    from catalog.models import Deployment, Model
    from catalog.services import copy_model, upsert_deployment

    for sim in sims.values():
        sim.reset()
    token = secrets.token_hex(4)
    model_id = f"test/platform-lab-{token}"
    mine: dict[str, LabDeployment] = {}
    with stack.blocker.unblock(), transaction.atomic():
        clone = copy_model(Model.objects.get(id=BASE_MODEL), model_id)
        configs: dict[str, dict[str, Any]] = {
            "anthropic": {"base_url": sims["anthropic"].url, "api_key": "sk-lab-anthropic"},
            "bedrock": {
                "kind": "bedrock",
                "base_url": sims["bedrock"].url,
                "region": "us-east-1",
                "aws_access_key_id": AWS_KEY_ID,
                "aws_secret_access_key": AWS_SECRET,
            },
            "vertex": {
                "kind": "vertex",
                "base_url": sims["vertex"].url + "/v1",
                "region": "us-east5",
                "project": "ezat-lab-project",
                "service_account_json": json.dumps(sims["vertex"].service_account),
            },
        }
        for label, config in configs.items():
            dep, _ = upsert_deployment(name=f"plab-{token}-{label}", model_ids=[model_id], **config)
            mine[label] = LabDeployment(
                dep.name, dep.id, dep.weight, dep.max_concurrency, dep.base_url
            )
        serve_all = [
            LabDeployment(d.name, d.id, d.weight, d.max_concurrency, d.base_url)
            for d in Deployment.objects.filter(enabled=True, serves_all_models=True)
        ]
    lab = PlatformLab(
        stack=stack,
        model=model_id,
        upstream_model=clone.default_upstream_id,
        token=token,
        key=stack.new_key(),
        mine=mine,
        serve_all=serve_all,
        sims=sims,
    )
    wait_for_model(stack.url, lab.key.secret, model_id)
    return lab
