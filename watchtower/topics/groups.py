"""The consumer groups (and so the transactional ids) of one deployment's Kafka workers, named once.

Every group and transactional id of Watchtower's own processes starts with ``wt-``: that is what a
secure broker's ACLs grant the service principal (`local.security`). The prefix is resolved as for
every topic (None: ``$WATCHTOWER_TOPIC_PREFIX`` or ``wt``), so deployments sharing a cluster never
rebalance each other.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Final

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import end_offsets

STREAM_WORKER_GROUP: Final = "wt-stream-actor"


def stream_worker_group(prefix: str | None = None) -> str:
    """The stream workers' group: ``wt-stream-actor.<prefix>``."""
    return f"{STREAM_WORKER_GROUP}.{topic_name('commands', prefix).rsplit('.', 1)[0]}"


def worker_group(kind: str, prefix: str | None = None) -> str:
    """The group of one deployment's side workers of `kind` (``delivery``, ``replay``):
    ``wt-<prefix>.<kind>-worker``."""
    return f"wt-{topic_name('events', prefix).rsplit('.', 1)[0]}.{kind}-worker"


def projection_fold_group(prefix: str | None = None) -> str:
    """Where the projections record how far their folds got, for lag only: ``wt-<prefix>.projection-fold``.

    Nothing consumes through this group (the projections fold with readers of their own and
    restart from their tables); each commits its owned partitions' fold positions to it now and
    then, so the lag of a projection that stopped keeps growing where any process can read it."""
    return f"wt-{topic_name('events', prefix).rsplit('.', 1)[0]}.projection-fold"


#: The topics the stream workers decide commands from, in the order they serve them (`internal`
#: holds forwards between aggregates, written by the workers themselves).
COMMAND_ROLES: Final = ("commands", "ingest-commands")


def commands_pending(bootstrap: str, prefix: str | None, ends: Mapping[tuple[str, int], int],
                     timeout_s: float = 10.0) -> dict[tuple[str, int], int]:
    """The command partitions ((topic, partition)) whose records before `ends` the stream workers
    have not all decided yet, each with how many remain (empty: all decided).

    The stream workers commit their command offsets in the transaction that writes the events and
    replies, so an offset committed at or past ``ends[tp]`` means every command before it has its
    outcome on the log. Command topics are written without transactions, so a committed offset can
    reach the end exactly."""
    group = stream_worker_group(prefix)
    admin = AdminClient({**kafka_config(bootstrap), "log_level": 3})
    wanted = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in ends])
    found = admin.list_consumer_group_offsets([wanted], request_timeout=timeout_s)[group].result(timeout_s)
    committed = {(tp.topic, tp.partition): max(int(tp.offset), 0) for tp in found.topic_partitions}
    return {tp: end - committed.get(tp, 0) for tp, end in ends.items() if committed.get(tp, 0) < end}


def wait_commands_decided(bootstrap: str, prefix: str | None, *, stop: threading.Event | None = None,
                          log: logging.Logger | None = None, poll_s: float = 0.2) -> bool:
    """Block until every command now on ``commands`` and ``ingest.commands`` has been decided by the
    stream workers (`commands_pending`); False when `stop` was set first.

    A process that acts on what the log says was decided (the ingestion aggregator after a restart
    or a rebalance) calls this first, so a command its predecessor sent and nobody has decided yet
    cannot land after it has decided the same thing again. It waits as long as it takes: without a
    stream worker nothing can be decided anyway. Broker errors are retried."""
    topics = [topic_name(role, prefix) for role in COMMAND_ROLES]
    ends: dict[tuple[str, int], int] | None = None
    said = 0.0
    while stop is None or not stop.is_set():
        try:
            if ends is None:
                admin = AdminClient({**kafka_config(bootstrap), "log_level": 3})
                found: dict[tuple[str, int], int] = {}
                for topic in topics:
                    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
                    found.update(((topic, p), end) for p, end in
                                 end_offsets(bootstrap, topic, sorted(partitions)).items())
                ends = found
            behind = commands_pending(bootstrap, prefix, ends)
        except (KafkaException, TimeoutError, KeyError) as exc:
            reason = f"the broker did not answer ({exc})"
        else:
            if not behind:
                return True
            where = ", ".join(f"{t}[{p}]" for t, p in sorted(behind))
            reason = f"{sum(behind.values())} commands on {where} are not decided yet"
        if log is not None and time.monotonic() - said > 10:
            said = time.monotonic()
            log.warning("waiting for the stream workers: %s", reason)
        time.sleep(poll_s)
    return False
