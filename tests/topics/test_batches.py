"""`next_batch`: a lone record is handed over at once, a burst in one call."""

from __future__ import annotations

from typing import Any

from watchtower.topics.batches import next_batch


class _Consumer:
    """Records how it is asked: consume(n, timeout > 0) is what holds a lone record back."""

    def __init__(self, queued: list[str]) -> None:
        self.queued = queued
        self.calls: list[tuple[str, float]] = []

    def poll(self, timeout: float) -> Any:
        self.calls.append(("poll", timeout))
        return self.queued.pop(0) if self.queued else None

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        self.calls.append(("consume", timeout))
        taken, self.queued = self.queued[:num_messages], self.queued[num_messages:]
        return taken


def test_the_first_record_is_waited_for_and_the_rest_taken_only_if_already_fetched() -> None:
    consumer = _Consumer(["a", "b", "c"])
    assert next_batch(consumer, 500, 0.1) == ["a", "b", "c"]  # type: ignore[arg-type]
    assert consumer.calls == [("poll", 0.1), ("consume", 0)]  # never a consume that waits


def test_nothing_fetched_returns_nothing_after_the_wait_and_the_limit_holds() -> None:
    empty = _Consumer([])
    assert next_batch(empty, 500, 0.1) == []  # type: ignore[arg-type]
    assert empty.calls == [("poll", 0.1)]
    many = _Consumer([str(i) for i in range(10)])
    assert next_batch(many, 4, 0.1) == ["0", "1", "2", "3"]  # type: ignore[arg-type]


def test_a_fatal_error_event_is_recognised_by_its_code_or_its_flag() -> None:
    from confluent_kafka import KafkaError

    from watchtower.topics.batches import failed_fatally

    assert failed_fatally(KafkaError(KafkaError._FATAL, "fenced static member"))  # fatal() is False here
    assert failed_fatally(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    assert not failed_fatally(KafkaError(KafkaError._TRANSPORT, "broker down", retriable=True))
    assert not failed_fatally(KafkaError(KafkaError._PARTITION_EOF))
