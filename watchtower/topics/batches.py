"""Taking records from a confluent-kafka consumer without holding a lone record back.

``Consumer.consume(n, timeout)`` returns when it holds `n` records *or* the whole timeout has
passed: a reader that asks for a batch with a timeout keeps a single record (a reply, a push, a
key event) waiting for the rest of the timeout. `next_batch` waits for the first record only and
then takes what is already fetched, so a burst is still handed over in one call and a lone record
at once.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, Message


def failed_fatally(err: KafkaError) -> bool:
    """Whether a consumed error event means the client can never go on (replace it, or give up).

    librdkafka raises a fatal error (a static member fenced under its instance id,
    confluentinc/librdkafka#3437) as an error event whose code is ``_FATAL`` while its ``fatal()``
    answers False; only ``rd_kafka_fatal_error`` would name the cause. Both are checked."""
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


def next_batch(consumer: Consumer, max_records: int, timeout_s: float) -> list[Message]:
    """Up to `max_records` records (errors and end-of-partition events included, as ``consume``
    returns them): the first waited for up to `timeout_s`, the rest only if already fetched."""
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    if max_records <= 1:
        return [first]
    return [first, *consumer.consume(num_messages=max_records - 1, timeout=0)]
