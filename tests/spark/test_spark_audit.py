"""`spark verify` and `spark export` over a real stack's archive, and over a tampered copy of it.

The copy is the stream's records re-written to another prefix's ``messages`` topic with a gap (a
sequence dropped), a forged signature, an altered payload and a record that is not a message, so
every finding of the report is provoked by a record built to cause it. One local Spark session and
one stack serve the module.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any

import nacl.public
import nacl.signing
import pytest
from click.testing import CliRunner
from confidential_feed import publish_confidential_feed
from confluent_kafka import Producer
from kafka_fixture import grant
from spark_script import KEY_2, LENGTH, ROTATED_AFTER, message

from watchtower.client.http import ApiClient
from watchtower.client.subscriber import Subscriber
from watchtower.local.stack import ServiceSet
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.schemas.records import decode_message, encode_message
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue, topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.reader import read_committed

pytest.importorskip("pyspark")
pytestmark = pytest.mark.integration

SID = "s-spark-audit"
GAP, FORGED, ALTERED = 8, 20, 5
FORGER = nacl.signing.SigningKey(bytes(range(90, 122)))


@pytest.fixture(scope="module")
def schedule(api: ApiClient) -> KeySchedule:
    from watchtower.spark.verify import verified_schedule

    return verified_schedule(api, SID)


@pytest.fixture(scope="module")
def tampered(stack: ServiceSet, api: ApiClient) -> str:
    """A prefix whose messages topic holds the stream's records with a gap, a forgery, an altered payload
    and a non-message record."""
    prefix = f"c{uuid.uuid4().hex[:8]}"
    ensure_topics(stack.bootstrap, catalogue(prefix, partitions=3))
    grant(stack.bootstrap, prefix)
    partition = partition_for_key(SID.encode(), 3)
    producer = Producer(kafka_config(stack.bootstrap))
    target = topic_name("messages", prefix)
    for m in read_committed(stack.bootstrap, [topic_name("messages", stack.prefix)], partition=partition):
        if m.key() != SID.encode():
            continue
        msg = decode_message(m.value())
        value = m.value()
        if msg.sequence == GAP:
            continue
        if msg.sequence == FORGED:
            forged = message(SID, FORGED)
            value = encode_message(sign_message(
                stream_id=SID, sequence=FORGED, timestamp_unix_ms=forged.timestamp_unix_ms, kind=forged.kind,
                payload=b'{"px":-1}', signing_key=FORGER, signing_key_id=2, tags=dict(forged.tags)))
        if msg.sequence == ALTERED:
            value = encode_message(dataclasses.replace(msg, payload_inline=b'{"px":999}'))  # the old hash stays
        producer.produce(target, key=m.key(), value=value, partition=partition, headers=m.headers())
    producer.produce(target, key=SID.encode(), value=b"not a message", partition=partition)
    assert producer.flush(60) == 0
    return prefix


def test_verify_passes_a_genuine_archive_across_a_key_rotation(
        spark: Any, stack: ServiceSet, schedule: KeySchedule) -> None:
    from watchtower.spark.verify import verify_stream

    report = verify_stream(spark, stack.bootstrap, SID, schedule, prefix=stack.prefix)
    assert report.ok
    assert (report.messages, report.verified, report.head, report.missing, report.first_bad_sequence) == (
        LENGTH, LENGTH, LENGTH, 0, None)
    assert report.per_key == {"1": {"messages": ROTATED_AFTER, "verified": ROTATED_AFTER, "bad": 0},
                              "2": {"messages": LENGTH - ROTATED_AFTER, "verified": LENGTH - ROTATED_AFTER, "bad": 0}}


def test_verify_reports_a_forged_signature_an_altered_payload_a_gap_and_a_malformed_record(
        spark: Any, stack: ServiceSet, schedule: KeySchedule, tampered: str) -> None:
    from watchtower.spark.verify import verify_stream

    report = verify_stream(spark, stack.bootstrap, SID, schedule, prefix=tampered)
    assert not report.ok
    assert report.as_json()["ok"] is False
    assert (report.messages, report.verified) == (LENGTH, LENGTH - 3)  # 29 messages + 1 malformed record
    assert (report.bad_signatures, report.bad_hashes, report.malformed, report.duplicates) == (1, 1, 1, 0)
    assert (report.missing, report.gaps, report.head) == (1, [[GAP, GAP]], LENGTH)
    assert report.first_bad_sequence == ALTERED
    assert report.per_key["2"] == {"messages": LENGTH - ROTATED_AFTER, "verified": LENGTH - ROTATED_AFTER - 1, "bad": 1}
    assert report.per_key["1"]["bad"] == 1  # the altered payload, signed under key 1


def test_export_writes_parquet_by_stream_and_date_with_key_id_and_verification(
        spark: Any, stack: ServiceSet, schedule: KeySchedule, tampered: str, tmp_path: Path) -> None:
    import pyarrow.dataset as ds

    from watchtower.spark.export import export_stream

    out = tmp_path / "export"
    result = export_stream(spark, stack.bootstrap, SID, schedule, out, prefix=tampered)
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table().to_pylist()
    rows = {r["sequence"]: r for r in table}
    assert result.rows == len(table) == LENGTH - 1
    assert sorted(rows) == [s for s in range(1, LENGTH + 1) if s != GAP]
    assert {p.name for p in out.iterdir() if p.is_dir()} == {f"stream_id={SID}"}
    dates = {p.name for p in (out / f"stream_id={SID}").iterdir() if p.is_dir()}
    assert dates == {f"date={r['date']}" for r in table}
    assert len(dates) == result.dates > 1
    status = {s: r["verification"] for s, r in rows.items()}
    assert status[FORGED] == "bad_signature"
    assert status[ALTERED] == "bad_hash"
    assert {s for s, v in status.items() if v == "verified"} == set(rows) - {FORGED, ALTERED}
    for seq, row in rows.items():
        expected = message(SID, seq)
        assert row["signing_key_id"] == row["key_in_force"] == (1 if seq <= ROTATED_AFTER else 2)
        assert json.loads(row["tags_json"]) == dict(expected.tags)
        assert row["timestamp_unix_ms"] == expected.timestamp_unix_ms
        if seq not in (FORGED, ALTERED):
            assert bytes(row["publisher_sig"]) == expected.publisher_sig
    assert bytes(KEY_2.verify_key) == schedule.key_at_sequence(LENGTH).public_key


def test_the_cli_verifies_a_stream_and_prints_the_json_report(
        spark: Any, stack: ServiceSet, api: ApiClient, tampered: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from watchtower.cli.spark_cmd import spark as group

    monkeypatch.setenv("WATCHTOWER_TOPIC_PREFIX", stack.prefix)
    args = ["verify", "--stream", SID, "--api", stack.api_url, "--bootstrap", stack.bootstrap, "--json"]
    good = CliRunner().invoke(group, args)
    assert good.exit_code == 0, good.output
    assert json.loads(good.stdout)["ok"] is True
    monkeypatch.setenv("WATCHTOWER_TOPIC_PREFIX", tampered)
    bad = CliRunner().invoke(group, args)
    assert bad.exit_code == 1
    assert json.loads(bad.stdout)["first_bad_sequence"] == ALTERED


def test_an_export_of_a_confidential_feed_is_verified_ciphertext_a_member_alone_can_open(
        spark: Any, stack: ServiceSet, tmp_path: Path) -> None:
    """docs/private-feeds.md: Spark verifies a confidential feed's signatures over the ciphertext,
    and its export holds ciphertext and sealed boxes only (read back from Parquet, decompressed)."""
    import pyarrow.dataset as ds

    from watchtower.spark.export import export_stream
    from watchtower.spark.verify import verified_schedule

    api = ApiClient(stack.api_url)
    feed = publish_confidential_feed(stack.api_url, tmp_path / "home", prefix="spark-conf", count=3)
    sid = feed.stream_id

    out = tmp_path / "export"
    result = export_stream(spark, stack.bootstrap, sid, verified_schedule(api, sid), out, prefix=stack.prefix)
    rows = sorted(ds.dataset(out, format="parquet", partitioning="hive").to_table().to_pylist(),
                  key=lambda r: r["sequence"])
    assert result.rows == len(rows) == 4
    assert {r["verification"] for r in rows} == {"verified"}
    secrets = list(feed.secrets().values())
    for row in rows:
        cells = json.dumps(row, default=lambda v: bytes(v).hex() if isinstance(v, bytes | bytearray) else str(v))
        assert not any(s in bytes(row["payload_inline"]) or s.hex() in cells for s in secrets)
    reader = feed.reader()
    stored = {m.sequence: m for m in Subscriber(api, sid).poll(10)}
    assert [bytes(r["payload_inline"]) for r in rows] == [stored[s].payload_inline for s in (1, 2, 3, 4)]
    reader.read(stored[1])  # the keyload
    assert [reader.read(stored[s]).plaintext for s in (2, 3, 4)] == list(feed.plaintexts)
