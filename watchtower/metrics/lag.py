"""Lag, as `watchtower status` shows it: consumer groups from Kafka, projections from their ``/metrics``.

- A consumer group's lag is read from Kafka by `topics.group_lag` (its committed offsets against
  its topics' ends, commit markers not counted where the raw lag is small); `worker_groups` names
  the groups of one deployment and the topics each consumes.
- A projection folds by its own reader and commits no offsets: its lag is what it reports
  (``watchtower_projection_fold_lag_records`` / ``..._seconds``), read from its ``/metrics``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from watchtower.topics.catalogue import topic_name
from watchtower.topics.group_lag import GroupLagReader
from watchtower.topics.groups import projection_fold_group, stream_worker_group, worker_group


def worker_groups(prefix: str | None) -> dict[str, list[str]]:
    """The consumer groups of one deployment's Kafka workers and the topics each consumes."""
    return {
        stream_worker_group(prefix): [topic_name(role, prefix) for role in ("commands", "internal", "ingest-commands")],
        worker_group("delivery", prefix): [topic_name("events", prefix), topic_name("messages", prefix)],
        worker_group("replay", prefix): [topic_name("replay", prefix)],
        # Where the projections record their folds' positions (lag only: nothing consumes through it).
        projection_fold_group(prefix): [topic_name(r, prefix) for r in ("events", "messages", "replay")],
    }


def scrape(url: str, timeout_s: float = 3.0) -> dict[str, list[tuple[dict[str, str], float]]]:
    """A ``/metrics`` page as {sample name: [(labels, value)]}, read with prometheus_client's parser."""
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (a local service's metrics)
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def projection_lag(url: str, timeout_s: float = 3.0) -> dict[str, Any]:
    """A projection's fold lag from its ``/metrics``: ``{"records", "seconds"}`` (the worst partition's
    seconds, the sum of records), or ``{"error"}`` when it does not answer."""
    try:
        samples = scrape(url, timeout_s)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return {"error": str(exc)}
    records = sum(v for _labels, v in samples.get("watchtower_projection_fold_lag_records", []))
    seconds = max((v for _labels, v in samples.get("watchtower_projection_fold_lag_seconds", [])), default=0.0)
    return {"records": int(records), "seconds": round(seconds, 3)}


def over(report: Mapping[str, Any], max_lag: int | None, max_lag_s: float | None) -> list[str]:
    """What in a `status` lag report is past the thresholds, one line each (empty: nothing)."""
    bad = []
    for g in report.get("groups", []):
        if max_lag is not None and "lag" in g and g["lag"] > max_lag:
            bad.append(f"group {g['group']} lags {g['lag']} records (> {max_lag})")
    for name, p in report.get("projections", {}).items():
        if "error" in p:
            continue
        if max_lag is not None and p["records"] > max_lag:
            bad.append(f"{name} lags {p['records']} records (> {max_lag})")
        if max_lag_s is not None and p["seconds"] > max_lag_s:
            bad.append(f"{name} lags {p['seconds']} s (> {max_lag_s:g} s)")
    return bad


def metrics_url(path: Path) -> str | None:
    """The URL a process wrote to its ``WATCHTOWER_METRICS_FILE`` (None: none yet)."""
    try:
        return str(json.loads(path.read_text())["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stack_lag(bootstrap: str, prefix: str, projections: Mapping[str, str | None],
              timeout_s: float = 10.0) -> dict[str, Any]:
    """`watchtower status`'s lag report: every worker group's lag, and each projection's (by name,
    from its metrics URL; None: it serves none yet)."""
    groups: list[dict[str, Any]] = []
    reader = GroupLagReader(bootstrap)
    try:
        for group, topics in worker_groups(prefix).items():
            try:
                groups.append(reader.read(group, topics, timeout_s).as_json())
            except Exception as exc:  # the cluster did not answer: say so, per group
                groups.append({"group": group, "error": f"{type(exc).__name__}: {exc}"})
    finally:
        reader.close()
    views = {name: projection_lag(url) if url else {"error": "no metrics address written yet"}
             for name, url in sorted(projections.items())}
    return {"groups": groups, "projections": views}
