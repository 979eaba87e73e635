"""`PushConsumer`: one subscriber's push deliveries of one stream, read straight from Kafka.

The delivery worker writes every push on the ``deliveries`` topic (docs/push.md): keyed by the
subscriber's address, the value the StreamMessage record byte for byte, marked with the headers
``wt:push = 1`` and ``wt:push:stream = <stream id>``, in Kafka transactions. A PushConsumer:

- reads, through `topics.keyed_partition`, the one partition of ``deliveries`` the subscriber's
  key hashes to (murmur2 like every producer), by assignment (never joins a group, never commits)
  and ``read_committed`` (a delivery transaction that a crash aborted never shows);
- starts at the partition's end when it is created (`start_offset` overrides): pushes are live,
  and what came before is the pull side's (``Subscriber.stream`` catches up with get_since);
- keeps only records keyed by the subscriber, carrying ``wt:push`` and this stream's
  ``wt:push:stream`` (replays, other subscribers on the same partition and other streams are
  ignored);
- decodes values with the one codec (`schemas.records.decode_message`); a record that does not
  decode, or whose message belongs to another stream, is counted in `stats` and skipped, never
  raised to the application.

It does not verify signatures, order or deduplicate: delivery is at-least-once, and
``Subscriber.stream`` does all three. Not thread-safe: one thread polls it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Final

from watchtower.protocol.errors import InvalidArgumentError, WatchtowerError
from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas.records import decode_message
from watchtower.topics.catalogue import topic_name
from watchtower.topics.keyed_partition import KeyedPartitionReader

log = logging.getLogger(__name__)

PUSH_HEADER: Final = "wt:push"
STREAM_HEADER: Final = "wt:push:stream"
SEQUENCE_HEADER: Final = "wt:push:sequence"
BATCH: Final = 500


@dataclasses.dataclass
class PushStats:
    """What a PushConsumer has read so far."""

    received: int = 0  #: pushes of this subscriber and stream, decoded and handed on
    ignored: int = 0  #: other keys, replays, other streams: not ours
    undecodable: int = 0  #: ours by their headers, but the value is not a StreamMessage of the stream


RawHeaders = dict[str, str | bytes | None] | Sequence[tuple[str, str | bytes | None]] | None


def header_value(headers: RawHeaders, name: str) -> bytes | None:
    """The value of header `name` (the last one wins, as Kafka readers usually do); None if absent."""
    pairs = headers.items() if isinstance(headers, dict) else (headers or [])
    found = None
    for key, value in pairs:
        if key == name:
            found = value.encode() if isinstance(value, str) else (value or b"")
    return found


class PushConsumer:
    """The push deliveries of `stream_id` to `subscriber_address`, as StreamMessages.

    `bootstrap`: the Kafka bootstrap servers (connection settings from `kafka_config`, so a
    secure deployment's credentials apply); `prefix`: the deployment's topic prefix (default
    ``WATCHTOWER_TOPIC_PREFIX`` or ``wt``). `start_offset`: where to start in the subscriber's
    partition (None: its end now). Use as a context manager, or call `close`.
    """

    def __init__(self, bootstrap: str, subscriber_address: str, stream_id: str, *, prefix: str | None = None,
                 start_offset: int | None = None) -> None:
        self.subscriber_address = subscriber_address
        self.stream_id = stream_id
        self.topic = topic_name("deliveries", prefix)
        self.stats = PushStats()
        self._key = subscriber_address.encode()
        self._stream = stream_id.encode()
        self._reader: KeyedPartitionReader | None = KeyedPartitionReader(
            bootstrap, self.topic, self._key, group_prefix="wt-client-push")
        self.partition = self._reader.partition
        try:
            if start_offset is None:
                # The end now, resolved here (not lazily at the first fetch), so every push committed
                # after the constructor returns is read.
                start_offset = self._reader.end()
            self.start_offset = start_offset
            self._reader.start_at(start_offset)
        except BaseException:
            self._reader.close()
            raise

    def __enter__(self) -> PushConsumer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Leave the partition (idempotent)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def poll(self, timeout_s: float = 0.5) -> list[StreamMessage]:
        """The pushes that arrived within `timeout_s` (possibly none), in log order."""
        if self._reader is None:
            raise InvalidArgumentError("this PushConsumer is closed; create a new one")
        out: list[StreamMessage] = []
        for record in self._reader.poll(timeout_s, BATCH):
            msg = self._accept(record.key, record.headers, record.value, record.offset)
            if msg is not None:
                out.append(msg)
        return out

    def _accept(self, key: bytes | None, headers: RawHeaders, value: bytes | None,
                offset: int | None) -> StreamMessage | None:
        if key != self._key or header_value(headers, PUSH_HEADER) is None \
                or header_value(headers, STREAM_HEADER) != self._stream:
            self.stats.ignored += 1
            return None
        try:
            msg = decode_message(value or b"")
        except WatchtowerError as err:  # MALFORMED_RECORD or SCHEMA_MISMATCH: count, skip, go on
            self.stats.undecodable += 1
            log.warning("skipped an undecodable push at %s[%d]@%s: %s", self.topic, self.partition, offset, err)
            return None
        if msg.stream_id != self.stream_id:
            self.stats.undecodable += 1
            log.warning("skipped a push at %s[%d]@%s: its headers say stream %s, its message %s", self.topic,
                        self.partition, offset, self.stream_id, msg.stream_id)
            return None
        self.stats.received += 1
        return msg
