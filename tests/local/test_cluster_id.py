"""KRaft cluster ids: drawn like Kafka's Uuid.randomUuid(), and formatted safely whatever they start with."""

from __future__ import annotations

import base64
import re
import uuid
from pathlib import Path

import pytest
from kafka_fixture import embedded_spec

from watchtower.local import data_dir
from watchtower.local.broker import LocalKafka
from watchtower.local.data_dir import random_cluster_id

URLSAFE_ID = re.compile(r"[A-Za-z0-9_-]{22}")


def test_cluster_ids_never_start_with_a_dash_and_have_kafkas_shape() -> None:
    # One draw in 64 of plain URL-safe base64 starts with '-': 20,000 draws without the redraw
    # would all miss it with probability (63/64)**20000, about 1e-137.
    ids = [random_cluster_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    for cluster_id in ids:
        assert URLSAFE_ID.fullmatch(cluster_id), cluster_id
        assert not cluster_id.startswith("-"), cluster_id
        raw = base64.urlsafe_b64decode(cluster_id + "==")
        assert len(raw) == 16
        assert uuid.UUID(bytes=raw).version == 4, "Kafka draws a random (version 4) UUID"


def _id_starting_with_dash() -> str:
    # 0xF8 puts 62 in the first six bits, and 62 is '-' in the URL-safe alphabet.
    cluster_id = base64.urlsafe_b64encode(b"\xf8" + uuid.uuid4().bytes[1:]).decode().rstrip("=")
    assert cluster_id.startswith("-")
    return cluster_id


@pytest.mark.integration
def test_storage_formats_and_the_broker_starts_with_a_cluster_id_starting_with_a_dash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dash_id = _id_starting_with_dash()
    # The id a fresh data directory draws is the only thing replaced; formatting runs the real
    # kafka-storage tool and the broker really starts on it.
    monkeypatch.setattr(data_dir, "random_cluster_id", lambda: dash_id)
    lk = LocalKafka(embedded_spec(tmp_path / "kafka"))
    try:
        assert lk.up() > 0.0
        assert lk.status()["state"] == "running"
        meta = (lk.spec.node_specs[0].log_dirs / "meta.properties").read_text()
        assert f"cluster.id={dash_id}\n" in meta
    finally:
        lk.down()
