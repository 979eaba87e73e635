"""`ReplayClient.messages` on a real stack (broker, stream-actor worker, projection) and a fulfilment
written by hand.

A ring-10 stream takes 50 publishes. A fulfilment is written here the way the replay worker writes
one (the archived ``messages`` records, byte for byte, on ``deliveries`` keyed by the requester,
with the original headers and the ICRC-77 replay headers appended, in Kafka transactions; the
``registered`` / ``progress`` / ``completed`` records on ``replay``), with what a reader must
survive around it: a second transaction repeating part of the range (a fulfilment that crashed after
committing), another replay of the same account, a live push without replay headers, and an
aborted transaction. The SDK must read exactly the range, verified, once each; a forged delivery is
refused with INVALID_SIGNATURE. (tests/client/test_replay_client.py does the same with the real
replay worker.)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from confluent_kafka import Producer
from stack_fixture import start_stack

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.replay import ReplayClient, ReplayTicket
from watchtower.client.sdk import Publisher, create_feed, wait_until_visible
from watchtower.local.stack import ServiceSet
from watchtower.protocol.errors import InvalidSignatureError, RequestTimeoutError
from watchtower.protocol.replay.records import ReplayCompleted, ReplayProgress, ReplayRecord, ReplayRegistration
from watchtower.protocol.replay.rules import replay_headers
from watchtower.schemas.records import decode_message, encode_message
from watchtower.schemas.replay_records import encode_replay_record
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import read_committed

pytestmark = pytest.mark.integration

PUBLISHED = 50
Record = tuple[bytes | None, list[tuple[str, bytes]]]  # (value, headers) of a messages record


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceSet]:
    """No replay worker: the fulfilment is the test's."""
    with start_stack(kafka_bootstrap, tmp_path_factory.mktemp("deliveries-logs"), replay=False) as services:
        yield services


