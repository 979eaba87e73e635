"""The broker's own request counters, read over Jolokia, and cost-per-publish arithmetic.

A broker started with ``ClusterSpec.metrics_port`` serves its JMX MBeans as JSON. Every request the
broker handles ticks the Meter ``kafka.network:type=RequestMetrics,name=RequestsPerSec,request=<Type>,
version=<v>``; its ``Count`` attribute is the total since start. Sampling the counters before and
after a leg of the benchmark and dividing the difference by the messages acknowledged in that leg
gives the broker's requests per publish by request type.

Pure helpers (parsing, differences, per-message arithmetic, table text) are separate from the one
HTTP read so they can be tested without a broker.
"""

from __future__ import annotations

import json
import math
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from typing import Any

REQUESTS_MBEAN = "kafka.network:type=RequestMetrics,name=RequestsPerSec,*"
# The types named first in the table, in this order (others follow, most frequent first).
TABLE_ORDER = ("Produce", "Fetch", "FetchConsumer", "FetchFollower", "AddPartitionsToTxn",
               "AddPartitionsToTxnVerification", "AddOffsetsToTxn", "EndTxn", "TxnOffsetCommit",
               "WriteTxnMarkers", "InitProducerId", "FindCoordinator", "Metadata", "OffsetCommit", "OffsetFetch",
               "Heartbeat", "JoinGroup", "SyncGroup", "ConsumerGroupHeartbeat", "ListOffsets", "ApiVersions")
#: Meters the broker ticks *as well as* another one for the same request: every Fetch also counts as
#: FetchConsumer or FetchFollower. They are shown under it and left out of totals.
SUB_METERS = {"FetchConsumer": "Fetch", "FetchFollower": "Fetch"}


def total_requests(counts: Mapping[str, float]) -> float:
    """All requests in ``counts``, each once (sub-meters such as FetchConsumer left out)."""
    return sum(v for t, v in counts.items() if t not in SUB_METERS)


def _mbean_props(name: str) -> dict[str, str]:
    """The key properties of an ObjectName (``domain:k=v,k=v``); values here are never quoted."""
    _, _, props = name.partition(":")
    out = {}
    for part in props.split(","):
        key, sep, value = part.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def parse_request_counts(body: Mapping[str, Any]) -> dict[str, int]:
    """Request counts by type from a Jolokia read of ``REQUESTS_MBEAN``'s ``Count`` attribute.

    The broker keeps one meter per (request type, API version); this sums the versions. Raises
    ValueError when the answer is not a successful read.
    """
    return _meter_counts(body, lambda props: props["request"] if props.get("name") == "RequestsPerSec"
                         and "request" in props else None)


def _meter_counts(body: Mapping[str, Any], key_of: Callable[[dict[str, str]], str | None]) -> dict[str, int]:
    """The ``Count`` of each meter of a Jolokia pattern read, added up by ``key_of(its key properties)``
    (None: not counted). No meter yet is no counts; a failed or malformed read raises ValueError."""
    if body.get("status") == 404 and body.get("error_type") == "javax.management.InstanceNotFoundException":
        return {}  # no meter matches yet: the broker registers one at the first request of its type
    if body.get("status") != 200:
        raise ValueError(f"Jolokia read failed: status {body.get('status')}: {body.get('error', 'no detail')}")
    value = body.get("value")
    if not isinstance(value, dict):
        raise ValueError(f"Jolokia read of a pattern should answer a map of MBeans, got {type(value).__name__}")
    counts: dict[str, int] = {}
    for name, attrs in value.items():
        key = key_of(_mbean_props(name))
        if key is None:
            continue
        count = attrs.get("Count") if isinstance(attrs, dict) else attrs
        if not isinstance(count, int | float):
            raise ValueError(f"{name}: Count is {count!r}")
        counts[key] = counts.get(key, 0) + int(count)
    return counts


