"""Send a record through each of the three client stacks and read it back.

The chain is: confluent-kafka produces *transactionally* to ``a`` → a Faust
``exactly_once`` agent (aiokafka, transactional) forwards it to ``b`` → confluent-kafka
reads ``b`` with ``read_committed`` → Spark's Kafka source reads ``b`` read_committed and
its Kafka sink writes to ``c`` → confluent-kafka reads ``c``. Each hop is reported as a
:class:`Hop` so the demo can print what happened and the tests can assert on it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from watchtower.local.errors import LocalStackError
from watchtower.topics.client_probe import make_topics, produce_aborted, produce_transactional, read_committed_until


@dataclass(frozen=True)
class Hop:
    """One client step and what it observed."""

    client: str
    action: str
    value: str
    seconds: float


def read_committed(bootstrap: str, topic: str, until: Callable[[list[bytes]], bool],
                   timeout: float = 60.0) -> list[bytes]:
    """Read ``topic`` from the start with isolation read_committed until ``until(values)``."""
    try:
        return read_committed_until(bootstrap, topic, until, timeout)
    except TimeoutError as exc:
        raise LocalStackError(str(exc)) from None


def faust_forward(bootstrap: str, source: str, sink: str, expect: bytes, timeout: float = 120.0) -> float:
    """Run the Faust probe worker until ``expect`` appears on ``sink``; return the seconds taken."""
    started = time.monotonic()
    app_id = f"wt-smoke-faust-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([sys.executable, "-m", "watchtower.local.faust_probe", bootstrap, source, sink, app_id],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        read_committed(bootstrap, sink, lambda vs: expect in vs, timeout)
    except LocalStackError:
        proc.kill()
        out = proc.communicate(timeout=10)[0].decode(errors="replace")[-800:]
        raise LocalStackError(f"the Faust worker did not forward the record; its output: {out}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if proc.stdout:
            proc.stdout.close()
    return time.monotonic() - started


def three_client_roundtrip(bootstrap: str, spark_copy: Callable[[str, str, str], list[str]],
                           progress: Callable[[Hop], None] = lambda _h: None) -> list[Hop]:
    """Run the whole chain; returns every hop. Raises LocalStackError on the first failure.

    `spark_copy(bootstrap, source, sink)` is the Spark hop (`watchtower.spark.smoke.spark_copy`):
    handed in, so the local stack never imports Spark, which imports the local stack's jars."""
    tag = uuid.uuid4().hex[:8]
    a, b, c = (f"wt-smoke-{tag}-{x}" for x in "abc")
    make_topics(bootstrap, [a, b, c])
    hops: list[Hop] = []

    def hop(client: str, action: str, value: str, t0: float) -> None:
        h = Hop(client, action, value, round(time.monotonic() - t0, 2))
        hops.append(h)
        progress(h)

    t0 = time.monotonic()
    produce_aborted(bootstrap, a, b"k", b"aborted")
    produce_transactional(bootstrap, a, b"k", b"hello")
    hop("confluent-kafka", f"transactional produce to {a} (plus one aborted)", "hello", t0)
    t0 = time.monotonic()
    faust_forward(bootstrap, a, b, b"hello via faust")
    hop("faust-streaming", f"exactly_once agent {a} -> {b}", "hello via faust", t0)
    t0 = time.monotonic()
    seen = read_committed(bootstrap, b, lambda vs: b"hello via faust" in vs)
    if b"aborted via faust" in seen:
        raise LocalStackError("an aborted record became visible to a read_committed consumer")
    hop("confluent-kafka", f"read_committed consume of {b}", seen[-1].decode(), t0)
    t0 = time.monotonic()
    rows = spark_copy(bootstrap, b, c)
    hop("spark", f"read_committed batch read of {b}, write to {c}", ",".join(rows), t0)
    t0 = time.monotonic()
    out = read_committed(bootstrap, c, lambda vs: b"hello via faust via spark" in vs)
    hop("confluent-kafka", f"read_committed consume of {c}", out[-1].decode(), t0)
    return hops
