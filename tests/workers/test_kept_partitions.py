"""A stream worker keeps the state of a partition it gets straight back in a rebalance, and only then.

The range assignor revokes every partition at each rebalance. A partition whose group offsets are
still the ones this worker committed comes back without a rebuild; one that any other worker
decided a record of meanwhile (its committed offsets moved) is rebuilt from the log. No broker:
the group's offsets and the consumer are stand-ins, the rule is `PartitionOwner._restore_kept`.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from watchtower.workers.command_processor import CommandProcessor


class Offsets:
    """The group's committed offsets, as `CommittedOffsets.fetch` answers them."""

    def __init__(self, offsets: dict[tuple[str, int], int]) -> None:
        self.offsets = offsets

    def fetch(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.offsets.get((tp.topic, tp.partition), -1001))
                for tp in tps]


class Consumer:
    def __init__(self) -> None:
        self.sought: dict[tuple[str, int], int] = {}
        self.resumed: set[tuple[str, int]] = set()

    def seek(self, tp: TopicPartition) -> None:
        self.sought[(tp.topic, tp.partition)] = tp.offset

    def resume(self, tps: list[TopicPartition]) -> None:
        self.resumed |= {(tp.topic, tp.partition) for tp in tps}

    def pause(self, tps: list[TopicPartition]) -> None:
        self.resumed -= {(tp.topic, tp.partition) for tp in tps}


def worker_after_a_revoke(group_offsets: dict[tuple[str, int], int]) -> tuple[CommandProcessor, Consumer]:
    """A worker that owned partitions 0 and 1, committed offset 10 on each input topic of both, and
    had them revoked; partition 0 and 1 are assigned to it again."""
    worker = CommandProcessor("127.0.0.1:1", "kept-test", prefix="kept")
    consumer = Consumer()
    worker.host.consumer = consumer  # type: ignore[assignment]
    worker._offsets = Offsets(group_offsets)  # type: ignore[assignment]
    for p in (0, 1):
        worker._states[p] = {"stream": {f"s{p}": object()}}
    worker.note_committed([TopicPartition(t, p, 10) for p in (0, 1) for t in worker.input_topics])
    worker.revoke(consumer, [TopicPartition(t, p) for p in (0, 1) for t in worker.input_topics])  # type: ignore[arg-type]
    assert worker._states == {}
    worker._owned = [0, 1]
    worker._unloaded = {0, 1}
    return worker, consumer


def test_a_partition_nobody_else_decided_comes_back_without_a_rebuild() -> None:
    unchanged = {(t, p): 10 for p in (0, 1) for t in ("kept.commands", "kept.internal", "kept.ingest.commands")}
    worker, consumer = worker_after_a_revoke(unchanged)
    worker._restore_kept([0, 1])
    assert sorted(worker._states) == [0, 1]
    assert worker._unloaded == set()
    assert worker.stats.kept_partitions == 2
    assert all(consumer.sought[(t, p)] == 10 for p in (0, 1) for t in worker.input_topics)
    assert {(t, p) for p in (0, 1) for t in worker.input_topics} <= consumer.resumed


def test_a_partition_another_worker_committed_on_is_rebuilt() -> None:
    moved: dict[tuple[str, Any], int] = {(t, p): 10 for p in (0, 1)
                                         for t in ("kept.commands", "kept.internal", "kept.ingest.commands")}
    moved[("kept.internal", 1)] = 12  # another owner decided two forwards of partition 1 meanwhile
    worker, consumer = worker_after_a_revoke(moved)
    worker._restore_kept([0, 1])
    assert sorted(worker._states) == [0]  # partition 1 waits for its rebuild from the log
    assert worker._unloaded == {1}
    assert 1 not in worker._kept
    assert ("kept.commands", 1) not in consumer.resumed
    assert worker.stats.kept_partitions == 1


def test_offsets_that_cannot_be_read_mean_a_rebuild() -> None:
    worker, _ = worker_after_a_revoke({})  # the group has no offsets at all for them: not ours
    worker._restore_kept([0, 1])
    assert worker._states == {}
    assert worker._unloaded == {0, 1}
    assert worker._kept == {}
