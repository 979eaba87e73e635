"""librdkafka log lines reach Python logging with repeats held back (pure, no broker)."""

from __future__ import annotations

import logging

from watchtower.workers.client_log import RepeatFilter


def record(text: str) -> logging.LogRecord:
    # The shape confluent-kafka forwards: "%s [%s] %s" % (facility, client, text).
    return logging.LogRecord("watchtower.kafka", logging.ERROR, __file__, 1, "%s [%s] %s",
                             ("FAIL", "rdkafka#consumer-1", text), None)


def test_repeats_are_held_back_and_counted_when_the_next_one_passes() -> None:
    now = [0.0]
    f = RepeatFilter(window_s=30.0, monotonic=lambda: now[0])
    refused = "127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused (after {}ms)"
    assert f.filter(record(refused.format(0)))
    now[0] = 1.0
    assert not f.filter(record(refused.format(3)))  # same shape: only the digits differ
    assert not f.filter(record(refused.format(0)))
    assert f.filter(record("another message"))  # another shape passes at once
    now[0] = 31.0
    later = record(refused.format(1))
    assert f.filter(later)
    assert later.getMessage().endswith("(2 similar lines held back)")
