"""Snapshots bound recovery: a new owner loads the latest snapshot and folds only the events after it;
a snapshot that is garbage, forged or stale is quarantined and the partition is folded whole.

Real broker. Recovery is proven structurally (how many events the new owner folded, read from its
stats), never by timing.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import nacl.signing
import pytest
from confluent_kafka import Producer
from waiting import wait_until
from worker_harness import RawCommandChannel, partition_for, workers

from watchtower.protocol.ledger.billing import block_height_at
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.actor import StreamState, decide, evolve, state_digest
from watchtower.protocol.stream.snapshots import decode_snapshot, encode_snapshot
from watchtower.schemas.wire import encode_command, encode_event
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import read_committed
from watchtower.workers.aggregates import default_aggregates
from watchtower.workers.command_processor import CommandProcessor
from watchtower.workers.event_fold import EventFold
from watchtower.workers.snapshots import SnapshotPolicy, snapshot_key, snapshot_value
from watchtower.workers.state_loader import load_partitions

pytestmark = pytest.mark.integration

PARTITIONS = 3
SEEDED = 3_000


class Seeded:
    """A stream whose create and SEEDED publishes were written straight to the events topic."""

    def __init__(self, bootstrap: str, prefix: str, publishes: int = SEEDED) -> None:
        self.owner = nacl.signing.SigningKey.generate()
        self.sid = f"snap.{uuid.uuid4().hex[:8]}"
        self.partition = partition_for(self.sid, PARTITIONS)
        self.state = StreamState.initial(self.sid)
        self.nonce = 0
        self.block = block_height_at(int(time.time() * 1000))
        events = [self._decide("create_stream", {"publisher_key_hex": bytes(self.owner.verify_key).hex()})]
        events += [self._decide("publish", self.message()) for _ in range(publishes)]
        producer = Producer({**kafka_config(bootstrap), "enable.idempotence": True, "log_level": 3})
        self.bootstrap = bootstrap
        self.t_events = t_events = topic_name("events", prefix)
        for event in events:
            producer.produce(t_events, key=self.sid.encode(), value=encode_event(event), partition=self.partition)
            producer.poll(0)
        assert producer.flush(60) == 0

    def message(self, sequence: int | None = None) -> dict[str, Any]:
        seq = self.state.head + 1 if sequence is None else sequence
        msg = sign_message(stream_id=self.sid, sequence=seq, timestamp_unix_ms=1_790_000_000_000,
                           kind="tick", payload=b'{"n":%d}' % seq, signing_key=self.owner, signing_key_id=1)
        return msg.to_json_dict()

    def _decide(self, method: str, body: dict[str, Any]) -> Any:
        self.nonce += 1
        (event,) = decide(self.state, sign_command(self.owner, method, self.sid, self.nonce, body),
                          block_height=self.block).events
        self.state = evolve(self.state, event)
        return event

    def publish_command(self, sequence: int) -> bytes:
        """A publish of ``sequence`` sent after the seeded log, signed as the SDK would send it."""
        self.nonce += 1
        return encode_command(sign_command(self.owner, "publish", self.sid, self.nonce, self.message(sequence)))


@contextmanager
def in_process_worker(bootstrap: str, prefix: str, worker_id: str, every_events: int,
                      batch_size: int = 500) -> Iterator[CommandProcessor]:
    worker = CommandProcessor(bootstrap, worker_id, prefix=prefix, batch_size=batch_size,
                              snapshots=SnapshotPolicy(every_events=every_events, every_s=3600))
    thread = threading.Thread(target=worker.run, name=f"worker-{worker_id}", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(60)
        assert not thread.is_alive(), "the worker did not stop"


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    wait_until(what, cond, timeout_s=timeout, every_s=0.1)


def test_a_new_owner_loads_the_snapshot_and_folds_only_the_events_after_it(kafka_bootstrap: str) -> None:
    with workers(kafka_bootstrap, partitions=PARTITIONS) as w:
        stream = Seeded(kafka_bootstrap, w.prefix)
        channel = RawCommandChannel(kafka_bootstrap, w.prefix)
        try:
            with in_process_worker(kafka_bootstrap, w.prefix, "snap-a", every_events=1_000) as a:
                wait_for(lambda: a.stats.rebuilt_partitions >= PARTITIONS, "worker A has rebuilt its partitions")
                assert a.stats.folded_events == SEEDED + 1
                assert a.stats.snapshot_loads == 0
                # A's first batch carries a snapshot of the state A folded (due: > 1,000 events).
                reply = channel.request(stream.publish_command(SEEDED + 1), key=stream.sid, timeout=120)[1]
                assert reply["ok"], reply
                assert reply["result"]["sequence"] == SEEDED + 1
                wait_for(lambda: a.stats.snapshots_taken >= 1, "worker A has committed a snapshot")
            with in_process_worker(kafka_bootstrap, w.prefix, "snap-b", every_events=1_000) as b:
                wait_for(lambda: b.stats.rebuilt_partitions >= PARTITIONS, "worker B has rebuilt its partitions")
                # B started from the snapshot: it folded only the publish of the batch that carried it.
                assert b.stats.snapshot_loads >= 1
                assert b.stats.folded_events == 1
                assert b.stats.quarantined == 0
                # ... and its state is the whole log's: the next publish gets the next sequence.
                reply = channel.request(stream.publish_command(SEEDED + 2), key=stream.sid, timeout=120)[1]
                assert reply["ok"], reply
                assert reply["result"]["sequence"] == SEEDED + 2
        finally:
            channel.close()
        # The snapshot plus the tail is exactly what a full fold of the log gives.
        events = topic_name("events", w.prefix)
        full = load_partitions(kafka_bootstrap, events, [stream.partition], PARTITIONS)[stream.partition]
        snap = load_partitions(kafka_bootstrap, events, [stream.partition], PARTITIONS,
                               snapshots_topic=topic_name("snapshots", w.prefix))[stream.partition]
        assert snap.snapshot_offset is not None
        assert snap.folded < 5 < SEEDED < full.folded
        assert state_digest(snap.streams[stream.sid]) == state_digest(full.streams[stream.sid])


def _parts(states: dict[str, Any]) -> dict[str, bytes]:
    return {a.name: a.encode_snapshot(states.get(a.name, {})) for a in default_aggregates()}


def _other_stream(partition: int) -> StreamState:
    sid = next(f"elsewhere.{i}" for i in range(100) if partition_for(f"elsewhere.{i}", PARTITIONS) != partition)
    return StreamState.initial(sid)


BAD_SNAPSHOTS: dict[str, Callable[[int, int, dict[str, Any]], bytes]] = {
    "garbage": lambda *_: b"\x00\xffnot cbor",
    "pickle": lambda *_: b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00}\x94.",
    "another partition": lambda p, end, states: snapshot_value((p + 1) % PARTITIONS, end, states,
                                                               default_aggregates()),
    "beyond the log's end": lambda p, end, states: snapshot_value(p, end + 1_000, states, default_aggregates()),
    "a hosted aggregate missing": lambda p, end, states: encode_snapshot(p, end, {
        "stream": default_aggregates()[0].encode_snapshot(states["stream"])}),
    "a stream of another partition": lambda p, end, states: encode_snapshot(p, end, _parts(
        {**states, "stream": {**states["stream"], _other_stream(p).stream_id: _other_stream(p)}})),
}


@pytest.fixture(scope="module")
def seeded(kafka_bootstrap: str) -> Iterator[tuple[str, Seeded]]:
    with workers(kafka_bootstrap, partitions=PARTITIONS) as w:
        yield w.prefix, Seeded(kafka_bootstrap, w.prefix, publishes=30)


@pytest.mark.parametrize("case", sorted(BAD_SNAPSHOTS))
def test_a_bad_snapshot_is_quarantined_and_the_partition_is_folded_whole(
        kafka_bootstrap: str, seeded: tuple[str, Seeded], case: str) -> None:
    prefix, stream = seeded
    events, snapshots = topic_name("events", prefix), topic_name("snapshots", prefix)
    full = load_partitions(kafka_bootstrap, events, [stream.partition], PARTITIONS)[stream.partition]
    end = full.folded  # no transactions on this seeded log: one offset per event
    value = BAD_SNAPSHOTS[case](stream.partition, end, full.states)
    producer = Producer({**kafka_config(kafka_bootstrap), "log_level": 3})
    producer.produce(snapshots, key=snapshot_key(stream.partition), value=value, partition=stream.partition)
    assert producer.flush(30) == 0
    refused: list[Any] = []
    loaded = load_partitions(kafka_bootstrap, events, [stream.partition], PARTITIONS, snapshots_topic=snapshots,
                             on_quarantine=refused.append)[stream.partition]
    assert [(q.topic, q.partition) for q in refused] == [(snapshots, stream.partition)]
    assert "snapshot refused" in refused[0].reason
    assert loaded.snapshot_offset is None
    assert loaded.folded == full.folded == 31
    assert state_digest(loaded.streams[stream.sid]) == state_digest(stream.state)


def test_a_genuine_snapshot_after_a_bad_one_is_used_again(kafka_bootstrap: str, seeded: tuple[str, Seeded]) -> None:
    prefix, stream = seeded
    events, snapshots = topic_name("events", prefix), topic_name("snapshots", prefix)
    full = load_partitions(kafka_bootstrap, events, [stream.partition], PARTITIONS)[stream.partition]
    producer = Producer({**kafka_config(kafka_bootstrap), "log_level": 3})
    producer.produce(snapshots, key=snapshot_key(stream.partition), partition=stream.partition,
                     value=snapshot_value(stream.partition, full.folded - 10, _states_at(stream, 20),
                                          default_aggregates()))
    assert producer.flush(30) == 0
    loaded = load_partitions(kafka_bootstrap, events, [stream.partition], PARTITIONS,
                             snapshots_topic=snapshots)[stream.partition]
    assert loaded.quarantined == []
    assert loaded.snapshot_offset == full.folded - 10
    assert loaded.folded == 10
    assert state_digest(loaded.streams[stream.sid]) == state_digest(stream.state)


def _states_at(stream: Seeded, head: int) -> dict[str, Any]:
    """The partition's states after the create and ``head`` publishes, from a fold of the log."""
    state = full_fold_until(stream, 1 + head)
    return {"stream": {stream.sid: state}, "registry": {}}


