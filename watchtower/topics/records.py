"""The plain values a reader in `topics` hands over, and the one producer call a transaction's caller makes.

A `Record` is one consumed record with where it sits, what it holds and when it was written: every
reader in `topics` answers its records as `Record`s. An `EndOfPartition` says a partition was read
to its end (a reader asked for those events). Both are built from the client's message at the edge
(`record_of`, `end_of_partition`), so code above `topics` never holds a client object;
`committed_records` is the one log scan (`reader.read_committed`) in those terms.
`RecordProducer` is what a caller that writes through a transactional producer it is lent
(`workers.tx_writer`) calls on it: ``produce``, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from confluent_kafka import Message

from watchtower.topics.reader import read_committed

#: A record's headers: (name, value) pairs in the order they were written, a name as often as it was
#: written; empty when the record has none. A consumed header's value is bytes (None: written without one).
Headers: TypeAlias = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """One consumed record: its topic partition and offset, its key, its value (None for a
    tombstone), its headers and its timestamp (Unix ms, as the client reports it).

    The attributes are named as Faust's consumer message names them, so code that takes one takes
    the other."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class EndOfPartition:
    """`partition` of `topic` was read to its end, which was then at `offset`."""

    topic: str
    partition: int
    offset: int


def record_of(msg: Message) -> Record:
    """The plain record of a consumed message that carries no error."""
    headers = msg.headers()
    # A consumed message's headers are a list of (str, bytes | None) pairs (or None); the client's
    # stubs also allow the dict and str values a hand-made message may carry.
    return Record(str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0), msg.key(), msg.value(),
                  tuple(headers) if headers else (), int(msg.timestamp()[1]))  # type: ignore[arg-type]


def end_of_partition(msg: Message) -> EndOfPartition:
    """The end-of-partition event `msg` as a plain value."""
    return EndOfPartition(str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0))


def committed_records(bootstrap: str, topics: Sequence[str], *, start: Mapping[int, int] | None = None,
                      timeout_s: float = 300.0) -> Iterator[Record]:
    """`reader.read_committed`: every committed record of `topics` up to their current end, in log
    order per partition, partition p from offset ``start[p]`` on when given (else from its
    beginning); TimeoutError when the end is not reached within `timeout_s`."""
    for msg in read_committed(bootstrap, topics, start=start, timeout_s=timeout_s):
        yield record_of(msg)


class RecordProducer(Protocol):
    """A producer lent to its caller for the records of one transaction: it may only add records."""

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int = -1) -> None:
        """Add one record to `topic` (to `partition`; -1: where the producer's partitioner puts its key)."""
