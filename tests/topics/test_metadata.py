"""`metadata.partitions` and `ClusterProbe`: the metadata's answer as plain values, its refusals as reasons."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from watchtower.topics.errors import BROKER_ERRORS, TopicUnavailableError
from watchtower.topics.metadata import ClusterProbe, partitions


class _Client:
    """Answers `list_topics` with the topics it is given (topic -> (error, partition ids))."""

    def __init__(self, topics: dict[str, tuple[object, list[int]]]) -> None:
        self.topics = topics
        self.asked: list[tuple[str | None, float]] = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.asked.append((topic, timeout))
        found = {name: SimpleNamespace(error=error, partitions=dict.fromkeys(ids))
                 for name, (error, ids) in self.topics.items()}
        return SimpleNamespace(brokers={1: "b"}, topics=found)


def test_the_partitions_come_back_ascending_asked_within_the_bound() -> None:
    client = _Client({"wt.events": (None, [2, 0, 1])})
    assert partitions(client, "wt.events", timeout_s=7.0) == [0, 1, 2]
    assert client.asked == [("wt.events", 7.0)]


@pytest.mark.parametrize(("topics", "reason"), [
    ({}, "not in the metadata"),
    ({"wt.events": ("Broker: Unknown topic or partition", [])}, "Broker: Unknown topic or partition"),
    ({"wt.events": (None, [])}, "no partitions"),
])
def test_a_topic_the_cluster_does_not_serve_says_why(topics: dict[str, tuple[object, list[int]]], reason: str) -> None:
    with pytest.raises(TopicUnavailableError) as caught:
        partitions(_Client(topics), "wt.events")
    assert (caught.value.topic, caught.value.reason) == ("wt.events", reason)
    assert str(caught.value) == f"topic wt.events is not available ({reason})"
    assert isinstance(caught.value, BROKER_ERRORS)  # what the demo's steps catch


def test_the_probe_says_why_nothing_answered() -> None:
    reason = ClusterProbe("127.0.0.1:1").why_unreachable("wt.events", 0.2)
    assert reason  # a failure with its reason, never an exception
    assert len(reason) <= 200
