"""The Grafana dashboard kept in the repository (docker/grafana/dashboards/ezat-router.json)
against the running cluster: every PromQL query names only metrics the gateways export, read
from their live /metrics (no list of names is written down here), and Prometheus, scraping the
three nodes, parses and evaluates every query.

The Celery workers export no metrics (no /metrics endpoint, no exporter); the reconciliation
lag the dashboard shows is a gauge the gateways compute at scrape time
(gateway/metrics_collector.py). `up` is Prometheus's own series for its scrape targets."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import promql_parser
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.conftest import ClusterContext

pytestmark = pytest.mark.cluster

DASHBOARD = Path(__file__).resolve().parents[2] / "docker/grafana/dashboards/ezat-router.json"
PROMETHEUS_OWN = frozenset({"up"})
# Grafana's interval variables, replaced by what Grafana would put there for a 1 s scrape.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
# The sample names of a family by its type (the exposition format's suffixes; `_created` is
# switched off in gateway/metrics_collector.py).
SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "gauge": ("",),
    "info": ("_info",),
    "stateset": ("",),
    "unknown": ("",),
}


def queries() -> list[tuple[str, str]]:
    """(panel title, PromQL with Grafana's variables substituted) of every target."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, f"{panel['title']}: unknown Grafana variable in {expr}"
            found.append((panel["title"], expr))
    return found


def selected_metrics(node: Any) -> Iterator[str]:
    """The metric names of every vector selector in a parsed PromQL expression."""
    if isinstance(node, promql_parser.VectorSelector):
        if node.name:
            yield node.name
        for matcher in node.matchers.matchers:
            if matcher.name == "__name__":
                yield matcher.value
        return
    if isinstance(node, promql_parser.MatrixSelector):
        yield from selected_metrics(node.vector_selector)
        return
    for child in ("expr", "lhs", "rhs", "param"):
        if (value := getattr(node, child, None)) is not None:
            yield from selected_metrics(value)
    for arg in getattr(node, "args", None) or ():
        yield from selected_metrics(arg)


def exported_names(exposition: str) -> set[str]:
    """Every sample name a /metrics text can carry: the samples present, and for each family
    declared (a labelled metric with no series yet still has its HELP and TYPE) the names
    its type gives it."""
    names = set()
    for family in text_string_to_metric_families(exposition):
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
        names.update(sample.name for sample in family.samples)
    return names


def test_selected_metrics_reads_every_selector() -> None:
    """The walker itself: selectors inside functions, aggregations, binary operations,
    subqueries and `__name__` matchers are all found (a walker that found none would make the
    dashboard test pass on anything)."""
    parsed = promql_parser.parse(
        "histogram_quantile(0.9, sum by (le) (rate(a_bucket[1m]))) / on() group_left "
        'clamp_min(sum(b) + max_over_time(c[5m:1m]), 1) or -{__name__="d"} > bool 3'
    )
    assert sorted(selected_metrics(parsed)) == ["a_bucket", "b", "c", "d"]


def test_every_dashboard_query_names_an_exported_metric(cluster: ClusterContext) -> None:
    exported: set[str] = set()
    for node in cluster.cluster.nodes.values():
        answer = httpx.get(node.url + "/metrics", timeout=30)
        assert answer.status_code == 200, answer.text[:300]
        exported |= exported_names(answer.text)
    assert re.search(r"^ezat_", "\n".join(exported), re.M), "no gateway metric exported"
    found = queries()
    assert len(found) >= 20
    unknown = {}
    for title, expr in found:
        names = set(selected_metrics(promql_parser.parse(expr)))
        assert names, f"{title}: {expr} selects no metric"
        if missing := names - exported - PROMETHEUS_OWN:
            unknown[title] = sorted(missing)
    assert not unknown, f"queries naming metrics no gateway exports: {unknown}"


def test_prometheus_evaluates_every_dashboard_query(cluster: ClusterContext) -> None:
    """The real Prometheus (Debian's, scraping the three nodes) parses and evaluates every
    query; those behind the panels the issue names return series from the traffic the cluster
    tests sent."""
    prometheus = cluster.cluster.prometheus
    assert prometheus is not None
    results = {}
    for title, expr in queries():
        answer = prometheus.api(expr)
        assert answer.status_code == 200, f"{title}: {expr}: {answer.text}"
        body = answer.json()
        assert body["status"] == "success", f"{title}: {expr}: {body}"
        results.setdefault(title, []).extend(body["data"]["result"])
    for title in (
        "Gateway nodes up",
        "Requests/s by API",
        "Time to first token",
        "Tokens/s by class",
        "Cost (USD/hour) by model",
        "Deployments in cooldown",
        "Usage writer lag",
        "Reconciliation lag",
    ):
        assert results[title], f"{title}: no series"
    (up,) = prometheus.query('count(up{job="ezat"} == 1)')
    assert float(up["value"][1]) == len(cluster.cluster.nodes)