def read_request_counts(base_url: str, timeout_s: float = 10.0) -> dict[str, int]:
    """Read the broker's request counts by type from the Jolokia agent at ``base_url``."""
    url = f"{base_url.rstrip('/')}/read/{REQUESTS_MBEAN}/Count"
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - our own loopback URL
        return parse_request_counts(json.loads(resp.read()))


ERRORS_MBEAN = "kafka.network:type=RequestMetrics,name=ErrorsPerSec,*"


def parse_error_counts(body: Mapping[str, Any]) -> dict[str, int]:
    """Error answers by ``request/ERROR`` from a Jolokia read of ``ERRORS_MBEAN``'s ``Count``.

    The broker ticks ``ErrorsPerSec,request=<Type>,error=<CODE>`` for every answer, ``error=NONE``
    included; those are left out. Raises ValueError when the answer is not a successful read."""
    return _meter_counts(body, lambda props: f"{props['request']}/{props['error']}"
                         if props.get("name") == "ErrorsPerSec" and "request" in props
                         and props.get("error", "NONE") != "NONE" else None)


def read_error_counts(base_url: str, timeout_s: float = 10.0) -> dict[str, int]:
    """Read the broker's error answers by ``request/ERROR`` from the Jolokia agent at ``base_url``."""
    url = f"{base_url.rstrip('/')}/read/{ERRORS_MBEAN}/Count"
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - our own loopback URL
        return parse_error_counts(json.loads(resp.read()))


def count_delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """Requests per type between two samples (a type first seen in ``after`` started from 0)."""
    delta = {t: after[t] - before.get(t, 0) for t in after}
    if any(v < 0 for v in delta.values()):
        raise ValueError(f"request counters went backwards (broker restarted?): {delta}")
    return {t: v for t, v in delta.items() if v > 0}


def per_message(values: Mapping[str, float], messages: int, scale: float = 1.0) -> dict[str, float]:
    """Each value x ``scale`` / ``messages`` (NaN when no message was acknowledged)."""
    return {k: (v * scale / messages if messages > 0 else math.nan) for k, v in values.items()}


def cpu_us_per_message(cpu_s: Mapping[str, float], messages: int,
                       parts: Iterable[str] | None = None) -> dict[str, float]:
    """CPU microseconds per acknowledged message for each process, and their ``total``.

    ``parts`` names the processes the total adds up (default: all): a raw baseline leg totals the
    broker and the client, not the idle services beside them.
    """
    out = per_message(cpu_s, messages, 1e6)
    names = list(cpu_s) if parts is None else [p for p in parts if p in cpu_s]
    out["total"] = sum(out[n] for n in names) if messages > 0 else math.nan
    return out


def ordered_types(rows: Iterable[Mapping[str, float]]) -> list[str]:
    """The request types seen in any row: ``TABLE_ORDER`` first, the rest by falling total."""
    seen: dict[str, float] = {}
    for row in rows:
        for t, v in row.items():
            seen[t] = seen.get(t, 0.0) + v
    first = [t for t in TABLE_ORDER if t in seen]
    rest = sorted((t for t in seen if t not in TABLE_ORDER), key=lambda t: (-seen[t], t))
    return first + rest


