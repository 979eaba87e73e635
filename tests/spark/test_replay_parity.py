"""For the same request, the Spark replay and the service replay deliver the same set.

One stack, no replay worker at first: replay B is registered and fulfilled by
``python -m watchtower.spark.replay_job`` (the command the worker's hand-off runs); then a replay
worker starts (hand-off disabled) and fulfils replay A, an identical request. Both are folded by
`replay_status` (so the Spark job's records are ones the status fold accepts), and their deliveries
are compared record by record: same values, same original headers, same order, same key and
partition; only the replay id header differs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nacl.signing
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replay"))
from replay_helpers import DeliveryReader, Stream, create_and_publish, kind_of, register, wait_status

from watchtower.gateway.transport import CommandClient
from watchtower.local.jars import spark_jars
from watchtower.local.stack import ServiceSet
from watchtower.schemas.records import decode_message
from watchtower.spark.session import ENV_SPARK_JARS

pytest.importorskip("pyspark")
pytestmark = pytest.mark.integration

COUNT = 1500  # beyond the ring window of 100
FILTER = {"any": [{"field": "kind", "op": "eq", "value": "trade"}, {"field": "tags.n", "op": "gte", "value": 1400}]}


@pytest.fixture(scope="module")
def env(stack: ServiceSet) -> Iterator[tuple[ServiceSet, Stream]]:
    client = CommandClient(stack.bootstrap, prefix=stack.prefix)
    try:
        yield stack, create_and_publish(client, COUNT, capacity=100)
    finally:
        client.close()


def replayed(reader: DeliveryReader, replay_id: int, count: int) -> list[Any]:
    reader.until(lambda: reader.count(replay_id) >= count, what=f"the deliveries of replay {replay_id}")
    reader.drain(1.0)
    return reader.by_replay[replay_id]


def without_replay_id(headers: list[tuple[str, bytes]] | None) -> list[tuple[str, bytes]]:
    return [(k, v) for k, v in headers or [] if k != "icrc77:replay:id"]


def test_the_spark_replay_and_the_service_replay_deliver_the_same_records(env: tuple[ServiceSet, Stream]) -> None:
    services, stream = env
    requester_key = nacl.signing.SigningKey(b"\xab" * 32)  # one requester signs both requests
    request = {"start": 7, "to": None, "flt": FILTER, "skip": [3, 1], "key": requester_key}

    by_spark = register(services.bootstrap, services.prefix, stream, nonce=1, **request)  # type: ignore[arg-type]
    requester = by_spark.requester
    job = subprocess.run(
        [sys.executable, "-m", "watchtower.spark.replay_job", "--bootstrap", services.bootstrap,
         "--stream-id", stream.stream_id, "--replay-id", str(by_spark.replay_id)],
        env={**os.environ, "WATCHTOWER_TOPIC_PREFIX": services.prefix, ENV_SPARK_JARS: ",".join(spark_jars())},
        capture_output=True, text=True, timeout=900,
        check=False)
    assert job.returncode == 0, job.stderr[-3000:]
    spark_view = wait_status(services.bootstrap, services.prefix, by_spark.replay_id, {"completed"}, timeout_s=60)
    assert spark_view.engine == "spark"

    services.start_replay("r1", {"WATCHTOWER_SPARK_REPLAY_THRESHOLD": "0"})
    by_service = register(services.bootstrap, services.prefix, stream, nonce=2,
                          **request)  # type: ignore[arg-type]
    service_view = wait_status(services.bootstrap, services.prefix, by_service.replay_id, {"completed"},
                               timeout_s=600)
    assert service_view.engine == "service"

    assert (spark_view.delivered, spark_view.filtered, spark_view.skipped) == (
        service_view.delivered, service_view.filtered, service_view.skipped)
    assert spark_view.delivered + spark_view.filtered + spark_view.skipped == COUNT - 6

    reader = DeliveryReader(services.bootstrap, services.prefix)
    try:
        from_spark = replayed(reader, by_spark.replay_id, spark_view.delivered)
        from_service = replayed(reader, by_service.replay_id, service_view.delivered)
    finally:
        reader.close()
    assert len(from_spark) == len(from_service) == spark_view.delivered > 0
    assert [m.value() for m in from_spark] == [m.value() for m in from_service]
    assert [without_replay_id(m.headers()) for m in from_spark] == [without_replay_id(m.headers())
                                                                    for m in from_service]
    assert {(m.key(), m.partition()) for m in from_spark + from_service} == {(requester.encode(),
                                                                               from_service[0].partition())}
    expected = [s for s in range(7, COUNT + 1) if s % 3 == 1 and (kind_of(s) == "trade" or s >= 1400)]
    assert [decode_message(m.value()).sequence for m in from_spark] == expected
