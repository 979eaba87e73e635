"""Run stream-actor workers as real OS processes so tests can `kill -9` them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition

from watchtower.protocol.message import StreamMessage
from watchtower.schemas.records import decode_message
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue, topic_name


@dataclass
class Workers:
    bootstrap: str
    prefix: str
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, worker_id: str) -> None:
        self.procs[worker_id] = subprocess.Popen(
            [sys.executable, "-m", "watchtower.agents.worker_main", self.bootstrap, worker_id, self.prefix],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def kill9(self, worker_id: str) -> None:
        proc = self.procs.pop(worker_id)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def alive(self, worker_id: str) -> bool:
        proc = self.procs.get(worker_id)
        return proc is not None and proc.poll() is None

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
def workers(bootstrap: str, partitions: int = 3) -> Iterator[Workers]:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, catalogue(prefix, partitions=partitions))
    w = Workers(bootstrap, prefix)
    try:
        yield w
    finally:
        w.stop_all()


def read_all_messages(bootstrap: str, prefix: str) -> list[StreamMessage]:
    """Every committed StreamMessage on the messages topic, in log order."""
    topic = topic_name("messages", prefix)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "auto.offset.reset": "earliest", "log_level": 3})
    md = c.list_topics(topic, timeout=30)
    parts = list(md.topics[topic].partitions)
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    out: list[StreamMessage] = []
    eof: set[int] = set()
    while len(eof) < len(parts):
        for m in c.consume(500, timeout=1.0):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                continue
            out.append(decode_message(m.value()))
    c.close()
    return out
