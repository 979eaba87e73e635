"""The plain values a reader in `topics` hands over, and the one producer call a transaction's caller makes.

A `TopicRecord` is one consumed record with where it sits and when it was written; an
`EndOfPartition` says a partition was read to its end (a reader asked for those events). Both are
built from the client's message at the edge (`topic_record`), so code above `topics` never holds
a client object; `committed_records` is the one log scan (`reader.read_committed`) in those terms.
`RecordProducer` is what a caller that writes through a transactional producer it is lent
(`workers.tx_writer`) calls on it: ``produce``, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import Message

from watchtower.topics.reader import read_committed


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """One consumed record: its topic partition and offset, its timestamp (Unix ms, as the client
    reports it), its key and its value (None for a tombstone)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class EndOfPartition:
    """`partition` of `topic` was read to its end, which was then at `offset`."""

    topic: str
    partition: int
    offset: int


def topic_record(msg: Message) -> TopicRecord:
    """The plain record of a consumed message that carries no error."""
    return TopicRecord(str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0), int(msg.timestamp()[1]),
                       msg.key(), msg.value())


def end_of_partition(msg: Message) -> EndOfPartition:
    """The end-of-partition event `msg` as a plain value."""
    return EndOfPartition(str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0))


def committed_records(bootstrap: str, topics: Sequence[str], *, start: Mapping[int, int] | None = None,
                      timeout_s: float = 300.0) -> Iterator[TopicRecord]:
    """`reader.read_committed`: every committed record of `topics` up to their current end, in log
    order per partition, partition p from offset ``start[p]`` on when given (else from its
    beginning); TimeoutError when the end is not reached within `timeout_s`."""
    for msg in read_committed(bootstrap, topics, start=start, timeout_s=timeout_s):
        yield topic_record(msg)


class RecordProducer(Protocol):
    """A producer lent to its caller for the records of one transaction: it may only add records."""

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int = -1) -> None:
        """Add one record to `topic` (to `partition`; -1: where the producer's partitioner puts its key)."""
