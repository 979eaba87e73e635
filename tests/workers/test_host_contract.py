"""The host contract: a toy counter aggregate, registered only here, gets the host's guarantees.

A worker process hosts the stream actor, the registry and two test aggregates (a counter and a
total the counter forwards to, :mod:`counter_aggregate`) with the stock host, unchanged. Real broker,
real processes, ``kill -9``.
"""

from __future__ import annotations

import collections
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from counter_aggregate import COUNTER_EVENT, TOTAL_EVENT, CounterAggregate, TotalAggregate, counter_command
from waiting import wait_until
from worker_harness import RawCommandChannel, Workers, read_health, workers

from watchtower.schemas.wire import H_CORRELATION, H_REPLY_PARTITION
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.reader import read_committed
from watchtower.workers.command_processor import group_id

pytestmark = pytest.mark.integration

PARTITIONS = 3
SCRIPT = Path(__file__).with_name("counter_aggregate.py")


@pytest.fixture
def bench(kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[Workers, RawCommandChannel]]:
    with workers(kafka_bootstrap, partitions=PARTITIONS, log_dir=tmp_path) as w:
        w.start("counter-1", script=SCRIPT)
        channel = RawCommandChannel(kafka_bootstrap, w.prefix)
        try:
            yield w, channel
        finally:
            channel.close()