def requests_table(legs: list[dict[str, Any]], idle_per_s: Mapping[str, float] | None = None,
                   min_per_msg: float = 0.0005) -> str:
    """A table of requests per acknowledged message: one column per leg, one row per request type.

    Each leg is ``{"label", "messages", "per_message": {type: requests per message}}``. Types below
    ``min_per_msg`` in every leg are left out of the rows (still counted in the "all types" row).
    ``idle_per_s``: the broker's requests per second while nothing is published, as a last column.
    """
    types = [t for t in ordered_types(leg["per_message"] for leg in legs)
             if any(leg["per_message"].get(t, 0.0) >= min_per_msg for leg in legs)]
    width = max(10, *(len(leg["label"]) for leg in legs)) if legs else 10
    idle = f" {'idle /s':>8}" if idle_per_s is not None else ""
    head = f"{'broker requests per acked msg':<30} " + " ".join(f"{leg['label']:>{width}}" for leg in legs) + idle

    def idle_cell(value: float) -> str:
        return f" {value:>8.2f}" if idle_per_s is not None else ""

    out = [head, "-" * len(head)]
    for t in types:
        name = f"  of which {t}" if t in SUB_METERS else t
        out.append(f"{name:<30} " + " ".join(f"{leg['per_message'].get(t, 0.0):>{width}.4f}" for leg in legs)
                   + idle_cell((idle_per_s or {}).get(t, 0.0)))
    out.append(f"{'all types':<30} " + " ".join(f"{total_requests(leg['per_message']):>{width}.4f}" for leg in legs)
               + idle_cell(total_requests(idle_per_s or {})))
    out.append(f"{'messages acked':<30} " + " ".join(f"{leg['messages']:>{width},}" for leg in legs)
               + (f" {'':>8}" if idle_per_s is not None else ""))
    return "\n".join(out)


def cpu_table(rows: list[dict[str, Any]], procs: list[str]) -> str:
    """CPU µs per acknowledged message: one row per leg, one column per process and the total.

    Each row is ``{"label", "messages", "us_per_msg": {proc: µs, "total": µs}, "parts": [...]}``;
    a process outside the row's ``parts`` (idle beside a raw leg) is shown in parentheses.
    """
    head = f"{'CPU µs per acked message':<34} {'msgs':>7} " + " ".join(f"{p:>13}" for p in procs) + f" {'total':>9}"
    out = [head, "-" * len(head)]
    for row in rows:
        cells = []
        for p in procs:
            v = row["us_per_msg"].get(p, math.nan)
            cells.append(f"{v:>13.1f}" if p in row["parts"] else f"{f'({v:.1f})':>13}")
        out.append(f"{row['label']:<34} {row['messages']:>7,} " + " ".join(cells)
                   + f" {row['us_per_msg']['total']:>9.1f}")
    return "\n".join(out)


#: The processes a leg's total CPU adds up: our pipeline uses all four; a raw confluent-kafka leg only
#: the broker and the client (the services are idle beside it and shown apart).
PROJECT_PARTS = ("worker", "projection", "broker", "bench client")
RAW_PARTS = ("broker", "bench client")


def leg_cost(phase: Mapping[str, Any], label: str, leg: str, messages: int) -> dict[str, Any]:
    """CPU µs per acknowledged message by process (and total), and the broker's requests per message by
    type when the phase has them, for one measured leg (a `CpuMeter` phase entry)."""
    parts = PROJECT_PARTS if leg == "project" else RAW_PARTS
    out: dict[str, Any] = {"label": label, "phase": phase["phase"], "leg": leg, "messages": messages,
                           "wall_s": phase["wall_s"], "parts": list(parts), "cpu_s": dict(phase["cpu_s"]),
                           "us_per_msg": cpu_us_per_message(phase["cpu_s"], messages, parts)}
    requests = phase.get("broker_requests")
    if requests is not None:
        out["requests"] = dict(requests)
        out["per_message"] = per_message(requests, messages)
        out["requests_per_message"] = total_requests(requests) / messages if messages > 0 else math.nan
    return out


def transactions_note(leg: Mapping[str, Any]) -> str | None:
    """What the transactional requests of a leg of our pipeline say (None without request counts)."""
    per = leg.get("per_message")
    if not per or not per.get("EndTxn"):
        return None
    end = per["EndTxn"]
    same = ", ".join(f"{t} {per.get(t, 0.0) / end:.2f}" for t in ("AddOffsetsToTxn", "TxnOffsetCommit",
                                                                    "WriteTxnMarkers", "Produce"))
    return (f"{leg['label']}: {1 / end:.1f} messages per transaction (EndTxn {end:.4f}/msg); "
            f"per transaction: {same}")
