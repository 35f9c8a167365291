"""Reading the nodes' Prometheus metrics in cluster tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from tests.cluster.conftest import ClusterContext


def node_metric(url: str, name: str) -> float:
    """A sample summed over its labels, from one node's /metrics."""
    text = httpx.get(url + "/metrics", timeout=30).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


def cluster_metric(cluster: ClusterContext, name: str) -> float:
    """A sample summed over its labels and over every node of the cluster."""
    return sum(node_metric(g.url, name) for g in cluster.cluster.nodes.values())
