"""Run stream-actor workers as real OS processes so tests can `kill -9` them.

Also the by-hand tools the integration tests need: a raw request/reply channel on the commands
topic (for records no SDK would build), Kafka's murmur2 partitioner (to place streams on chosen
partitions), a reader of the committed events, and a view of the worker group's assignment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from waiting import wait_until

from watchtower.cli.message_log import read_committed_messages
from watchtower.protocol.stream.actor import Event
from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas.wire import H_CORRELATION, H_REPLY_PARTITION, decode_event, decode_reply
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue, topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.reader import read_committed
from watchtower.workers.command_processor import group_id


@dataclass
class Workers:
    bootstrap: str
    prefix: str
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    log_dir: Path | None = None

    def start(self, worker_id: str, env: dict[str, str] | None = None, script: Path | None = None) -> None:
        """Start a worker process; ``env`` adds variables (e.g. WATCHTOWER_HEALTH_FILE) to ours;
        ``script`` runs that worker script (same arguments) instead of the stock worker."""
        # With a log_dir each worker's stderr goes to <log_dir>/<worker_id>.log (appended across
        # restarts), so a failing test can show what the worker said.
        stderr: Any = subprocess.DEVNULL
        if self.log_dir is not None:
            stderr = (self.log_dir / f"{worker_id}.log").open("ab")
        try:
            self.procs[worker_id] = subprocess.Popen(
                [sys.executable, *(["-m", "watchtower.workers.worker_main"] if script is None else [str(script)]),
                 self.bootstrap, worker_id, self.prefix],
                stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
                env={**os.environ, **(env or {})})
        finally:
            if stderr is not subprocess.DEVNULL:
                stderr.close()

    def kill9(self, worker_id: str) -> None:
        proc = self.procs.pop(worker_id)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def terminate(self, worker_id: str, timeout: float = 30.0) -> int:
        """Stop a worker gracefully (SIGTERM) and return its exit code."""
        proc = self.procs.pop(worker_id)
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout)

    def pid(self, worker_id: str) -> int:
        return self.procs[worker_id].pid

    def alive(self, worker_id: str) -> bool:
        proc = self.procs.get(worker_id)
        return proc is not None and proc.poll() is None

    def log(self, worker_id: str) -> str:
        """What the worker wrote to stderr so far ("" without a log_dir)."""
        if self.log_dir is None:
            return ""
        path = self.log_dir / f"{worker_id}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.procs.clear()


@contextmanager
def workers(bootstrap: str, partitions: int = 3, log_dir: Path | None = None) -> Iterator[Workers]:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    specs = catalogue(prefix, partitions=partitions)
    ensure_topics(bootstrap, specs)
    wait_for_leaders(bootstrap, [s.name for s in specs])
    w = Workers(bootstrap, prefix, log_dir=log_dir)
    try:
        yield w
    finally:
        w.stop_all()


def read_all_messages(bootstrap: str, prefix: str) -> list[StreamMessage]:
    """Every committed StreamMessage on the messages topic, in log order."""
    return read_committed_messages(bootstrap, prefix=prefix)


def wait_for_leaders(bootstrap: str, topics: list[str], timeout: float = 30.0) -> None:
    """Return once every partition of ``topics`` answers an offset query.

    Creating a topic is asynchronous: for a moment after ``create_topics`` succeeds its partitions
    have no leader yet, and clients started then fail with NOT_LEADER_FOR_PARTITION.
    """
    consumer = Consumer({**kafka_config(bootstrap), "group.id": f"wt-ready-{uuid.uuid4().hex}",
                         "log_level": 0})
    try:
        for topic in topics:
            for p in consumer.list_topics(topic, timeout=timeout).topics[topic].partitions:
                _end_offset(consumer, TopicPartition(topic, p), timeout)
    finally:
        consumer.close()


# --- Raw request/reply ----------------------------------------------------------------------------


class RawCommandChannel:
    """Put any bytes (or no value at all) on the commands topic and wait for the worker's reply.

    Does by hand what ``CommandClient`` does: the record carries the correlation and reply-partition
    headers, is keyed (murmur2, like every client) so it lands on the partition of ``key``, and the
    reply is read ``read_committed`` from the chosen partition of the replies topic.
    """

    def __init__(self, bootstrap: str, prefix: str, reply_partition: int = 0) -> None:
        self.t_commands = topic_name("commands", prefix)
        self.t_replies = topic_name("replies", prefix)
        self.reply_partition = reply_partition
        self.producer = Producer({**kafka_config(bootstrap), "enable.idempotence": True, "acks": "all",
                                  "partitioner": "murmur2_random", "log_level": 3})
        self.consumer = Consumer({**kafka_config(bootstrap), "group.id": f"wt-raw-{uuid.uuid4().hex}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "log_level": 3})
        # Every reply to a record sent from now on lands at or after today's end of the partition.
        high = _end_offset(self.consumer, TopicPartition(self.t_replies, reply_partition))
        self.consumer.assign([TopicPartition(self.t_replies, reply_partition, high)])
        self._early: dict[str, dict[str, Any]] = {}

    def send(self, value: bytes | None, *, key: str, headers: dict[str, str] | None = None,
             partition: int | None = None) -> tuple[str, int]:
        """Produce one record (to `partition` when given, else where its key hashes); return its
        correlation id and the commands partition it landed on."""
        corr = uuid.uuid4().hex
        hdrs: dict[str, str | bytes | None] = {H_CORRELATION: corr, H_REPLY_PARTITION: str(self.reply_partition)}
        hdrs.update(headers or {})
        delivered: list[int] = []
        failed: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                failed.append(err)
            else:
                delivered.append(int(msg.partition()))

        placed = {} if partition is None else {"partition": partition}
        self.producer.produce(self.t_commands, key=key.encode(), value=value, headers=hdrs, on_delivery=on_delivery,
                              **placed)
        self.producer.flush(30)
        assert not failed, f"producing the command failed: {failed}"
        assert delivered, "the command was not delivered within 30 s"
        return corr, delivered[0]

    def reply(self, corr: str, timeout: float = 60.0) -> dict[str, Any]:
        """The decoded reply envelope (``{"v", "ok", "result" | "error"}``) for ``corr``."""
        def replied() -> bool:
            if corr not in self._early:
                msg = self.consumer.poll(0.2)
                if msg is not None and not msg.error():
                    self._early[(msg.key() or b"").decode()] = decode_reply(msg.value())
            return corr in self._early

        wait_until(f"a reply to {corr} (the worker never answered)", replied, timeout_s=timeout, every_s=0)
        return self._early.pop(corr)

    def request(self, value: bytes | None, *, key: str, timeout: float = 60.0) -> tuple[int, dict[str, Any]]:
        """Send a record and wait for its reply: (commands partition, reply envelope)."""
        corr, partition = self.send(value, key=key)
        return partition, self.reply(corr, timeout)

    def close(self) -> None:
        self.producer.flush(10)
        self.consumer.close()


def _end_offset(consumer: Consumer, tp: TopicPartition, timeout: float = 30.0) -> int:
    """The end offset of ``tp``, waiting out a topic so new that its leader is not known yet."""
    def answered() -> tuple[int] | None:
        try:
            _low, high = consumer.get_watermark_offsets(tp, timeout=10)
        except KafkaException as exc:
            if not exc.args[0].retriable() and exc.args[0].code() != KafkaError.NOT_LEADER_FOR_PARTITION:
                raise
            return None
        return (int(high),)

    return wait_until(f"the end offset of {tp.topic}/{tp.partition}", answered, timeout_s=timeout, every_s=0.2)[0]


# --- Partitioning, the events log and the worker group --------------------------------------------


def partition_for(key: str, partitions: int) -> int:
    """The partition Kafka's default (murmur2) partitioner picks for a non-empty ``key``."""
    return partition_for_key(key.encode(), partitions)


