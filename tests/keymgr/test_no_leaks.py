"""No master seed and no epoch content key ever leaves the key manager in clear.

The scanner itself is proven first: a seed planted in a scratch topic (as a key, a header, inside
a base64 blob at an odd offset, inside an aborted transaction) and in a log file is found in every
form, and a secret that was never written is not.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from leak_scan import LeakScanner

from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import TopicSpec
from watchtower.topics.connection import kafka_config

pytestmark = [pytest.mark.integration]


def test_the_scan_finds_a_seed_planted_in_a_topic_a_log_and_the_output(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    seed, never_written = os.urandom(32), os.urandom(32)
    topic = f"t{uuid.uuid4().hex[:8]}.scratch"
    ensure_topics(kafka_bootstrap, [TopicSpec("scratch", topic, partitions=2, retention_ms=3_600_000)])
    plain = Producer({**kafka_config(kafka_bootstrap), "acks": "all"})
    plain.produce(topic, key=b"innocent", value=b'{"hello": "world"}', partition=0)
    plain.produce(topic, key=seed, value=b"x", partition=0)
    plain.produce(topic, key=b"k", value=b"v", headers={"h": seed.hex().encode()}, partition=1)
    blob = base64.b64encode(b"ab" + seed + b"tail").decode()  # the seed sits at offset 2 of the blob
    plain.produce(topic, key=b"k", value=json.dumps({"blob": blob}).encode(), partition=1)
    plain.flush(30)
    txn = Producer({**kafka_config(kafka_bootstrap), "transactional.id": f"leak-{uuid.uuid4().hex}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, key=b"aborted", value=b"pre" + seed + b"post", partition=0)
    txn.flush(30)
    txn.abort_transaction(30)

    records, found = LeakScanner({"seed": seed}).scan_topics(kafka_bootstrap, [topic])
    assert records == 5
    places = sorted((f.form, f.where) for f in found)
    assert places == sorted([
        ("raw", f"{topic}/0@1 key"),
        ("hex", f"{topic}/1@0 header h"),
        ("base64", f"{topic}/1@1 value"),
        ("raw", f"{topic}/0@2 value"),
    ]), places
    assert LeakScanner({"never": never_written}).scan_topics(kafka_bootstrap, [topic])[1] == []

    logs = tmp_path / "logs"
    (logs / "svc").mkdir(parents=True)
    (logs / "svc" / "keymgr.log").write_text(f"INFO loaded {seed!r}\n")
    (logs / "other.log").write_text("nothing here\n")
    files, in_files = LeakScanner({"seed": seed}).scan_tree(logs)
    assert files == 2
    assert [(f.form, Path(f.where).name) for f in in_files] == [("repr", "keymgr.log")]
    out = f"key={base64.urlsafe_b64encode(b'z' + seed).decode()}"
    # URL-safe and standard base64 differ only where the text has '+' or '/', so either may match.
    assert [f.form[:6] for f in LeakScanner({"seed": seed}).scan_text(out, "stdout")] == ["base64"]
    assert LeakScanner({"never": never_written}).scan_text(out, "stdout") == []
