"""Taking records from a confluent-kafka consumer without holding a lone record back.

``Consumer.consume(n, timeout)`` returns when it holds `n` records *or* the whole timeout has
passed: a reader that asks for a batch with a timeout keeps a single record (a reply, a push, a
key event) waiting for the rest of the timeout. `next_batch` waits for the first record only and
then takes what is already fetched, so a burst is still handed over in one call and a lone record
at once.
"""

from __future__ import annotations

from confluent_kafka import Consumer, Message


def next_batch(consumer: Consumer, max_records: int, timeout_s: float) -> list[Message]:
    """Up to `max_records` records (errors and end-of-partition events included, as ``consume``
    returns them): the first waited for up to `timeout_s`, the rest only if already fetched."""
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    if max_records <= 1:
        return [first]
    return [first, *consumer.consume(num_messages=max_records - 1, timeout=0)]
