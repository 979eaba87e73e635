"""A block's push budget survives a worker restart within that block (real broker, real stack).

The workers run in this process with a clock the test moves, so "a restart within the block" is
certain instead of a race with the wall clock.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from push_helpers import PushReader, create_push_feed, publish
from waiting import let_time_pass, wait_until

from watchtower.delivery.health import DeliveryHealth
from watchtower.delivery.worker import DeliveryWorker
from watchtower.gateway.transport import CommandClient
from watchtower.local.stack import ServiceSet
from watchtower.protocol.constants import BLOCK_INTERVAL_MS, GENESIS_UNIX_MS

pytestmark = pytest.mark.integration

BLOCK = 30_000_000


class Clock:
    def __init__(self, block: int) -> None:
        self.block = block

    def __call__(self) -> int:
        return GENESIS_UNIX_MS + self.block * BLOCK_INTERVAL_MS + BLOCK_INTERVAL_MS // 2


class Running:
    """A DeliveryWorker serving in a thread."""

    def __init__(self, stack: ServiceSet, clock: Clock) -> None:
        self.worker = DeliveryWorker(stack.bootstrap, "budget", prefix=stack.prefix, clock_ms=clock,
                                     health=DeliveryHealth("budget", path=""))
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as exc:
            self.errors.append(exc)

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(60)
        assert not self.thread.is_alive()
        assert not self.errors, self.errors


def wait(cond: Callable[[], bool], what: str, timeout_s: float = 300) -> None:
    # A safety net, not a timing claim: on a loaded 2-core machine a rejoin and restore can take minutes.
    wait_until(what, cond, timeout_s=timeout_s, every_s=0.2)


def settled(worker: DeliveryWorker, stream_id: str, next_sequence: int) -> Callable[[], bool]:
    """True once the worker has ingested up to ``next_sequence - 1`` and committed that plan.

    The worker runs in another thread: ingesting moves ``next_sequence`` a moment before the key is
    marked dirty, so one reading could fall between the two. Two readings 0.2 s apart cannot (the
    worker thread runs in between). Counting transactions instead would race: the new message may be
    committed before ``publish`` even returns.
    """
    def once() -> bool:
        keys = [k for k in list(worker.schedules) if k[1] == stream_id]
        return bool(keys) and all(worker.schedules[k].next_sequence >= next_sequence and k not in worker.dirty
                                  for k in keys)

    def check() -> bool:
        if not once():
            return False
        let_time_pass(0.2, "the worker thread runs between the two readings")
        return once()
    return check


def test_a_restart_within_a_block_spends_only_what_the_block_has_left(stack: ServiceSet) -> None:
    client = CommandClient(stack.bootstrap, prefix=stack.prefix)
    reader = PushReader(stack.bootstrap, stack.prefix)
    clock = Clock(BLOCK)
    try:
        feed = create_push_feed(client, 50, per_block=10)
        publish(client, feed, 1)
        first = Running(stack, clock)
        reader.until(lambda: len(reader.of(feed)) >= 10, timeout_s=180, what="the first block's pushes")
        first.stop()
        second = Running(stack, clock)
        try:
            wait(lambda: any(sid == feed.stream_id for _, sid in second.worker.schedules)
                 and second.worker._owing_block == BLOCK, "the restarted worker to plan the block")
            publish(client, feed, 1)  # a new message in the spent block: planned, checkpointed, not pushed
            wait(settled(second.worker, feed.stream_id, 3),
                 "the new message's checkpoint")
            reader.poll(2.0)
            assert Counter(p.block for p in reader.of(feed)) == {BLOCK: 10}
            for n in range(1, 10):  # 50 subscribers × 2 messages at 10 a block: 9 more blocks
                clock.block = BLOCK + n
                reader.until(lambda n=n: len(reader.of(feed)) >= 10 * (n + 1), timeout_s=120,
                             what=f"block {BLOCK + n}")
            reader.poll(2.0)
        finally:
            second.stop()
        pushes = reader.of(feed)
        assert Counter(p.block for p in pushes) == {BLOCK + n: 10 for n in range(10)}
        assert {(p.subscriber, p.sequence) for p in pushes} == {(s, q) for s in feed.subscribers for q in (1, 2)}
    finally:
        reader.close()
        client.close()


class FailsOnce:
    """The worker's producer, but its first ``send_offsets_to_transaction`` times out and its
    ``abort_transaction`` then fails fatally: what a broker killed under an open transaction does."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.failed = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def send_offsets_to_transaction(self, *args: object, **kwargs: object) -> object:
        if not self.failed:
            self.failed = True
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "injected: the coordinator went away"))
        return self.real.send_offsets_to_transaction(*args, **kwargs)  # type: ignore[attr-defined]

    def abort_transaction(self, *_args: object, **_kwargs: object) -> None:
        raise KafkaException(KafkaError(KafkaError.INVALID_TXN_STATE, "injected: invalid state", fatal=True))


