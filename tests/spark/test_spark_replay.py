"""`spark/replay_job` fulfils a registered replay over a real stack's archive, with real Spark.

The test acts as the stream's writer: it writes the ``registered`` record itself, as the stream
aggregate does after its checks, then runs the job and reads ``deliveries`` and ``replay`` back
with confluent-kafka. One local Spark session and one stack serve the module.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer
from spark_script import BTC, LENGTH, OWNER, READER, register_replay, replay_deliveries

from watchtower.client.http import ApiClient
from watchtower.local.stack import ServiceSet
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.errors import ReplayNotFoundError
from watchtower.protocol.replay.records import ReplayCompleted, ReplayErrored, ReplayProgress, ReplayRegistration
from watchtower.protocol.replay.rules import replay_headers
from watchtower.protocol.signing import verify_with_schedule
from watchtower.protocol.stream.key_chain import verify_key_chain
from watchtower.schemas.records import decode_message
from watchtower.schemas.replay_records import decode_replay_record, encode_replay_record
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.reader import read_committed

pytest.importorskip("pyspark")
pytestmark = pytest.mark.integration

SID = "s-spark-replay"


def register(stack: ServiceSet, nonce: int, **replay: Any) -> tuple[int, int]:
    """The `registered` record the stream's writer would write for the reader's register_replay of
    SID (nonce `nonce`); (its replay id, the replay partition)."""
    return register_replay(stack.bootstrap, stack.prefix, SID, nonce, **replay)


def replay_records(stack: ServiceSet, replay_id: int) -> list[Any]:
    topic = topic_name("replay", stack.prefix)
    records = (decode_replay_record(m.value()) for m in read_committed(stack.bootstrap, [topic]))
    return [r for r in records if r.replay_id == replay_id]


def deliveries(stack: ServiceSet, replay_id: int) -> list[Any]:
    return replay_deliveries(stack.bootstrap, stack.prefix, replay_id)


@pytest.mark.secure
def test_a_spark_replay_delivers_exactly_the_selected_archive_with_replay_headers(
        spark: Any, stack: ServiceSet, api: ApiClient) -> None:
    from watchtower.spark.replay_job import run_replay

    replay_id = 7001
    # Open-ended [2, head]: even sequences only (skip [2, 0]) that are BTC (every third).
    replay_id, partition = register(stack, 1, first=2, end_exclusive=LENGTH + 1, end_id=LENGTH, filter_spec=BTC,
                         skip=[2, 0])
    lines: list[str] = []
    result = run_replay(spark, stack.bootstrap, SID, replay_id, prefix=stack.prefix, report=lines.append)
    expected = [s for s in range(2, LENGTH + 1) if s % 2 == 0 and s % 3 == 0]
    skipped = len([s for s in range(2, LENGTH + 1) if s % 2])
    assert (result.status, result.delivered, result.skipped) == ("completed", len(expected), skipped)
    assert result.filtered == LENGTH - 1 - skipped - len(expected)
    assert any("to deliver" in line for line in lines)

    originals = {decode_message(m.value()).sequence: m
                 for m in read_committed(stack.bootstrap, [topic_name("messages", stack.prefix)], partition=partition)
                 if m.key() == SID.encode()}
    got = deliveries(stack, replay_id)
    assert [decode_message(m.value()).sequence for m in got] == expected  # in ascending order
    schedule = verify_key_chain(SID, api.key_schedule(SID), address_from_public_key(bytes(OWNER.verify_key)))
    for m in got:
        msg = decode_message(m.value())
        original = originals[msg.sequence]
        assert m.key() == READER.encode()
        assert m.partition() == partition_for_key(READER.encode(), 3)
        assert m.value() == original.value()  # byte for byte
        assert m.headers() == list(original.headers() or []) + replay_headers(replay_id, LENGTH)
        assert verify_with_schedule(msg, schedule)

    records = replay_records(stack, replay_id)
    assert [type(r) for r in records] == [ReplayRegistration, ReplayProgress, ReplayCompleted]
    assert records[1].engine == "spark"
    done = records[2]
    assert (done.engine, done.delivered, done.skipped, done.filtered) == (
        "spark", result.delivered, result.skipped, result.filtered)

    again = run_replay(spark, stack.bootstrap, SID, replay_id, prefix=stack.prefix)
    assert again.status == "already-completed"
    assert len(deliveries(stack, replay_id)) == len(expected)  # a relaunch after the end delivers nothing


def test_a_plan_past_the_archive_errors_with_the_missing_sequence_and_delivers_nothing(
        spark: Any, stack: ServiceSet, api: ApiClient) -> None:
    from watchtower.spark.replay_job import run_replay

    replay_id, _ = register(stack, 2, first=LENGTH - 1, end_exclusive=LENGTH + 3, end_id=None)
    result = run_replay(spark, stack.bootstrap, SID, replay_id, prefix=stack.prefix)
    assert result.status == "errored"
    assert f"missing sequence {LENGTH + 1}" in (result.reason or "")
    assert deliveries(stack, replay_id) == []
    last = replay_records(stack, replay_id)[-1]
    assert isinstance(last, ReplayErrored)
    assert last.reason == result.reason


def test_an_unknown_replay_is_replay_not_found(spark: Any, stack: ServiceSet, api: ApiClient) -> None:
    from watchtower.spark.replay_job import run_replay

    with pytest.raises(ReplayNotFoundError, match="not registered"):
        run_replay(spark, stack.bootstrap, SID, 999_999, prefix=stack.prefix)
    # A registration its requester did not sign (no command) is not one the job fulfils.
    forged = ReplayRegistration(
        v=1, replay_id=7005, stream_id=SID, namespace=SID, requester=READER, from_sequence=1, to_sequence=3,
        first=1, end_exclusive=3, end_id=None, filter=None, skip=None, memo_hex="", price_cby=0, block_height=1,
        caller=READER, nonce=5, digest_hex="00" * 32)
    producer = Producer(kafka_config(stack.bootstrap))
    producer.produce(topic_name("replay", stack.prefix), key=SID.encode(), value=encode_replay_record(forged),
                     partition=partition_for_key(SID.encode(), 3))
    assert producer.flush(60) == 0
    with pytest.raises(ReplayNotFoundError, match="not registered"):
        run_replay(spark, stack.bootstrap, SID, 7005, prefix=stack.prefix)
    replay_id, _ = register(stack, 4, first=1, end_exclusive=3, end_id=None)
    # Another stream on the same partition does not own SID's replay.
    neighbour = next(f"s-other-{i}" for i in range(1000)
                     if partition_for_key(f"s-other-{i}".encode(), 3) == partition_for_key(SID.encode(), 3))
    with pytest.raises(ReplayNotFoundError, match="not registered"):
        run_replay(spark, stack.bootstrap, neighbour, replay_id, prefix=stack.prefix)


def test_the_cli_runs_a_registered_replay_and_prints_the_result(
        spark: Any, stack: ServiceSet, api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from watchtower.cli.spark_cmd import spark as group

    replay_id, _ = register(stack, 3, first=1, end_exclusive=11, end_id=None, filter_spec={"field": "kind", "op": "eq",
                                                                                   "value": "trade"})
    monkeypatch.setenv("WATCHTOWER_TOPIC_PREFIX", stack.prefix)
    result = CliRunner().invoke(group, ["replay", str(replay_id), "--stream", SID, "--bootstrap", stack.bootstrap,
                                        "--json"])
    assert result.exit_code == 0, result.output
    # A replay id travels as text in --json output: it may be past 2^53, which JSON readers round.
    assert json.loads(result.stdout) == {"replay_id": str(replay_id), "stream_id": SID, "status": "completed",
                                         "delivered": 5, "filtered": 5, "skipped": 0, "reason": None}
    assert [decode_message(m.value()).sequence for m in deliveries(stack, replay_id)] == [1, 3, 5, 7, 9]
