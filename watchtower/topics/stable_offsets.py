"""The last stable offsets of a topic's partitions, from an AdminClient replaced when it goes stale.

librdkafka's admin ListOffsets sends each partition's leader epoch from the client's metadata
cache and refreshes that cache only on NOT_LEADER_OR_FOLLOWER and LEADER_NOT_AVAILABLE
(``rd_kafka_admin_result_err_refresh``). After a broker restart a long-lived client therefore
keeps sending the old epoch and gets FENCED_LEADER_EPOCH until the cache entry expires
(``metadata.max.age.ms``, 15 minutes by default). A fresh client starts with an empty cache and
looks the leaders and their epochs up again, so `StableOffsets` replaces its client on such an answer.

A query that fails raises `BrokerError` (the client's reason) or `TimeoutError` (no answer in time).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Final

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from watchtower.topics.connection import kafka_config
from watchtower.topics.errors import BrokerError

log = logging.getLogger("watchtower.topics.stable_offsets")

#: A client failing this long without one answer is replaced, whatever its error.
RENEW_AFTER_S: Final = 10.0
#: The pause between two end-offset queries of one catch-up.
_RETRY_PAUSE_S: Final = 0.25
_MAX_REASON: Final = 300

#: Answers that mean the client's partition metadata (leader, leader epoch) is stale.
_STALE_METADATA: Final = frozenset({
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._NOENT,  # "Failed to query partition leaders: No leaders found"
})

#: Answers another query would only repeat: the principal may not read the topic, or is not who it says.
_PERMANENT: Final = frozenset({
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION,
    KafkaError._INVALID_ARG,
})


def _code(exc: Exception) -> int | None:
    """The Kafka error code of `exc`, None for a timeout."""
    return exc.args[0].code() if isinstance(exc, KafkaException) and exc.args else None


class StableOffsets:
    """The partitions' last stable offsets (read_committed), from an AdminClient replaced when it goes stale.

    Thread-safe: concurrent requests share one client; a failure replaces the client it came from
    (not a newer one) when the error names stale metadata, or when that client has not answered
    for `RENEW_AFTER_S`.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: list[int]) -> None:
        self._bootstrap, self._topic, self._partitions = bootstrap, topic, partitions
        self._lock = threading.Lock()
        self._admin = self._new_admin()
        self._failing_since: float | None = None
        self.renewals = 0

    def _new_admin(self) -> AdminClient:
        return AdminClient(kafka_config(self._bootstrap, log_level=3))

    def query(self, timeout_s: float) -> dict[int, int]:
        """``{partition: last stable offset}``, asked again after each failure until `timeout_s` is spent
        (then `BrokerError` or TimeoutError), except after an authorization failure (at once)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                admin = self._admin
            left = max(deadline - time.monotonic(), 0.1)
            try:
                futures = admin.list_offsets(
                    {TopicPartition(self._topic, p): OffsetSpec.latest() for p in self._partitions},
                    isolation_level=IsolationLevel.READ_COMMITTED,
                    request_timeout=left,
                )
                ends = {tp.partition: int(f.result(timeout=left).offset) for tp, f in futures.items()}
            except (KafkaException, TimeoutError) as exc:
                self._failed(admin, exc)
                if _code(exc) in _PERMANENT or deadline - time.monotonic() <= _RETRY_PAUSE_S:
                    if isinstance(exc, KafkaException):
                        raise BrokerError(str(exc)) from exc
                    raise
                time.sleep(_RETRY_PAUSE_S)  # a back-off between queries to the broker, not a synchronisation
                continue
            with self._lock:
                if admin is self._admin:
                    self._failing_since = None
            return ends

    def _failed(self, admin: AdminClient, exc: Exception) -> None:
        code = _code(exc)
        now = time.monotonic()
        with self._lock:
            if admin is not self._admin:
                return  # another request replaced it already
            if self._failing_since is None:
                self._failing_since = now
            if code not in _STALE_METADATA and now - self._failing_since < RENEW_AFTER_S:
                return
            # A fresh client starts with an empty metadata cache: its first query looks the
            # leaders and their current epochs up again. The old one is destroyed when the last
            # request still holding it lets go.
            self._admin = self._new_admin()
            self._failing_since = None
            self.renewals += 1
        log.warning("replaced the %s end-offsets client after %s", self._topic, str(exc)[:_MAX_REASON])