def full_fold_until(stream: Seeded, events: int) -> StreamState:
    fold = EventFold("events", stream.partition, PARTITIONS)
    for m in read_committed(stream.bootstrap, [stream.t_events], partition=stream.partition):
        if fold.state.folded == events:
            break
        fold.apply(m.key(), m.value(), int(m.offset() or 0))
    return fold.state.streams[stream.sid]


def test_each_snapshot_is_tagged_with_the_end_of_the_events_it_holds(kafka_bootstrap: str) -> None:
    """A batch right after a commit snapshots the state that commit made, tagged with the events
    partition's end *including* that commit's events: a new owner folds from the tag and must not
    fold any of them again. (On a cluster the read_committed end, the last stable offset, lags a
    commit until the followers hold its marker, so the tag is the high watermark:
    `tests/topics/test_high_watermarks.py`.)"""
    with workers(kafka_bootstrap, partitions=PARTITIONS) as w:
        stream = Seeded(kafka_bootstrap, w.prefix, publishes=0)
        channel = RawCommandChannel(kafka_bootstrap, w.prefix)
        try:
            # One command a batch, each with a snapshot of the state the batch before it committed.
            with in_process_worker(kafka_bootstrap, w.prefix, "snap-tag", every_events=1, batch_size=1) as a:
                wait_for(lambda: a.stats.rebuilt_partitions >= PARTITIONS, "the worker has rebuilt its partitions")
                # Sent back to back, 40 at a time: each batch starts as soon as the one before it
                # committed. A snapshot whose end read overruns is put off (up to 2 s), so on a busy
                # host fewer batches carry one: the test sends until 5 have been taken, not a fixed count.
                seq, deadline = 0, time.monotonic() + 240
                while a.stats.snapshots_taken < 5:
                    assert time.monotonic() < deadline, f"{a.stats.snapshots_taken} snapshots in {seq} publishes"
                    corrs = [channel.send(stream.publish_command(n), key=stream.sid)[0]
                             for n in range(seq + 1, seq + 41)]
                    assert all(channel.reply(corr, timeout=120)["ok"] for corr in corrs)
                    seq += 40
        finally:
            channel.close()
        events = [int(m.offset() or 0) for m in read_committed(kafka_bootstrap, [stream.t_events],
                                                               partition=[stream.partition])]
        snapshots = [decode_snapshot(m.value()) for m in read_committed(
            kafka_bootstrap, [topic_name("snapshots", w.prefix)], partition=[stream.partition])]
    assert len(snapshots) >= 5, "the test needs snapshots taken right after commits"
    stream_part = default_aggregates()[0]
    for _, offset, parts in snapshots:
        head = dict(stream_part.decode_snapshot(parts[stream_part.name]))[stream.sid].head
        # The create, then one event per publish: the events below the tag are exactly the state's.
        assert len([o for o in events if o < offset]) == head + 1, f"snapshot at {offset} holds head {head}"