@pytest.fixture(scope="module")
def feed(stack: ServiceSet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A ring-10 stream with 50 messages (only 41..50 left in the window) and its archived records."""
    home = tmp_path_factory.mktemp("replay-home")
    api = ApiClient(stack.api_url)
    owner = Account(nacl.signing.SigningKey.generate(), home=home)
    key = nacl.signing.SigningKey.generate()
    reply = create_feed(api, owner, name="replayed", publisher_key_hex=bytes(key.verify_key).hex(),
                        ring_buffer_capacity=10)
    sid = reply["stream_id"]
    wait_until_visible(api, sid)
    publisher = Publisher(api, owner, sid, key)
    for i in range(1, PUBLISHED + 1):
        publisher.publish("tick", b'{"i": %d}' % i, {"n": float(i)})
    wait_until_visible(api, sid, min_head=PUBLISHED)
    records: dict[int, Record] = {}
    for m in read_committed(stack.bootstrap, [topic_name("messages", stack.prefix)]):
        if m.key() == sid.encode():
            headers = [(str(k), bytes(v or b"")) for k, v in (m.headers() or [])]
            records[decode_message(m.value() or b"").sequence] = (m.value(), headers)
    assert sorted(records) == list(range(1, PUBLISHED + 1))
    return {"api": api, "stream_id": sid, "owner": owner, "records": records, "home": home}


class Fulfilment:
    """Writes deliveries and replay records as the replay worker does: one transaction per slice."""

    def __init__(self, stack: ServiceSet, requester: str) -> None:
        self.stack, self.requester = stack, requester
        self.t_deliveries = topic_name("deliveries", stack.prefix)
        self.t_replay = topic_name("replay", stack.prefix)
        self.producer = Producer(kafka_config(stack.bootstrap, **{
            "transactional.id": f"wt-test-replay-{uuid.uuid4().hex}", "partitioner": "murmur2_random",
            "log_level": 3}))
        self.producer.init_transactions(30)

    def slice(self, records: list[Record], replay_id: int, end_id: int | None, *, status: list[ReplayRecord],
              commit: bool = True) -> None:
        self.producer.begin_transaction()
        for value, headers in records:
            self.producer.produce(self.t_deliveries, key=self.requester.encode(), value=value,
                                  headers=[*headers, *replay_headers(replay_id, end_id)])
        for record in status:
            self.producer.produce(self.t_replay, key=record.stream_id.encode(), value=encode_replay_record(record))
        if commit:
            self.producer.commit_transaction(30)
        else:
            self.producer.abort_transaction(30)

    def push(self, record: Record) -> None:
        """A live PUSH delivery (no replay headers) to the same account."""
        self.producer.begin_transaction()
        self.producer.produce(self.t_deliveries, key=self.requester.encode(), value=record[0], headers=record[1])
        self.producer.commit_transaction(30)


def registered(rid: int, sid: str, requester: str, first: int, end: int) -> ReplayRegistration:
    return ReplayRegistration(v=1, replay_id=rid, stream_id=sid, namespace=sid, requester=requester,
                            from_sequence=first, to_sequence=end, first=first, end_exclusive=end, end_id=None,
                            filter=None, skip=None, memo_hex="", price_cby=0, block_height=1, caller=requester,
                            nonce=rid, digest_hex="00" * 32)


def progress(rid: int, sid: str, next_sequence: int, delivered: int) -> ReplayProgress:
    return ReplayProgress(v=1, replay_id=rid, stream_id=sid, engine="service", partition=0,
                          next_offset=next_sequence, next_sequence=next_sequence, delivered=delivered, filtered=0,
                          skipped=0, at_ms=1)


def completed(rid: int, sid: str, delivered: int) -> ReplayCompleted:
    return ReplayCompleted(v=1, replay_id=rid, stream_id=sid, engine="service", delivered=delivered, filtered=0,
                           skipped=0, at_ms=2)


@pytest.fixture
def reader(stack: ServiceSet, feed: dict[str, Any]) -> tuple[ReplayClient, Fulfilment]:
    account = Account(nacl.signing.SigningKey.generate(), home=feed["home"])
    client = ReplayClient(account, feed["api"], stack.bootstrap, prefix=stack.prefix,
                          expected_owner=feed["owner"].address)
    return client, Fulfilment(stack, account.address)


def _ticket(client: ReplayClient, rid: int, sid: str, first: int, end: int) -> ReplayTicket:
    return ReplayTicket(replay_id=rid, stream_id=sid, requester=client.account.address, first=first,
                        end_exclusive=end, end_id=None, price_cby=0,
                        deliveries_offset=client._deliveries_end())


def test_messages_yields_exactly_the_replayed_range_verified_and_once_each(
        reader: tuple[ReplayClient, Fulfilment], feed: dict[str, Any]) -> None:
    client, fulfil = reader
    sid, records = feed["stream_id"], feed["records"]
    rid, other = 1_000_001 + uuid.uuid4().int % 10**9, 7
    ticket = _ticket(client, rid, sid, 1, 31)
    rng = [records[s] for s in range(1, 31)]
    fulfil.slice([], rid, None, status=[registered(rid, sid, client.account.address, 1, 31)])
    fulfil.slice(rng[:12], rid, None, status=[progress(rid, sid, 13, 12)])
    fulfil.slice(rng[5:12], rid, None, status=[], commit=False)  # aborted: never seen
    fulfil.slice(rng[8:20], rid, None, status=[progress(rid, sid, 21, 20)])  # committed again after a crash
    fulfil.push(records[50])  # a live push to the same account
    fulfil.slice([records[s] for s in (44, 45)], other, None, status=[])  # another replay of the same account
    fulfil.slice(rng[20:], rid, None, status=[completed(rid, sid, 30)])
    statuses: list[dict[str, Any]] = []
    got = list(client.messages(ticket, timeout_s=120, on_status=statuses.append))
    assert [m.sequence for m in got] == list(range(1, 31))
    assert {m.stream_id for m in got} == {sid}
    assert [m.payload_inline for m in got] == [b'{"i": %d}' % i for i in range(1, 31)]
    assert statuses[-1]["status"] == {"completed": 30}


def test_a_forged_delivery_is_refused_and_an_unfinished_replay_times_out(
        reader: tuple[ReplayClient, Fulfilment], feed: dict[str, Any]) -> None:
    client, fulfil = reader
    sid, records = feed["stream_id"], feed["records"]
    rid = 2_000_001 + uuid.uuid4().int % 10**9
    ticket = _ticket(client, rid, sid, 3, 6)
    forged = decode_message(records[4][0] or b"")
    altered = encode_message(type(forged).from_json_dict({**forged.to_json_dict(), "kind": "forged"}))
    fulfil.slice([records[3], (altered, records[4][1])], rid, None,
                 status=[registered(rid, sid, client.account.address, 3, 6), progress(rid, sid, 5, 2)])
    seen: list[int] = []

    def read_all() -> None:
        seen.extend(msg.sequence for msg in client.messages(ticket, timeout_s=120))

    with pytest.raises(InvalidSignatureError, match="altered or forged"):
        read_all()
    assert seen == [3]
    # Without its end, a replay is waited for until the deadline, then TIMEOUT says what to check.
    quiet = _ticket(client, rid + 1, sid, 1, 3)
    fulfil.slice([records[1]], rid + 1, None, status=[registered(rid + 1, sid, client.account.address, 1, 3)])
    with pytest.raises(RequestTimeoutError, match="watchtower replay status"):
        list(client.messages(quiet, timeout_s=3))


def test_a_ticket_without_a_start_reads_the_partition_from_the_beginning(
        reader: tuple[ReplayClient, Fulfilment], feed: dict[str, Any], tmp_path: Path) -> None:
    client, fulfil = reader
    sid, records = feed["stream_id"], feed["records"]
    rid = 3_000_001 + uuid.uuid4().int % 10**9
    fulfil.slice([records[s] for s in range(41, 44)], rid, None,
                 status=[registered(rid, sid, client.account.address, 41, 44), completed(rid, sid, 3)])
    ticket = ReplayTicket(replay_id=rid, stream_id=sid, requester=client.account.address, first=41,
                          end_exclusive=44, end_id=None, price_cby=0)
    assert [m.sequence for m in client.messages(ticket, timeout_s=120)] == [41, 42, 43]
