"""The Prometheus config, the alert rules and the Grafana dashboard only name what the code defines.

Pure: the set of defined metric names is read from the code itself (every metric object the
`watchtower.metrics` modules register, and every collector run once against empty workers), then
every PromQL expression of the dashboard and the alerts is checked against it. Also: compose
scrapes every Watchtower service it runs, the dashboard uses the provisioned data source, and every
alert's runbook link names a section of docs/operations.md.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.registry import Collector

from watchtower.delivery.health import DeliveryHealth
from watchtower.metrics import exposition, http, ingest, keymgr, projection, side_workers, sse, worker  # noqa: F401
from watchtower.metrics.consumer_lag import ConsumerLag
from watchtower.metrics.group_lag import GroupLagExporter
from watchtower.replay.health import ReplayHealth
from watchtower.workers.health import HealthFile
from watchtower.workers.snapshots import SnapshotPolicy

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = REPO / "compose" / "prometheus"
GRAFANA = REPO / "compose" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "watchtower.json"
OPERATIONS = REPO / "docs" / "operations.md"

_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created"),
             "gauge": ("",), "info": ("_info",), "summary": ("", "_count", "_sum", "_created")}
_NAME = re.compile(r"\b((?:watchtower|process)_[a-z0-9_]+|up)\b")


class _Fake:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


def _collectors() -> list[Collector]:
    """Every scrape-time collector of the services, over empty workers."""
    return [
        worker.WorkerCollector(_Fake(health=HealthFile(None, "w"), snapshots=SnapshotPolicy())),
        side_workers.TxWorkerCollector(_Fake(kind="delivery", health=DeliveryHealth("d", ""))),
        side_workers.TxWorkerCollector(_Fake(kind="replay", health=ReplayHealth("r", ""))),
        projection.collector(),
        projection.PayloadCacheMeter(_Fake(get=lambda _s, _q: None, bytes=0)),
        keymgr.SealedStreams(_Fake(sealed_streams={})),
        ConsumerLag("worker"),
        ingest.AggregatorCollector(_Fake(health=lambda: {"tasks": 0, "published": 0, "failed": {}, "quarantined": {},
                                                         "pending": 0, "tick_to_ack_ms": None})),
        ingest.RunnerCollector(_Fake(health=lambda: {"results": 0, "late": 0, "quarantined": {}})),
        GroupLagExporter("127.0.0.1:1", {}),
    ]


def defined_names() -> set[str]:
    """Every sample name the code can expose."""
    names = {"up"}
    families = list(REGISTRY.collect())
    for collector in _collectors():
        families.extend(collector.collect())
    for family in families:
        base = family.name
        for suffix in _SUFFIXES.get(family.type, ("",)):
            names.add(base + suffix)
        names.update(s.name for s in family.samples)
    return names


def _exprs_of_dashboard(dash: dict[str, Any]) -> list[str]:
    out = []
    for panel in dash["panels"]:
        out.extend(t["expr"] for t in panel.get("targets", []))
        for inner in panel.get("panels", []):
            out.extend(t["expr"] for t in inner.get("targets", []))
    return out


def _alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _names_in(expr: str) -> set[str]:
    without_strings = re.sub(r'"[^"]*"', '""', expr)  # label values such as route patterns
    return set(_NAME.findall(without_strings))


def test_the_code_defines_the_metrics_the_issue_asks_for() -> None:
    names = defined_names()
    for name in ("watchtower_build_info", "process_resident_memory_bytes", "process_open_fds",
                 "process_cpu_seconds_total", "watchtower_worker_commands_total",
                 "watchtower_worker_batch_records_bucket", "watchtower_worker_commit_seconds_bucket",
                 "watchtower_worker_aborted_batches_total", "watchtower_quarantined_records_total",
                 "watchtower_worker_owned_partitions", "watchtower_worker_snapshot_age_seconds",
                 "watchtower_fences_total", "watchtower_projection_fold_lag_records",
                 "watchtower_projection_fold_lag_seconds", "watchtower_projection_folded_records_total",
                 "watchtower_projection_open_long_polls", "watchtower_http_request_seconds_bucket",
                 "watchtower_keymgr_operations_total", "watchtower_keymgr_sealed_streams",
                 "watchtower_replay_replays", "watchtower_replay_records_reemitted_total",
                 "watchtower_delivery_pending", "watchtower_delivery_dropped",
                 "watchtower_delivery_block_deliveries_bucket", "watchtower_sse_open_connections",
                 "watchtower_sse_lagged_closes_total", "watchtower_sse_events_total",
                 "watchtower_consumer_lag_records", "watchtower_projection_payload_cache_hits_total",
                 "watchtower_consumer_group_lag_records"):
        assert name in names, name


def test_every_metric_the_dashboard_and_the_alerts_name_is_defined() -> None:
    names = defined_names()
    dash = json.loads(DASHBOARD.read_text())
    exprs = _exprs_of_dashboard(dash) + [rule["expr"] for rule in _alerts()]
    assert len(exprs) > 30
    unknown = {f"{n} (in {e!r})" for e in exprs for n in _names_in(e) if n not in names}
    assert unknown == set()
    # A broken name is caught (the check is not vacuous).
    assert _names_in('rate(watchtower_worker_comands_total[1m])') - names == {"watchtower_worker_comands_total"}


def test_the_dashboard_uses_the_provisioned_data_source_and_is_provisioned() -> None:
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    source = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    uid = source["datasources"][0]["uid"]
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == uid, panel["title"]
    provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "watchtower.yml").read_text())
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]["grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in compose["volumes"])
    assert mounts["./compose/grafana/dashboards"] == provider["providers"][0]["options"]["path"]


def test_compose_scrapes_every_watchtower_service_it_runs() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    running = {name for name, svc in compose["services"].items()
               if svc.get("command", [])[:2] == ["python", "-m"]}
    assert {"worker-1", "api-1", "gateway", "replay-worker", "delivery-worker"} <= running
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    targets = {t for job in config["scrape_configs"] for sc in job.get("static_configs", []) for t in sc["targets"]}
    port = compose["x-watchtower-env"]["WATCHTOWER_METRICS_PORT"]
    assert {f"{name}:{port}" for name in running} <= targets


def test_every_alert_has_a_runbook_section() -> None:
    headings = {re.sub(r"[^a-z0-9_ -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                for line in OPERATIONS.read_text().splitlines() if line.startswith("#")}
    alerts = _alerts()
    assert len(alerts) >= 6
    for rule in alerts:
        page, _, anchor = rule["annotations"]["runbook"].partition("#")
        assert page == "docs/operations.md"
        assert anchor in headings, rule["alert"]
    kinds = " ".join(rule["expr"] for rule in alerts)
    for needed in ("lag", "quarantined", "aborted", "fences"):
        assert needed in kinds, needed


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus package) is not installed")
def test_promtool_accepts_the_rules() -> None:
    result = subprocess.run(["promtool", "check", "rules", str(PROMETHEUS / "alerts.yml")], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
