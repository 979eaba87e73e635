"""`watchtower local` against real broker processes: lifecycle, crash recovery, stale state."""

from __future__ import annotations

import os
import signal
import socket
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_fixture import embedded_spec

from watchtower.local.broker import LocalKafka
from watchtower.local.processes import pid_alive
from watchtower.topics.connection import kafka_config

pytestmark = pytest.mark.integration


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def broker(tmp_path: Path) -> LocalKafka:
    lk = LocalKafka(embedded_spec(tmp_path / "kafka"))
    yield lk
    lk.down()


def test_up_is_idempotent_and_down_leaves_nothing(broker: LocalKafka) -> None:
    assert broker.up() > 0.0
    first = broker.status()
    assert first["state"] == "running"
    pid = first["nodes"][0]["pid"]
    assert pid_alive(pid)

    assert broker.up() == 0.0, "a second up must be a no-op"
    assert broker.status()["nodes"][0]["pid"] == pid

    broker.down()
    assert not pid_alive(pid)
    assert not _port_open(broker.spec.port)
    assert broker.status()["state"] == "stopped"
    assert not broker.spec.node_specs[0].pid_file.exists()


def _produce(bootstrap: str, topic: str, value: bytes) -> None:
    p = Producer({**kafka_config(bootstrap), "acks": "all", "enable.idempotence": True, "log_level": 0})
    delivered: list[object] = []
    p.produce(topic, value=value, on_delivery=lambda err, msg: delivered.append(err or msg))
    p.flush(30)
    assert len(delivered) == 1
    assert not isinstance(delivered[0], Exception)
    assert delivered[0].error() is None  # type: ignore[attr-defined]


def _consume_all(bootstrap: str, topic: str, n: int) -> list[bytes]:
    c = Consumer({**kafka_config(bootstrap), "group.id": uuid.uuid4().hex,
                  "auto.offset.reset": "earliest", "log_level": 0})
    c.subscribe([topic])
    got: list[bytes] = []
    for _ in range(120):
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
        if len(got) >= n:
            break
    c.close()
    return got


def test_record_survives_sigkill_and_restart(broker: LocalKafka) -> None:
    broker.up()
    bs = broker.spec.bootstrap
    admin = AdminClient(kafka_config(bs))
    admin.create_topics([NewTopic("durable", 1, 1)])["durable"].result()
    _produce(bs, "durable", b"before-kill")

    pid = broker.status()["nodes"][0]["pid"]
    broker.kill_node(1, signal.SIGKILL)
    assert not pid_alive(pid)
    assert broker.status()["state"] == "stopped"

    assert broker.up() > 0.0, "up after a crash must restart the broker (the stale pid file is cleared)"
    assert broker.status()["nodes"][0]["pid"] != pid
    assert _consume_all(bs, "durable", 1) == [b"before-kill"]


def test_stale_pid_file_naming_another_process_is_ignored(broker: LocalKafka) -> None:
    broker.up()
    broker.down()
    node = broker.spec.node_specs[0]
    # Our own pid is alive but is not a Kafka broker for this data dir: it must not count as running.
    node.pid_file.write_text(str(os.getpid()))
    assert broker.status()["state"] == "stopped"
    assert broker.up() > 0.0
    assert broker.status()["nodes"][0]["pid"] != os.getpid()