def test_a_producer_that_fails_fatally_is_replaced_in_process_and_nothing_is_lost(stack: ServiceSet) -> None:
    client = CommandClient(stack.bootstrap, prefix=stack.prefix)
    reader = PushReader(stack.bootstrap, stack.prefix)
    clock = Clock(BLOCK + 100)
    worker = DeliveryWorker(stack.bootstrap, "recover", prefix=stack.prefix, clock_ms=clock,
                            health=DeliveryHealth("recover", path=""))
    broken = FailsOnce(worker.producer)
    worker.producer = broken  # type: ignore[assignment]
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        feed = create_push_feed(client, 20, per_block=10)
        publish(client, feed, 1)
        wait(lambda: broken.failed and worker.recoveries >= 1, "the injected failure and the recovery")
        reader.until(lambda: len(reader.of(feed)) >= 10, timeout_s=180, what="the first block's pushes")
        clock.block += 1
        reader.until(lambda: len(reader.of(feed)) >= 20, timeout_s=180, what="the second block's pushes")
        reader.poll(2.0)
        assert not errors, f"the worker exited: {errors}"
        assert thread.is_alive(), "the worker stopped serving"
        assert worker.producer is not broken, "the failed producer was not replaced"
    finally:
        worker.stop()
        thread.join(60)
        reader.close()
        client.close()
    pushes = reader.of(feed)
    assert {(p.subscriber, p.sequence) for p in pushes} == {(s, 1) for s in feed.subscribers}
    assert all(n <= 10 for n in Counter(p.block for p in pushes).values())
    assert not errors, errors


class HangsOnce:
    """The worker's producer, but its first ``send_offsets_to_transaction`` does not return (until the
    test releases it) although it was given a timeout: librdkafka #5511, a stale coordinator after a
    broker outage."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.hanging = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def send_offsets_to_transaction(self, *args: object, **kwargs: object) -> object:
        if not self.hanging.is_set():
            self.hanging.set()
            self.release.wait(600)
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "injected: released by the test"))
        return self.real.send_offsets_to_transaction(*args, **kwargs)  # type: ignore[attr-defined]


def test_a_transactional_call_that_never_returns_is_given_up_and_the_worker_starts_over(
        stack: ServiceSet, tmp_path: Path) -> None:
    """While the call hangs the health file is still written; once its deadline passed the producer
    is replaced, the partitions are rebuilt from the log, and the pushes go out."""
    client = CommandClient(stack.bootstrap, prefix=stack.prefix)
    reader = PushReader(stack.bootstrap, stack.prefix)
    health_path = tmp_path / "health.json"
    worker = DeliveryWorker(stack.bootstrap, "hangs", prefix=stack.prefix, clock_ms=Clock(BLOCK + 200),
                            health=DeliveryHealth("hangs", path=str(health_path)))
    stuck = HangsOnce(worker.producer)
    worker.producer = stuck  # type: ignore[assignment]
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        feed = create_push_feed(client, 5, per_block=10)
        publish(client, feed, 1)
        wait(stuck.hanging.is_set, "the hanging call")
        # Written while the call hangs (at most once a second; the call's deadline is 12 s).
        first = json.loads(health_path.read_text())["updated_ms"]
        wait(lambda: json.loads(health_path.read_text())["updated_ms"] > first, "a health write while the call hangs",
             timeout_s=60)
        wait(lambda: worker.recoveries >= 1, "the recovery after the call's deadline")
        reader.until(lambda: len(reader.of(feed)) >= 5, timeout_s=180, what="the pushes after the recovery")
        assert not errors, f"the worker exited: {errors}"
        assert thread.is_alive(), "the worker stopped serving"
        assert worker.producer is not stuck, "the stuck producer was not replaced"
    finally:
        stuck.release.set()
        worker.stop()
        thread.join(60)
        reader.close()
        client.close()
    assert {(p.subscriber, p.sequence) for p in reader.of(feed)} == {(s, 1) for s in feed.subscribers}
    assert not errors, errors
