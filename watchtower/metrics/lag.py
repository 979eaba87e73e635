"""Lag, as `watchtower status` shows it: consumer groups from Kafka, projections from their ``/metrics``.

- A consumer group's lag per partition is the records a ``read_committed`` reader would still get
  after the group's committed offset. The offset arithmetic (last stable offset minus committed
  offset; a partition never committed counts from its start) overstates it on a transactionally
  written topic: a transaction's commit marker takes an offset after its last record, and an
  aborted transaction's records and marker take offsets no reader ever gets. So a group that
  consumed everything shows a raw lag of 1 or more. `group_lag` therefore reads, for each partition
  whose raw lag is at most `CHECK_AT_MOST`, what a ``read_committed`` reader gets from the committed
  offset to the end, and counts those records; a larger raw lag is reported as it is (``exact``:
  false), an upper bound.
- A projection folds by its own reader and commits no offsets: its lag is what it reports
  (``watchtower_projection_fold_lag_records`` / ``..._seconds``), read from its ``/metrics``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec
from prometheus_client.parser import text_string_to_metric_families

from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.groups import projection_fold_group, stream_worker_group, worker_group

#: A partition with a raw lag up to this is read to count its records exactly.
CHECK_AT_MOST: Final = 50


@dataclass
class GroupLag:
    """One consumer group's committed offsets against the ends of its topics' partitions."""

    group: str
    #: (topic, partition) -> (committed offset or None, last stable offset)
    partitions: dict[tuple[str, int], tuple[int | None, int]] = field(default_factory=dict)
    #: (topic, partition) -> records a read_committed reader still gets, where they were counted
    counted: dict[tuple[str, int], int] = field(default_factory=dict)

    def raw_lag_of(self, topic: str, partition: int) -> int:
        committed, end = self.partitions[(topic, partition)]
        return max(0, end - (committed if committed is not None else 0))

    def lag_of(self, topic: str, partition: int) -> int:
        counted = self.counted.get((topic, partition))
        return self.raw_lag_of(topic, partition) if counted is None else counted

    @property
    def total(self) -> int:
        return sum(self.lag_of(t, p) for t, p in self.partitions)

    @property
    def exact(self) -> bool:
        return all(tp in self.counted or self.raw_lag_of(*tp) == 0 for tp in self.partitions)

    def as_json(self) -> dict[str, Any]:
        return {"group": self.group, "lag": self.total, "exact": self.exact,
                "partitions": [{"topic": t, "partition": p, "committed": c, "end": e, "lag": self.lag_of(t, p)}
                               for (t, p), (c, e) in sorted(self.partitions.items())]}


def offsets_reader(bootstrap: str, group: str) -> Consumer:
    """A client that reads `group`'s committed offsets (`Consumer.committed`); it never joins the group."""
    return Consumer({**kafka_config(bootstrap), "group.id": group, "enable.auto.commit": False, "log_level": 0})


def group_lag(bootstrap: str, group: str, topics: Iterable[str], timeout_s: float = 10.0,
              admin: AdminClient | None = None, reader: Consumer | None = None) -> GroupLag:
    """The lag of `group` on every partition of `topics` (KafkaException when the cluster does not answer).

    The committed offsets are read by `reader` (`offsets_reader` of `group`; a new one, closed after,
    when None), not by the admin client: its ListConsumerGroupOffsets crashed the process on a
    fresh broker whose group coordinator was still loading (a segmentation fault in the client).
    """
    admin = admin or AdminClient({**kafka_config(bootstrap), "log_level": 3})
    names = list(topics)
    md = admin.list_topics(timeout=timeout_s)
    tps = [TopicPartition(t, p) for t in names if t in md.topics for p in sorted(md.topics[t].partitions)]
    out = GroupLag(group)
    if not tps:
        return out
    own = reader is None
    reader = reader or offsets_reader(bootstrap, group)
    try:
        committed = {(tp.topic, tp.partition): tp.offset for tp in reader.committed(tps, timeout=timeout_s)}
    finally:
        if own:
            reader.close()
    ends = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, isolation_level=IsolationLevel.READ_COMMITTED,
                              request_timeout=timeout_s)
    for tp, future in ends.items():
        end = int(future.result(timeout=timeout_s).offset)
        c = committed.get((tp.topic, tp.partition))
        out.partitions[(tp.topic, tp.partition)] = (c if c is not None and c >= 0 else None, end)
    small = {tp: out.partitions[tp] for tp in out.partitions if 0 < out.raw_lag_of(*tp) <= CHECK_AT_MOST}
    if small:
        out.counted = _count_records(bootstrap, small, timeout_s)
    return out


def _count_records(bootstrap: str, ranges: Mapping[tuple[str, int], tuple[int | None, int]],
                   timeout_s: float) -> dict[tuple[str, int], int]:
    """Records a read_committed reader gets in each [committed, end) range; partitions that did not
    reach their end within `timeout_s` are left out (their raw lag stands)."""
    consumer = Consumer({**kafka_config(bootstrap), "group.id": f"wt-lag-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "log_level": 3})
    counts = dict.fromkeys(ranges, 0)
    pending = set(ranges)
    try:
        consumer.assign([TopicPartition(t, p, c if c is not None else OFFSET_BEGINNING)
                         for (t, p), (c, _end) in ranges.items()])
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=500, timeout=0.2):
                tp = (str(m.topic()), int(m.partition() or 0))
                if tp not in pending:
                    continue
                err = m.error()
                if err is None:
                    if int(m.offset() or 0) < ranges[tp][1]:
                        counts[tp] += 1
                    else:
                        pending.discard(tp)
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(tp)
    finally:
        consumer.close()
    return {tp: n for tp, n in counts.items() if tp not in pending}


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
    admin = AdminClient({**kafka_config(bootstrap), "log_level": 3})
    for group, topics in worker_groups(prefix).items():
        try:
            groups.append(group_lag(bootstrap, group, topics, timeout_s, admin).as_json())
        except Exception as exc:  # the cluster did not answer: say so, per group
            groups.append({"group": group, "error": f"{type(exc).__name__}: {exc}"})
    views = {name: projection_lag(url) if url else {"error": "no metrics address written yet"}
             for name, url in sorted(projections.items())}
    return {"groups": groups, "projections": views}
