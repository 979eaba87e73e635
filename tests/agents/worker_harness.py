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

from watchtower.client.archive import read_committed_messages
from watchtower.protocol.message import StreamMessage
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue


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
    return read_committed_messages(bootstrap, prefix=prefix)
