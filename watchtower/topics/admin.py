"""Idempotent creation and inspection of the catalogue's topics."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from watchtower.topics.catalogue import TopicSpec, catalogue
from watchtower.topics.connection import kafka_config


@dataclass(frozen=True)
class TopicResult:
    """What ``ensure_topics`` did with one topic."""

    name: str
    action: str  # "created" | "exists"
    partitions: int
    replication_factor: int


class TopicMismatchError(Exception):
    """An existing topic has a partition count that breaks co-partitioning."""


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({**kafka_config(bootstrap), "log_level": 0})


def ensure_topics(bootstrap: str, specs: list[TopicSpec] | None = None,
                  timeout: float = 30.0) -> list[TopicResult]:
    """Create every missing topic; leave existing ones alone. Safe to run any number of times.

    Replication factor is ``min(3, brokers)`` and ``min.insync.replicas`` 2 on three or more
    brokers, so the same call suits the embedded single node and a production cluster.

    Raises:
        TopicMismatchError: an existing topic has a different partition count than the catalogue.
    """
    specs = specs if specs is not None else catalogue()
    admin = _admin(bootstrap)
    md = admin.list_topics(timeout=timeout)
    brokers = len(md.brokers)
    rf = min(3, brokers)
    min_isr = 2 if rf >= 3 else 1
    results: list[TopicResult] = []
    missing: list[TopicSpec] = []
    for spec in specs:
        existing = md.topics.get(spec.name)
        if existing is None:
            missing.append(spec)
            continue
        if len(existing.partitions) != spec.partitions:
            raise TopicMismatchError(
                f"topic {spec.name} has {len(existing.partitions)} partitions but the catalogue needs "
                f"{spec.partitions}; co-partitioned topics must match, so recreate it or use another prefix"
            )
        results.append(TopicResult(spec.name, "exists", spec.partitions, len(existing.partitions[0].replicas)))
    if missing:
        futures = admin.create_topics(
            [NewTopic(s.name, s.partitions, rf, config=s.config(min_isr)) for s in missing],
            operation_timeout=timeout,
        )
        for spec in missing:
            try:
                futures[spec.name].result()
                action = "created"
            except KafkaException as exc:
                # Another `init` may have won the race; that is the idempotent outcome we want.
                if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                    raise
                action = "exists"
            results.append(TopicResult(spec.name, action, spec.partitions, rf))
        _wait_visible(admin, [s.name for s in missing], timeout)
    order = {s.name: i for i, s in enumerate(specs)}
    return sorted(results, key=lambda r: order[r.name])


def _wait_visible(admin: AdminClient, names: list[str], timeout_s: float, confirmations: int = 3) -> None:
    """Return once metadata shows every topic in ``names`` with a leader on every partition.

    On a multi-broker cluster a created topic reaches each broker's metadata a moment later, and a
    metadata request goes to any one broker, so the caller's next request (a describe, a produce)
    could still hear "no such topic". Several consecutive complete answers make that unlikely;
    after ``timeout_s`` it returns anyway and later callers retry as before.
    """
    deadline = time.monotonic() + timeout_s
    seen = 0
    while seen < confirmations and time.monotonic() < deadline:
        try:
            md = admin.list_topics(timeout=max(0.5, min(5.0, deadline - time.monotonic())))
        except KafkaException:
            md = None
        complete = md is not None and all(
            n in md.topics and md.topics[n].error is None and md.topics[n].partitions
            and all(p.leader >= 0 for p in md.topics[n].partitions.values())
            for n in names
        )
        seen = seen + 1 if complete else 0
        if seen < confirmations:
            time.sleep(0.1)


def describe_topics(bootstrap: str, specs: list[TopicSpec] | None = None) -> dict[str, dict[str, object]]:
    """Partition count and config of each catalogue topic that exists."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    specs = specs if specs is not None else catalogue()
    admin = _admin(bootstrap)
    md = admin.list_topics(timeout=10)
    names = [s.name for s in specs if s.name in md.topics]
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
    out: dict[str, dict[str, object]] = {}
    if not resources:
        return out
    for res, cfg in _describe_configs(admin, resources).items():
        out[res.name] = {
            "partitions": len(md.topics[res.name].partitions),
            "replication_factor": len(md.topics[res.name].partitions[0].replicas),
            "cleanup.policy": cfg["cleanup.policy"].value,
            "retention.ms": cfg["retention.ms"].value,
            "min.insync.replicas": cfg["min.insync.replicas"].value,
        }
    return out


def _describe_configs(admin: AdminClient, resources: list[Any], timeout_s: float = 15.0) -> dict[Any, Any]:
    """describe_configs, retried while a broker has not learned of a just-created topic yet.

    On a multi-broker cluster a topic is created by the controller and reaches each broker's
    metadata a moment later; a broker asked before then answers UNKNOWN_TOPIC_OR_PART.
    """
    deadline = time.monotonic() + timeout_s
    pending, done = list(resources), {}
    while pending:
        retry = []
        for res, fut in admin.describe_configs(pending).items():
            try:
                done[res] = fut.result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() >= deadline:
                    raise
                retry.append(res)
        pending = retry
        if pending:
            time.sleep(0.2)
    return done
