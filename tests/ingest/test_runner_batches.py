"""A runner reads task batches and writes its results as signed batches, without a broker: what it
takes from a batch, what it refuses, and that every result leaves once, in its task's partition."""

from __future__ import annotations

import dataclasses

import nacl.signing
import pytest
from test_aggregator import HEIGHT, RUNNERS, SCHEDULER, task

from watchtower.ingest.runner import ResultBatcher, Runner
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.ingestion.records import MAX_BATCH, IngestTask, new_result, verify_result_batch
from watchtower.protocol.partitioning import partition_for_key
from watchtower.schemas.ingest_records import batch_results, decode_results, encode_task_batch

SCHEDULER_ADDRESS = address_from_public_key(bytes(SCHEDULER.verify_key))


def unsigned(t: IngestTask) -> IngestTask:
    return dataclasses.replace(t, signature=b"")


def test_a_runner_takes_the_tasks_of_a_batch_that_select_it_and_refuses_a_strangers_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("watchtower.ingest.runner.now_height", lambda: HEIGHT)
    runner = Runner(RUNNERS[0], SCHEDULER_ADDRESS)
    tasks = [unsigned(task(t)) for t in (1, 2, 3)]
    assert [t.tick for t in runner.accept_all(encode_task_batch(tasks, SCHEDULER))] == [1, 2, 3]
    skip = unsigned(task(5, skip_from=4))  # a skip notice selects no runner
    late = unsigned(task(6))
    monkeypatch.setattr("watchtower.ingest.runner.now_height", lambda: late.deadline_height + 1)
    assert runner.accept_all(encode_task_batch([skip, late], SCHEDULER)) == []
    assert runner.skipped == 1
    stranger = nacl.signing.SigningKey(b"\x0a" * 32)
    assert runner.accept_all(encode_task_batch(tasks, stranger)) == []
    assert runner.quarantined["UNAUTHORIZED"] == 1


def test_results_leave_once_each_in_signed_batches_in_their_tasks_partitions() -> None:
    sent: list[tuple[int, bytes]] = []
    partitions = 4
    batcher = ResultBatcher(RUNNERS[1], lambda p, value: sent.append((p, value)), partitions)
    results = [new_result(dataclasses.replace(task(1), stream_id=f"stream-{i}"), RUNNERS[1], result=b'{"p":1}',
                          for_batch=True) for i in range(MAX_BATCH + 40)]
    batcher.flush(results)
    runner = address_from_public_key(bytes(RUNNERS[1].verify_key))
    seen = []
    for partition, value in sent:
        batch = decode_results(value)
        assert not isinstance(batch, type(results[0]))
        verify_result_batch(batch, frozenset([runner]))
        entries = batch_results(batch)
        assert 1 <= len(entries) <= MAX_BATCH
        assert {partition_for_key(r.stream_id.encode(), partitions) for r in entries} == {partition}
        seen += entries
    assert sorted(r.stream_id for r in seen) == sorted(r.stream_id for r in results)


def test_the_batcher_sends_what_it_gathered_when_closed() -> None:
    sent: list[tuple[int, bytes]] = []
    batcher = ResultBatcher(RUNNERS[2], lambda p, value: sent.append((p, value)), 1, linger_ms=60_000)
    batcher.start()
    batcher.add(new_result(task(1), RUNNERS[2], result=b'{"p":1}', for_batch=True))
    batcher.close()
    assert len(sent) == 1
