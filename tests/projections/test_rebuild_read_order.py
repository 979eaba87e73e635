"""The offline rebuild's and a live worker's catch-up's results do not depend on how fast each topic is fetched.

Found under broker failover: after brokers are killed and restarted, the events and messages
partitions are led by different brokers and fetched at different speeds; the rebuild read the
messages topic so far ahead of the events that more records waited for their publish events than
the fold keeps (`fold.MAX_WAITING`), the oldest were dropped unindexed, and the rebuild's digest
no longer equalled the live projection's (see tests/workers/test_broker_failover.py).

Here the lead is built into a genuine log (written with the writer's own `decide`): in one
partition, stream ``filler``'s many publish events come before stream ``late``'s events, while
``late``'s messages come first in the messages topic. The waiting limit is lowered so the test
needs thousands of records, not tens of thousands; the rule is the same.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

import nacl.signing
import pytest
from confluent_kafka import Producer

from watchtower.projections import fold
from watchtower.projections.catch_up import CatchUp
from watchtower.projections.fold import Folder
from watchtower.projections.partitions import OwnedPartitions
from watchtower.projections.rebuild import rebuild
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.actor import StreamState, decide, evolve
from watchtower.protocol.stream.views import TABLE_NAMES
from watchtower.schemas.records import encode_message
from watchtower.schemas.wire import encode_event
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue, topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.records import Record

pytestmark = pytest.mark.integration

OWNER = nacl.signing.SigningKey(b"\x02" * 32)
PUBLISHER = nacl.signing.SigningKey(b"\x03" * 32)
FILLER_PUBLISHES = 8_000  # events of another stream the events fetch must get through first
LATE_PUBLISHES = 600
WAITING_LIMIT = 100


def _stream_log(sid: str, publishes: int) -> tuple[list[bytes], list[bytes]]:
    """(events, messages) records of a stream created and published 1..publishes, as the writer decides them."""
    state = StreamState.initial(sid)
    events: list[bytes] = []
    messages: list[bytes] = []

    def run(nonce: int, method: str, body: dict[str, Any]) -> None:
        nonlocal state
        decision = decide(state, sign_command(OWNER, method, sid, nonce, body), block_height=1)
        for event in decision.events:
            state = evolve(state, event)
            events.append(encode_event(event))
        messages.extend(encode_message(m) for m in decision.messages)

    run(1, "create_stream", {"publisher_key_hex": bytes(PUBLISHER.verify_key).hex(),
                             "ring_buffer_capacity": 100_000})
    for seq in range(1, publishes + 1):
        msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=seq, kind="t", payload=b"{}",
                           signing_key=PUBLISHER)
        run(seq + 1, "publish", msg.to_json_dict())
    assert len(messages) == publishes
    return events, messages


@pytest.fixture(scope="module")
def lead_log(kafka_bootstrap: str) -> str:
    """The prefix of topics (one partition each) holding the log described above."""
    prefix = f"ro{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, catalogue(prefix, partitions=1))
    filler_events, filler_messages = _stream_log("filler", FILLER_PUBLISHES)
    late_events, late_messages = _stream_log("late", LATE_PUBLISHES)
    producer = Producer(kafka_config(kafka_bootstrap, **{"enable.idempotence": True, "log_level": 3}))
    for topic, sid, records in (("events", "filler", filler_events), ("events", "late", late_events),
                                ("messages", "late", late_messages), ("messages", "filler", filler_messages)):
        for value in records:
            while True:
                try:
                    producer.produce(topic_name(topic, prefix), key=sid.encode(), value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
    assert producer.flush(60) == 0
    return prefix


def _every_message_indexed(tables: Mapping[str, Mapping[str, Any]]) -> None:
    for sid, n in (("filler", FILLER_PUBLISHES), ("late", LATE_PUBLISHES)):
        assert tables["heads"][sid]["published"] == n
        indexed = tables["offsets"].get(sid, {}).get("head", 0)
        assert indexed == n, f"{sid}: {n - indexed} messages were left unindexed"


def test_the_rebuild_indexes_every_message_even_when_the_messages_topic_is_read_far_ahead(
        kafka_bootstrap: str, lead_log: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fold, "MAX_WAITING", WAITING_LIMIT)
    tables, refused = rebuild(kafka_bootstrap, lead_log)

    assert refused == {}
    _every_message_indexed(tables)


def test_a_live_worker_catching_up_indexes_every_message_of_a_log_whose_messages_lead(
        kafka_bootstrap: str, lead_log: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A projection worker folding a partition it was just assigned (a restart, a standby, a
    partition moved to it) reads the events and messages topics side by side; it must not read the
    messages so far ahead that their records are dropped waiting for events (seen in the deploy
    tier: an API worker restarted under 200 publishes/s dropped thousands)."""
    monkeypatch.setattr(fold, "MAX_WAITING", WAITING_LIMIT)
    topics = tuple(topic_name(t, lead_log) for t in ("events", "messages", "replay"))
    owned = OwnedPartitions((*TABLE_NAMES, "indexes", "quarantine"))
    tables = {name: owned.table(name) for name in TABLE_NAMES}
    refused = owned.table("quarantine")
    folder = Folder(tables, refused, t_events=topics[0], t_messages=topics[1], partitions=1,
                    indexes=owned.table("indexes"))

    def fold_record(record: Record) -> None:
        if record.topic == topics[1]:
            folder.fold_message(record.partition, record.offset, record.key, record.value)
        elif record.topic == topics[0]:
            folder.fold_event(record.partition, record.offset, record.key, record.value)

    async def catch_up() -> None:
        runner = CatchUp(kafka_bootstrap, topics, owned, fold_record)
        runner.assign({(t, 0) for t in topics})
        try:
            while not owned.ready():
                await asyncio.sleep(0.1)
            # The partition serves: it has folded the log to the end it had (read as a read sees it).
            assert dict(refused) == {}
            _every_message_indexed(tables)
        finally:
            owned.assign([])  # a new generation stops the fold

    asyncio.run(asyncio.wait_for(catch_up(), 120))
