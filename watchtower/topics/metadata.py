"""The cluster's metadata, asked for plainly: a topic's partitions and layout, and whether a broker answers.

Every question here is one metadata request with a bound; what comes back is a plain value, and a
topic the cluster does not serve is a `TopicUnavailableError` carrying the metadata's own reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import AdminClient

from watchtower.topics.connection import kafka_config
from watchtower.topics.errors import TopicUnavailableError

_MAX_REASON = 200


@dataclass(frozen=True, slots=True)
class TopicLayout:
    """How a topic is laid out: its partition count, and how many replicas each partition has."""

    partitions: int
    replication_factor: int


def _served(client: Any, topic: str, timeout_s: float) -> Any:
    """The metadata of `topic` as `client` sees it; `TopicUnavailableError` when the topic is missing,
    has an error or no partitions."""
    meta = client.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if meta is None:
        raise TopicUnavailableError(topic, "not in the metadata")
    if meta.error is not None:
        raise TopicUnavailableError(topic, str(meta.error))
    if not meta.partitions:
        raise TopicUnavailableError(topic, "no partitions")
    return meta


def partitions(client: Any, topic: str, timeout_s: float = 30.0) -> list[int]:
    """The partition ids of `topic`, ascending, as `client` (any Kafka client: consumer, producer or
    admin) sees them; `TopicUnavailableError` when the topic is missing, has an error or no partitions.

    Asking through a client the caller already holds costs no second connection."""
    return sorted(_served(client, topic, timeout_s).partitions)


def partition_count(bootstrap: str, topic: str, timeout_s: float = 30.0) -> int:
    """How many partitions `topic` has (`partitions`, through a client of its own)."""
    return len(partitions(_admin(bootstrap), topic, timeout_s))


def topic_layout(bootstrap: str, topic: str, timeout_s: float = 30.0) -> TopicLayout:
    """`topic`'s partition count and replication factor (the replicas of its lowest partition: a topic's
    partitions are created with one factor), through a client of its own; `TopicUnavailableError` as
    `partitions`."""
    meta = _served(_admin(bootstrap), topic, timeout_s)
    return TopicLayout(len(meta.partitions), len(meta.partitions[min(meta.partitions)].replicas))


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({**kafka_config(bootstrap), "log_level": 3})


class ClusterProbe:
    """Asks whether the cluster answers a metadata request, through one admin client kept between asks
    (a health endpoint asks every few seconds)."""

    def __init__(self, bootstrap: str) -> None:
        self._admin = _admin(bootstrap)

    def why_unreachable(self, topic: str, timeout_s: float) -> str | None:
        """None when a broker answered a metadata request for `topic` within `timeout_s`; else why not,
        in at most 200 characters. Never raises: a refusal and a transport failure both mean unreachable."""
        try:
            md = self._admin.list_topics(topic, timeout=timeout_s)
        except Exception as exc:  # KafkaException or a transport error: unreachable either way
            return str(exc)[:_MAX_REASON]
        return None if md.brokers else "no broker in the metadata"
