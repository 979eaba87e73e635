"""`GroupReader`: a member of a consumer group on some topics, read_committed, answering plain values.

The group's coordinator shares the topics' partitions among its members; the reader tells its
caller which partitions it was given and which it lost (`on_assign`, `on_revoke`, called from
`poll` on the polling thread), and the caller may start the partitions it was given at an instant
rather than where the group's committed offsets place them. Records come as
`records.Record`, and, when asked for, ends of partition as `records.EndOfPartition`.

A static member (`instance_id`: ``group.instance.id``) takes its partitions back at once after a
restart instead of waiting out its dead self's session, and a second process under the same id
fences the first. Static membership has a trap. When the group coordinator is away longer than
the session (a broker killed or restarted), librdkafka rejoins under the same instance id with a
new member id, the coordinator fences the old one, and the consumer's next request under it fails
with FENCED_INSTANCE_ID, a *fatal* error: the consumer never delivers a record again
(confluentinc/librdkafka#3437). A static reader therefore replaces a consumer that failed fatally
with a new one of the same configuration, which joins under the instance id again (fencing, in
turn, whatever held it). One fenced again within `REJOIN_WINDOW_S` of its last rejoin most likely
shares its instance id with another process: it says so and waits longer before each next rejoin
(up to `MAX_REJOIN_WAIT_S`), so two such processes take turns slowly instead of fencing each other
in a loop.

Transient client errors are the client's to retry: they are logged, never raised. A (dynamic)
member whose client failed for good raises `BrokerError`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from watchtower.topics.batches import failed_fatally
from watchtower.topics.connection import GroupTimeouts, kafka_config
from watchtower.topics.errors import BrokerError
from watchtower.topics.records import EndOfPartition, Record, end_of_partition, record_of

log = logging.getLogger("watchtower.topics.group_reader")

REJOIN_WINDOW_S: Final = 60.0
MAX_REJOIN_WAIT_S: Final = 30.0

#: (topic, partition) pairs, in the order the coordinator gave them
Partitions = list[tuple[str, int]]
#: Called with the partitions just assigned; answers the instant (Unix ms) to read them from, or
#: None to read them where the group's committed offsets (else the earliest record) place them.
AssignHook = Callable[[Partitions], int | None]
#: Called with the partitions just taken away, before another member may read them.
RevokeHook = Callable[[Partitions], None]


class GroupReader:
    """A member of `group` reading `topics` (module docstring).

    `auto_commit`: the client commits what it handed over, now and then (else nothing is committed);
    `range_assignor`: partition p of every topic goes to the same member (co-partitioned topics);
    `partition_ends`: `poll` also answers an `EndOfPartition` each time a partition is read to its
    end; `instance_id`: a static member that rejoins after a fatal error. The session timeout is
    the deployment's (`connection.GroupTimeouts`). `factory` makes the client (tests pass a fake).
    Not thread-safe: one thread polls it, and the hooks run on that thread.
    """

    def __init__(self, bootstrap: str, topics: Sequence[str], *, group: str, auto_commit: bool,
                 range_assignor: bool = False, partition_ends: bool = False, instance_id: str | None = None,
                 on_assign: AssignHook | None = None, on_revoke: RevokeHook | None = None,
                 factory: Callable[[dict[str, Any]], Consumer] = Consumer) -> None:
        timeouts = GroupTimeouts.from_env()
        settings: dict[str, Any] = {
            "group.id": group, "enable.auto.commit": auto_commit,
            "session.timeout.ms": timeouts.session_ms, "heartbeat.interval.ms": timeouts.heartbeat_ms,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest"}
        if range_assignor:
            settings["partition.assignment.strategy"] = "range"
        if partition_ends:
            settings["enable.partition.eof"] = True
        if instance_id is not None:
            settings["group.instance.id"] = instance_id
        self._config = kafka_config(bootstrap, **settings)
        self.topics = list(topics)
        self._name = ", ".join(self.topics)
        self._static = instance_id is not None
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self._factory = factory
        #: how many times a fatal error made the reader join again with a new client
        self.replaced = 0
        self._last_rejoin = float("-inf")
        self._quick_rejoins = 0
        self._consumer = self._subscribe()

    def _subscribe(self) -> Consumer:
        consumer = self._factory(self._config)
        hooks: dict[str, Any] = {}
        if self._on_assign is not None:
            hooks["on_assign"] = self._assigned
        if self._on_revoke is not None:
            hooks["on_revoke"] = self._revoked
        consumer.subscribe(self.topics, **hooks)
        return consumer

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        assert self._on_assign is not None
        since = self._on_assign([(tp.topic, tp.partition) for tp in partitions])
        if since is None:
            return  # the client assigns them where the group's offsets say
        wanted = [TopicPartition(tp.topic, tp.partition, since) for tp in partitions]
        consumer.assign(consumer.offsets_for_times(wanted, timeout=30) if wanted else [])

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        assert self._on_revoke is not None
        self._on_revoke([(tp.topic, tp.partition) for tp in partitions])

    def poll(self, max_records: int, timeout_s: float) -> list[Record | EndOfPartition]:
        """Up to `max_records` records (and ends of partition, if asked for), waiting up to
        `timeout_s` for them (the client's ``consume``); the hooks run in here.

        After a fatal error a static member answers what came before it and joins again; any other
        member raises `BrokerError`."""
        out: list[Record | EndOfPartition] = []
        for msg in self._consumer.consume(max_records, timeout_s):
            error = msg.error()
            if error is None:
                out.append(record_of(msg))
            elif error.code() == KafkaError._PARTITION_EOF:
                out.append(end_of_partition(msg))
            elif failed_fatally(error):  # the event carries _FATAL
                if not self._static:
                    raise BrokerError(str(error))
                self._rejoin(error)
                return out
            else:
                log.warning("%s: %s", self._name, error)
        return out

    def _rejoin(self, error: KafkaError) -> None:
        log.error("%s: the reader failed (%s); it joins its group again with a new consumer", self._name, error.str())
        self.close()
        now = time.monotonic()
        self._quick_rejoins = self._quick_rejoins + 1 if now - self._last_rejoin < REJOIN_WINDOW_S else 0
        if self._quick_rejoins:
            wait = min(MAX_REJOIN_WAIT_S, 2.0 ** self._quick_rejoins)
            log.error("%s: fenced again %.0f s after rejoining: another process may run as the same member "
                      "(group.instance.id %s); rejoining in %.0f s", self._name, now - self._last_rejoin,
                      self._config["group.instance.id"], wait)
            time.sleep(wait)
        self.replaced += 1
        self._last_rejoin = time.monotonic()
        self._consumer = self._subscribe()

    def close(self) -> None:
        """Leave the group (a client that failed fatally may refuse: that is logged, not raised)."""
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("%s: closing the reader failed: %s", self._name, exc)
