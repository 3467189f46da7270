"""The Grafana dashboard for sites (deploy/grafana/dsportal.json, docs/operations.md): it parses as a dashboard, every
panel asks Prometheus, and every query names only metrics that the portal's endpoint or the hub's /hub/metrics
exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jupyterhub.metrics  # noqa: F401  (registers the hub's metrics in prometheus_client's registry)
import prometheus_client

import portal.service.app  # noqa: F401  (the dashboard as it runs: every module that counts into REGISTRY)
from portal.config import PortalConfig
from portal.scheduler.snapshot import ClusterSnapshot
from portal.service.prometheus import REGISTRY, Scrape

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "dsportal.json"
METRIC = re.compile(r"\b(?:dsportal|jupyterhub)_[a-z0-9_]+\b")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",),
            "summary": ("_count", "_sum")}


def exported(families) -> set[str]:
    """The sample names a scrape can hold, family by family (a counter's `_total`, a histogram's parts)."""
    return {family.name + suffix for family in families for suffix in SUFFIXES.get(family.type, ("",))}


def test_the_dashboard_parses_and_every_query_names_a_metric_that_exists():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "dsportal" and dashboard["panels"]
    portal = exported([*REGISTRY.collect(), *Scrape(PortalConfig(), {}, {}, ClusterSnapshot(0.0), False).collect()])
    hub = exported(m for m in prometheus_client.REGISTRY.collect() if m.name.startswith("jupyterhub_"))
    assert "dsportal_gpu_held_seconds_total" in portal and "jupyterhub_running_servers" in hub
    named = set()
    for panel in dashboard["panels"]:
        assert panel["datasource"]["type"] == "prometheus" and panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = set(METRIC.findall(target["expr"]))
            assert names, (panel["title"], target["expr"])  # every query asks for a metric by name
            named |= names
    assert not named - portal - hub, f"queries name metrics that nothing exports: {sorted(named - portal - hub)}"
    assert {n for n in named if n.startswith("dsportal_")} == portal  # every figure the portal exports has a panel