@dataclass(frozen=True)
class LoggedEvent:
    partition: int
    offset: int
    event: Event


def read_committed_events(bootstrap: str, prefix: str) -> list[LoggedEvent]:
    """Every committed event on the events topic, in log order within each partition."""
    return [LoggedEvent(int(m.partition() or 0), int(m.offset() or 0), decode_event(m.value()))
            for m in read_committed(bootstrap, [topic_name("events", prefix)])]


def group_assignment(bootstrap: str, topic: str) -> dict[str, frozenset[int]] | None:
    """Partitions of ``topic`` per member client id of the worker group, or None while it rebalances.

    Each topic prefix has its own worker group; only assignments of ``topic`` (the test's commands
    topic) are reported.
    """
    admin = AdminClient({**kafka_config(bootstrap), "log_level": 0})
    group = group_id(topic.rsplit(".", 1)[0])
    desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    if desc.state.name != "STABLE":
        return None
    out: dict[str, frozenset[int]] = {}
    for member in desc.members:
        parts = frozenset(tp.partition for tp in member.assignment.topic_partitions if tp.topic == topic)
        if parts:
            out[member.client_id] = parts
    return out


def wait_for_assignment(bootstrap: str, topic: str, members: int, partitions: int,
                        timeout: float = 60.0) -> dict[str, frozenset[int]]:
    """Wait until ``members`` workers together own all ``partitions`` of ``topic``; return who owns what."""
    last: dict[str, frozenset[int]] | None = None

    def assigned() -> dict[str, frozenset[int]] | None:
        nonlocal last
        last = group_assignment(bootstrap, topic)
        if last is None or len(last) != members:
            return None
        owned = sorted(p for parts in last.values() for p in parts)
        return last if owned == list(range(partitions)) else None

    return wait_until(lambda: f"{topic}: {partitions} partitions over {members} workers (last saw {last})",
                      assigned, timeout_s=timeout, every_s=0.25)


# --- The worker's health file ---------------------------------------------------------------------


def read_health(path: Path) -> dict[str, Any] | None:
    """The worker's health file, or None while it does not exist yet."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    assert isinstance(data, dict), data
    return data


def wait_for_health(path: Path, check: Callable[[dict[str, Any]], bool], timeout: float = 60.0) -> dict[str, Any]:
    """Poll the health file until ``check`` holds; return that health. The file is replaced
    atomically by the worker, so every read sees one whole JSON document."""
    last: dict[str, Any] | None = None

    def reached() -> dict[str, Any] | None:
        nonlocal last
        last = read_health(path)
        return last if last is not None and check(last) else None

    return wait_until(lambda: f"the health file {path} to reach the expected state (last: {last})", reached,
                      timeout_s=timeout, every_s=0.05)