def _ok(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply["ok"], reply
    return dict(reply["result"])


def committed_replies(bootstrap: str, prefix: str) -> collections.Counter[str]:
    """How many committed replies each correlation id got."""
    return collections.Counter((m.key() or b"").decode()
                               for m in read_committed(bootstrap, [topic_name("replies", prefix)]))


def counter_values(bootstrap: str, prefix: str, tag: bytes) -> list[int]:
    """The values of the committed events of one toy aggregate, in log order."""
    aggregate = CounterAggregate() if tag == COUNTER_EVENT else TotalAggregate()
    return [aggregate.event_decoder(m.value()).value
            for m in read_committed(bootstrap, [topic_name("events", prefix)])
            if (m.value() or b"").startswith(tag)]


def test_a_counter_gets_request_reply_and_a_forward_to_another_aggregate(bench: tuple[Workers, RawCommandChannel],
                                                                        kafka_bootstrap: str) -> None:
    w, channel = bench
    assert partition_for_key(b"apples", PARTITIONS) != partition_for_key(b"total", PARTITIONS)  # a real hop
    values = [_ok(channel.request(counter_command("apples", 2), key="apples", timeout=120)[1])["value"]
              for _ in range(3)]
    assert values == [2, 4, 6]
    # The counter forwards to the total on `internal` in the same transaction; the total answers.
    assert _ok(channel.request(counter_command("apples", 5, total=True), key="apples")[1]) == {"total": 5}
    assert _ok(channel.request(counter_command("apples", 1), key="apples")[1]) == {"value": 12}
    # A forward's bytes on the public commands topic are refused with the spec's code.
    refused = channel.request(b'TOT1{"add": 100}', key="total")[1]
    assert not refused["ok"]
    assert refused["error"]["code"] == "UNAUTHORIZED"
    assert counter_values(kafka_bootstrap, w.prefix, TOTAL_EVENT) == [5]
    # The stream actor still answers next to them: an unknown stream's command is refused, not lost.
    garbage = channel.request(b"\x00garbage", key="apples")[1]
    assert not garbage["ok"]
    assert garbage["error"]["code"] == "MALFORMED_RECORD"


def test_a_worker_killed_mid_batch_neither_double_counts_nor_answers_uncommitted_work(
        bench: tuple[Workers, RawCommandChannel], kafka_bootstrap: str, tmp_path: Path) -> None:
    w, channel = bench
    for i in range(10):
        assert _ok(channel.request(counter_command("pears", 1), key="pears", timeout=120)[1]) == {"value": i + 1}
    # One burst: commands before the fatal one are produced in the open transaction when the
    # worker kills itself (kill -9) deciding it; none of them may count or be answered twice.
    trap = tmp_path / "died"
    burst = [counter_command("pears", 1) for _ in range(5)] + [counter_command("pears", 1, die_once=str(trap))]
    burst += [counter_command("pears", 1) for _ in range(5)]
    corrs = [channel.send(value, key="pears")[0] for value in burst]
    wait_until("the worker to reach the fatal command", lambda: not w.alive("counter-1"), timeout_s=60, every_s=0.1)
    assert trap.exists()
    w.procs.pop("counter-1")
    w.start("counter-1", script=SCRIPT)  # same id: fences the dead one's transaction at once
    got = sorted(_ok(channel.reply(corr, timeout=120))["value"] for corr in corrs)
    assert got == list(range(11, 22))  # each counted once, in some order, no gap and no repeat
    assert counter_values(kafka_bootstrap, w.prefix, COUNTER_EVENT) == list(range(1, 22))
    replies = committed_replies(kafka_bootstrap, w.prefix)
    assert all(replies[corr] == 1 for corr in corrs), {c: replies[c] for c in corrs}


def test_a_zombie_producer_with_the_workers_transactional_id_is_fenced(
        bench: tuple[Workers, RawCommandChannel], kafka_bootstrap: str) -> None:
    w, channel = bench
    assert _ok(channel.request(counter_command("plums", 1), key="plums", timeout=120)[1]) == {"value": 1}
    zombie = Producer({**kafka_config(kafka_bootstrap), "transactional.id": f"{group_id(w.prefix)}-counter-1",
                       "log_level": 0})
    zombie.init_transactions(30)  # takes the id over: the live worker's next transaction is fenced
    # The worker notices, starts over from the log with a new producer (fencing the zombie in turn)
    # and answers; nothing is lost or counted twice.
    assert _ok(channel.request(counter_command("plums", 1), key="plums", timeout=120)[1]) == {"value": 2}
    zombie.begin_transaction()
    zombie.produce(topic_name("events", w.prefix), key=b"plums",
                   value=CounterAggregate().encode_event(CounterAggregate().event_decoder(
                       b'CTE1{"key": "plums", "add": 97, "value": 99}')),
                   partition=partition_for_key(b"plums", PARTITIONS))
    with pytest.raises(KafkaException):
        zombie.commit_transaction(30)
    assert _ok(channel.request(counter_command("plums", 1), key="plums")[1]) == {"value": 3}
    assert counter_values(kafka_bootstrap, w.prefix, COUNTER_EVENT) == [1, 2, 3]


def test_unknown_names_never_reach_the_counter(bench: tuple[Workers, RawCommandChannel]) -> None:
    _, channel = bench
    reply = channel.request(b"CTR1 not json", key=uuid.uuid4().hex, timeout=120)[1]
    assert not reply["ok"]
    assert reply["error"]["code"] == "MALFORMED_RECORD"


def counter_values_by_key(bootstrap: str, prefix: str) -> dict[str, list[int]]:
    """Each counter's committed values, in log order."""
    out: dict[str, list[int]] = collections.defaultdict(list)
    for m in read_committed(bootstrap, [topic_name("events", prefix)]):
        if (m.value() or b"").startswith(COUNTER_EVENT):
            event = CounterAggregate().event_decoder(m.value())
            out[event.key].append(event.value)
    return out


def test_clients_commands_sent_while_the_lane_drains_join_its_transactions_and_each_command_counts_once(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """A client's command that arrives while the ingestion lane is decided is decided in the lane's
    open transaction (`CommandProcessor._join_clients`): every command of both topics counts exactly
    once, a client's in the order sent, and each is answered once.

    Each ingested command takes 2 ms to decide (the toy counter sleeps), so a lane transaction of 500
    lasts about a second however busy the host is: the client's next command, sent as soon as its
    reply comes, arrives while one is open."""
    feeds, rounds = 200, 20
    health = tmp_path / "counter-1.health.json"
    with workers(kafka_bootstrap, partitions=PARTITIONS, log_dir=tmp_path) as w:
        lane = Producer({**kafka_config(kafka_bootstrap), "enable.idempotence": True, "linger.ms": 20,
                         "partitioner": "murmur2_random", "log_level": 3})
        lane_corrs = []
        for _ in range(rounds):  # a block's worth of ingested publishes, many times over, already waiting
            for i in range(feeds):
                corr = uuid.uuid4().hex
                lane_corrs.append(corr)
                lane.produce(topic_name("ingest-commands", w.prefix), key=f"feed-{i}".encode(),
                             value=counter_command(f"feed-{i}", 1, pause_ms=2),
                             headers={H_CORRELATION: corr, H_REPLY_PARTITION: "1"})
                lane.poll(0)
        assert lane.flush(60) == 0
        channel = RawCommandChannel(kafka_bootstrap, w.prefix)
        try:
            w.start("counter-1", env={"WATCHTOWER_HEALTH_FILE": str(health)}, script=SCRIPT)
            values: list[int] = []
            corrs: list[str] = []
            joined = 0
            deadline = time.monotonic() + 120
            # One client's commands, one at a time, while the lane drains, until the worker counts a join.
            while joined < 1 or len(values) < 5:
                assert time.monotonic() < deadline, f"no client's command joined the lane ({len(values)} sent)"
                corr, _partition = channel.send(counter_command("plain", 1), key="plain")
                corrs.append(corr)
                values.append(_ok(channel.reply(corr, timeout=120))["value"])
                joined = int((read_health(health) or {}).get("lane_yields", 0))
            wait_until("every ingested command to be decided", lambda: sum(
                len(v) for k, v in counter_values_by_key(kafka_bootstrap, w.prefix).items() if k != "plain")
                == feeds * rounds, timeout_s=120, every_s=1.0)
        finally:
            channel.close()
        counted = counter_values_by_key(kafka_bootstrap, w.prefix)
        assert values == list(range(1, len(values) + 1))
        assert counted.pop("plain") == values
        assert counted == {f"feed-{i}": list(range(1, rounds + 1)) for i in range(feeds)}
        replies = committed_replies(kafka_bootstrap, w.prefix)
        assert all(replies[corr] == 1 for corr in [*corrs, *lane_corrs])