def test_a_worker_keeps_the_partitions_a_rebalance_gives_straight_back(kafka_bootstrap: str) -> None:
    """Worker B joins and leaves beside A. Each time the group revokes every partition; A takes the
    ones it gets back as they were (no fold of the log) and rebuilds only the ones B had. The
    seeded stream's next publish gets the next sequence whoever holds it."""
    with workers(kafka_bootstrap, partitions=PARTITIONS) as w:
        stream = Seeded(kafka_bootstrap, w.prefix, publishes=200)
        channel = RawCommandChannel(kafka_bootstrap, w.prefix)
        sequence = 200
        try:
            with in_process_worker(kafka_bootstrap, w.prefix, "keep-a", every_events=1_000_000) as a:
                wait_for(lambda: a.stats.rebuilt_partitions >= PARTITIONS, "worker A has rebuilt its partitions")
                rebuilt_alone = a.stats.rebuilt_partitions
                with in_process_worker(kafka_bootstrap, w.prefix, "keep-b", every_events=1_000_000) as b:
                    wait_for(lambda: a._owned and b._owned and len(a._owned) + len(b._owned) == PARTITIONS
                             and not a._unloaded and not b._unloaded, "A and B share the partitions")
                    # A got some of its partitions straight back: kept, not rebuilt.
                    assert a.stats.kept_partitions >= len(a._owned) >= 1
                    assert a.stats.rebuilt_partitions == rebuilt_alone
                    kept_with_b = a.stats.kept_partitions
                    for _ in range(3):
                        sequence += 1
                        reply = channel.request(stream.publish_command(sequence), key=stream.sid, timeout=120)[1]
                        assert reply["ok"], reply
                        assert reply["result"]["sequence"] == sequence
                    held_by_a = set(a._owned)
                # B left: A keeps its own again and rebuilds B's share from the log.
                wait_for(lambda: len(a._owned) == PARTITIONS and not a._unloaded, "A holds every partition again")
                assert a.stats.kept_partitions >= kept_with_b + len(held_by_a)
                assert a.stats.rebuilt_partitions == rebuilt_alone + PARTITIONS - len(held_by_a)
                sequence += 1
                reply = channel.request(stream.publish_command(sequence), key=stream.sid, timeout=120)[1]
                assert reply["ok"], reply
                assert reply["result"]["sequence"] == sequence
        finally:
            channel.close()
