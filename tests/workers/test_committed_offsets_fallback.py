"""The rebuild's committed-offsets fetch: stable while that can work, the last committed offsets
once stable fetches kept timing out (a hanging offset commit after an unclean broker restart)."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from watchtower.workers import state_loader
from watchtower.workers.state_loader import CommittedOffsets


class FakeFetch:
    """Records each fetch's ``stable`` flag; stable fetches time out while ``hanging``."""

    def __init__(self) -> None:
        self.calls: list[bool] = []
        self.hanging = True

    def __call__(self, _bootstrap: str, _group: str, partitions: list[TopicPartition], _timeout: float, *,
                 stable: bool = True) -> list[TopicPartition]:
        self.calls.append(stable)
        if stable and self.hanging:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get committed offsets"))
        return [TopicPartition(tp.topic, tp.partition, 7) for tp in partitions]


@pytest.fixture
def fetch(monkeypatch: pytest.MonkeyPatch) -> FakeFetch:
    fake = FakeFetch()
    monkeypatch.setattr(state_loader, "committed_offsets", fake)
    return fake


def test_after_the_stable_tries_time_out_the_last_committed_offsets_are_read(fetch: FakeFetch) -> None:
    offsets = CommittedOffsets("b", "g", timeout_s=5, stable_tries=3)
    tps = [TopicPartition("t", 0)]
    for _ in range(3):
        with pytest.raises(KafkaException):
            offsets.fetch(tps)
    assert [tp.offset for tp in offsets.fetch(tps)] == [7]
    assert fetch.calls == [True, True, True, False]
    # While the commit still hangs, the next rebuild tries stable offsets once, then falls back.
    with pytest.raises(KafkaException):
        offsets.fetch(tps)
    offsets.fetch(tps)
    assert fetch.calls[4:] == [True, False]
    # A stable success resets the count: every try is stable again.
    fetch.hanging = False
    offsets.fetch(tps)
    fetch.hanging = True
    for _ in range(2):
        with pytest.raises(KafkaException):
            offsets.fetch(tps)
    assert fetch.calls[6:] == [True, True, True]
    assert offsets.stable


def test_a_stable_fetch_that_answers_is_never_replaced(fetch: FakeFetch) -> None:
    fetch.hanging = False
    offsets = CommittedOffsets("b", "g", timeout_s=5, stable_tries=1)
    for _ in range(4):
        offsets.fetch([TopicPartition("t", 1)])
    assert fetch.calls == [True] * 4


def test_one_timeout_below_the_tries_keeps_asking_for_stable_offsets(fetch: FakeFetch) -> None:
    offsets = CommittedOffsets("b", "g", timeout_s=5, stable_tries=3)
    with pytest.raises(KafkaException):
        offsets.fetch([TopicPartition("t", 0)])
    fetch.hanging = False
    offsets.fetch([TopicPartition("t", 0)])
    fetch.hanging = True
    with pytest.raises(KafkaException):
        offsets.fetch([TopicPartition("t", 0)])
    assert fetch.calls == [True, True, True]
    assert offsets.stable
