"""`PushConsumer`: one subscriber's push deliveries of one stream, read straight from Kafka.

The delivery worker writes every push on the ``deliveries`` topic (docs/push.md): keyed by the
subscriber's address, the value the StreamMessage record byte for byte, marked with the headers
``wt:push = 1`` and ``wt:push:stream = <stream id>``, in Kafka transactions. A PushConsumer:

- is assigned (never joins a group, never commits) the one partition of ``deliveries`` the
  subscriber's key hashes to (`partitioning.partition_for_key`, murmur2 like every producer);
- reads it ``read_committed`` (a delivery transaction that a crash aborted never shows);
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
import uuid
from typing import Final

from confluent_kafka import Consumer, KafkaException, TopicPartition

from watchtower.protocol.errors import InvalidArgumentError, WatchtowerError
from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas.records import decode_message
from watchtower.topics.batches import failed_fatally, next_batch
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key

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


RawHeaders = dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None


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
        self._consumer = Consumer(kafka_config(bootstrap, **{
            # assign() only: the group id is never joined and nothing is committed.
            "group.id": f"wt-client-push-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }))
        try:
            meta = self._consumer.list_topics(self.topic, timeout=30).topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise InvalidArgumentError(f"topic {self.topic} does not exist; is the deployment's prefix right "
                                           "(WATCHTOWER_TOPIC_PREFIX)?")
            self.partition = partition_for_key(self._key, len(meta.partitions))
            tp = TopicPartition(self.topic, self.partition)
            if start_offset is None:
                # The end now, resolved here (not lazily at the first fetch), so every push committed
                # after the constructor returns is read.
                start_offset = int(self._consumer.get_watermark_offsets(tp, timeout=30)[1])
            self.start_offset = start_offset
            self._consumer.assign([TopicPartition(self.topic, self.partition, start_offset)])
        except BaseException:
            self._consumer.close()
            raise

    def __enter__(self) -> PushConsumer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Leave the partition (idempotent)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None  # type: ignore[assignment]

    def poll(self, timeout_s: float = 0.5) -> list[StreamMessage]:
        """The pushes that arrived within `timeout_s` (possibly none), in log order."""
        if self._consumer is None:
            raise InvalidArgumentError("this PushConsumer is closed; create a new one")
        out: list[StreamMessage] = []
        for m in next_batch(self._consumer, BATCH, timeout_s):
            err = m.error()
            if err is not None:
                if failed_fatally(err):
                    raise KafkaException(err)
                continue  # transient: the client retries by itself
            msg = self._accept(m.key(), m.headers(), m.value(), m.offset())
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
