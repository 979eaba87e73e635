"""Metrics every Kafka worker shares (stream, delivery and replay workers), labelled by ``service``.

- ``watchtower_quarantined_records_total{service, topic, reason}``: records a fold or a worker
  refused and skipped. ``topic`` is the catalogue role (``events``, ``messages``, ...: the
  deployment's prefix is cut off) and ``reason`` a bounded class of the free-text reason
  (`reason_class`): the spec code it starts with, ``SNAPSHOT_REFUSED``, ``UNEXPECTED`` or ``OTHER``.
- ``watchtower_fences_total{service}``: times the worker's producer was fenced (a rival with its
  transactional id, or a transaction the coordinator aborted).
- ``watchtower_recoveries_total{service}``: starts over from the log (new producer, partitions rebuilt).
"""

from __future__ import annotations

import re
from typing import Final

from prometheus_client import Counter

QUARANTINED = Counter("watchtower_quarantined_records_total",
                      "Records refused and skipped by a fold or a worker, by topic role and reason class.",
                      ["service", "topic", "reason"])
FENCES = Counter("watchtower_fences_total", "Times this worker's transactional producer was fenced.", ["service"])
RECOVERIES = Counter("watchtower_recoveries_total",
                     "Starts over from the log: a new producer and every owned partition rebuilt.", ["service"])

_CODE: Final = re.compile(r"([A-Z][A-Z0-9_]{2,})\b")
#: More distinct codes than this per process are folded into OTHER: a bound, whatever the log holds.
MAX_REASONS: Final = 64
_seen: set[str] = set()


def topic_role(topic: str) -> str:
    """``wt.events`` -> ``events``: the catalogue role, the same in every deployment."""
    return topic.rsplit(".", 1)[-1] if "." in topic else topic


def reason_class(reason: str) -> str:
    """A bounded label for a free-text quarantine reason (module docstring)."""
    if reason.startswith("snapshot refused"):
        return "SNAPSHOT_REFUSED"
    if reason.startswith("unexpected "):
        return "UNEXPECTED"
    match = _CODE.match(reason)
    if match is None:
        return "OTHER"
    code = match.group(1)
    if code not in _seen:
        if len(_seen) >= MAX_REASONS:
            return "OTHER"
        _seen.add(code)
    return code


def quarantined(service: str, topic: str, reason: str) -> None:
    QUARANTINED.labels(service, topic_role(topic), reason_class(reason)).inc()
