"""What a Kafka call made through `watchtower.topics` raises when the cluster does not serve it.

Code above `topics` never names the Kafka client's own exception types: the modules here that
name their failures raise `BrokerError` (or a subclass saying more); the older ones pass the
client's exception on as it comes. `BROKER_ERRORS` holds both, for a caller that runs several
Kafka calls in one block and reports whichever fails (the demo's steps).
"""

from __future__ import annotations

from typing import Final

from confluent_kafka import KafkaException


class BrokerError(RuntimeError):
    """The cluster refused or did not answer a Kafka call, or a client failed for good; the message
    is the client's own reason, unchanged."""


class TopicUnavailableError(BrokerError):
    """A topic that is not in the cluster's metadata, has an error there, or has no partitions."""

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"topic {topic} is not available ({reason})")
        self.topic = topic
        #: why, as the metadata says it (the broker's error, or what is missing)
        self.reason = reason


#: Every exception a Kafka call through `topics` raises when the cluster fails it.
BROKER_ERRORS: Final[tuple[type[Exception], ...]] = (BrokerError, KafkaException)
