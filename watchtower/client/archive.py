"""Read the committed StreamMessages straight from the messages topic (the archive)."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, KafkaError, TopicPartition

from watchtower.protocol.message import StreamMessage
from watchtower.schemas.records import decode_message
from watchtower.topics.catalogue import topic_name


def read_committed_messages(bootstrap: str, *, prefix: str | None = None,
                            stream_id: str | None = None) -> list[StreamMessage]:
    """Every committed StreamMessage (of ``stream_id``, if given), in log order per partition.

    Reads ``read_committed`` from offset 0 to the end of every partition, so messages of
    aborted transactions never appear. Meant for verification and tools, not the hot path.
    """
    topic = topic_name("messages", prefix)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wt-archive-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False, "log_level": 3})
    try:
        partitions = list(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[StreamMessage] = []
        finished: set[int] = set()
        while len(finished) < len(partitions):
            for m in consumer.consume(500, timeout=1.0):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        finished.add(int(m.partition() or 0))
                    continue
                msg = decode_message(m.value() or b"")
                if stream_id is None or msg.stream_id == stream_id:
                    out.append(msg)
        return out
    finally:
        consumer.close()
