"""ICRC-77 replay control on a real worker: registrations, payment through the ledger, cancels, forgeries.

One worker process (with a genesis minter in its environment) serves the module over a real
broker. Commands go to the commands topic keyed by their stream id, as every client sends them.
The events topic is folded with `KeymgrState` (the same fold the key-manager service uses) for
balances, and the ``replay`` topic is read with `decode_replay_record`. A reply is committed in
the transaction that wrote its events and records, so once a reply is read, its records are
readable too; the credit to the stream owner travels on through ``internal``, so a test waits
(with a deadline) for it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from confluent_kafka import Producer
from waiting import wait_until
from worker_harness import (
    RawCommandChannel,
    Workers,
    partition_for,
    read_committed_events,
    wait_for_health,
    workers,
)

from watchtower.protocol import events as ev
from watchtower.protocol.errors import MalformedRecordError
from watchtower.protocol.ledger.common import SUPPLY_KEY, Origin, ReplayFinished, ReplaySettled
from watchtower.protocol.ledger.keymgr_access import KeymgrState
from watchtower.protocol.replay.records import ReplayCancelRequest, ReplayRecord, ReplayRegistration
from watchtower.protocol.replay.rules import replay_id_for
from watchtower.protocol.signed_command import Command, command_digest, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.state import Event
from watchtower.schemas.replay_records import decode_replay_record
from watchtower.schemas.wire import encode_command, encode_event, encode_keymgr_forward, encode_replay_finished
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import read_committed

pytestmark = pytest.mark.integration

WORKER = "replay-control"
PARTITIONS = 3
MESSAGES = 12


def key() -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey.generate()


def addr(k: nacl.signing.SigningKey) -> str:
    return "0x" + bytes(k.verify_key).hex()


@dataclass
class Host:
    workers: Workers
    channel: RawCommandChannel
    bootstrap: str
    minter: nacl.signing.SigningKey
    owner: nacl.signing.SigningKey = field(default_factory=key)
    publisher: nacl.signing.SigningKey = field(default_factory=key)
    stream_id: str = field(default_factory=lambda: f"replay.{uuid.uuid4().hex[:8]}")
    clock: int = field(default_factory=lambda: int(time.time() * 1_000_000))

    def sign(self, signer: nacl.signing.SigningKey, method: str, body: dict[str, Any],
             stream_id: str | None = None) -> Command:
        self.clock += 1  # microsecond nonces, strictly increasing per signer
        return sign_command(signer, method, stream_id or self.stream_id, self.clock, body)

    def send(self, cmd: Command) -> dict[str, Any]:
        return self.raw(encode_command(cmd), cmd.stream_id)

    def raw(self, value: bytes, key: str) -> dict[str, Any]:
        _, reply = self.channel.request(value, key=key, timeout=120)
        return reply

    def ledger(self) -> KeymgrState:
        state = KeymgrState()
        for logged in read_committed_events(self.bootstrap, self.workers.prefix):
            try:
                state.apply(logged.event)
            except MalformedRecordError:
                continue  # quarantined, as every reader of the log does
        return state

    def balance(self, view: KeymgrState, k: nacl.signing.SigningKey) -> int:
        return view.balances().get(addr(k), 0)

    def wait(self, check: Callable[[KeymgrState], bool], timeout: float = 60.0) -> KeymgrState:
        return wait_until("the ledger to reach the expected state",
                          lambda: view if check(view := self.ledger()) else None, timeout_s=timeout, every_s=0.2)

    def fund(self, k: nacl.signing.SigningKey, amount: int) -> None:
        ok(self.send(self.sign(self.minter, "mint_cby", {"to": addr(k), "amount_cby": amount}, SUPPLY_KEY)))
        self.wait(lambda v: self.balance(v, k) == amount)

    def replay_records(self) -> list[tuple[int, ReplayRecord]]:
        """(partition, record) of every committed record on the replay topic."""
        return [(int(m.partition() or 0), decode_replay_record(m.value()))
                for m in read_committed(self.bootstrap, [topic_name("replay", self.workers.prefix)])]

    def records_of(self, replay_id: int) -> list[ReplayRecord]:
        return [r for _, r in self.replay_records() if r.replay_id == replay_id]


def ok(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply.get("ok") is True, f"expected success, got {reply}"
    return dict(reply["result"])


def refused(reply: dict[str, Any], code: str) -> dict[str, Any]:
    assert reply.get("ok") is False, f"expected {code}, got success: {reply}"
    assert reply["error"]["code"] == code, f"expected {code}, got {reply['error']}"
    return dict(reply["error"])


def request(host: Host, frm: int, to: int | None, max_payment: int | None = None) -> dict[str, Any]:
    return {"namespace": host.stream_id, "from": frm, "to": to,
            "config": {"filter": None, "skip": None, "max_payment_cby": max_payment}, "memo_hex": ""}


@pytest.fixture(scope="module")
def host(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    log_dir: Path = tmp_path_factory.mktemp("replay-worker")
    minter = key()
    with workers(kafka_bootstrap, partitions=PARTITIONS, log_dir=log_dir) as w:
        w.start(WORKER, env={"WATCHTOWER_CBY_MINTER": addr(minter)})
        channel = RawCommandChannel(kafka_bootstrap, w.prefix, reply_partition=0)
        try:
            h = Host(w, channel, kafka_bootstrap, minter)
            ok(h.send(h.sign(h.owner, "create_stream", {"publisher_key": bytes(h.publisher.verify_key)})))
            for sequence in range(1, MESSAGES + 1):
                msg = sign_message(stream_id=h.stream_id, sequence=sequence, timestamp_unix_ms=1_700_000_000_000,
                                   kind="tick", payload=b"{}", signing_key=h.publisher)
                ok(h.send(h.sign(h.owner, "publish", msg.to_json_dict())))
            yield h
        finally:
            channel.close()


def test_a_free_registration_writes_its_event_and_its_replay_record_in_one_transaction(host: Host) -> None:
    reader = key()
    cmd = host.sign(reader, "register_replay", request(host, 3, None))
    reply = ok(host.send(cmd))
    replay_id = replay_id_for(command_digest(cmd))
    assert reply == {"replay_id": replay_id, "stream_id": host.stream_id, "first": 3, "end_exclusive": MESSAGES + 1,
                     "end_id": MESSAGES, "price_cby": 0}
    # Committed with the reply: the event on events and the registration on the stream's replay partition.
    events = [e for e in read_committed_events(host.bootstrap, host.workers.prefix)
              if e.event.type == "ReplayRegistered" and e.event.body.replay_id == replay_id]
    assert len(events) == 1
    placed = [(p, r) for p, r in host.replay_records() if r.replay_id == replay_id]
    assert len(placed) == 1
    partition, record = placed[0]
    assert partition == events[0].partition == partition_for(host.stream_id, PARTITIONS)
    assert isinstance(record, ReplayRegistration)
    assert (record.requester, record.first, record.end_exclusive, record.end_id) == (addr(reader), 3, 13, 12)


def test_a_paid_replay_moves_its_price_once_and_a_retry_moves_nothing(host: Host) -> None:
    ok(host.send(host.sign(host.owner, "set_replay_price", {"price_per_event_cby": 5})))
    try:
        reader = key()
        host.fund(reader, 1_000)
        before = host.ledger()
        owner0 = host.balance(before, host.owner)
        refused(host.send(host.sign(reader, "register_replay", request(host, 1, 11, max_payment=49))),
                "PAYMENT_REQUIRED")
        cmd = host.sign(reader, "register_replay", request(host, 1, 11, max_payment=50))
        reply = ok(host.send(cmd))
        assert (reply["replay_id"], reply["price_cby"]) == (replay_id_for(command_digest(cmd)), 50)
        view = host.wait(lambda v: host.balance(v, host.owner) == owner0 + 50)
        assert host.balance(view, reader) == 950
        assert sum(view.balances().values()) == sum(before.balances().values()) == view.supply.total_supply_cby
        retry = ok(host.send(cmd))
        assert retry == {**reply, "duplicate": True}
        after = host.ledger()
        assert after.balances() == view.balances()
        registered = [r for r in host.records_of(reply["replay_id"]) if isinstance(r, ReplayRegistration)]
        assert [r.price_cby for r in registered] == [50]
        debits = [e.event for e in read_committed_events(host.bootstrap, host.workers.prefix)
                  if e.event.type == "CbyDebited" and e.event.body.ref == str(reply["replay_id"])]
        assert [(d.body.amount_cby, d.body.reason) for d in debits] == [(50, "replay")]
    finally:
        ok(host.send(host.sign(host.owner, "set_replay_price", {"price_per_event_cby": 0})))


def test_insufficient_balance_refuses_the_replay_and_writes_no_replay_record(host: Host) -> None:
    ok(host.send(host.sign(host.owner, "set_replay_price", {"price_per_event_cby": 7})))
    try:
        poor = key()
        host.fund(poor, 10)
        cmd = host.sign(poor, "register_replay", request(host, 1, 4, max_payment=21))
        error = refused(host.send(cmd), "INSUFFICIENT_CBY_BALANCE")
        assert error["details"]["balance_cby"] == "10"
        refused(host.send(cmd), "INSUFFICIENT_CBY_BALANCE")  # a retry gets the same answer
        assert host.records_of(replay_id_for(command_digest(cmd))) == []
        assert host.balance(host.ledger(), poor) == 10
    finally:
        ok(host.send(host.sign(host.owner, "set_replay_price", {"price_per_event_cby": 0})))


def test_a_cancel_writes_cancel_requested(host: Host) -> None:
    reader = key()
    replay_id = ok(host.send(host.sign(reader, "register_replay", request(host, 1, None))))["replay_id"]
    assert ok(host.send(host.sign(reader, "cancel_replay", {"replay_id": replay_id}))) == {
        "replay_id": replay_id, "cancel": "requested"}
    cancels = [r for r in host.records_of(replay_id) if isinstance(r, ReplayCancelRequest)]
    assert [(c.requester, c.stream_id) for c in cancels] == [(addr(reader), host.stream_id)]


def test_a_cancel_answers_icrc77_errors_and_a_refused_one_writes_nothing(host: Host) -> None:
    reader, stranger = key(), key()
    replay_id = ok(host.send(host.sign(reader, "register_replay", request(host, 1, None))))["replay_id"]
    refused(host.send(host.sign(reader, "cancel_replay", {"replay_id": 4243})), "REPLAY_NOT_FOUND")
    refused(host.send(host.sign(stranger, "cancel_replay", {"replay_id": replay_id})), "UNAUTHORIZED")
    ok(host.send(host.sign(reader, "cancel_replay", {"replay_id": replay_id})))
    refused(host.send(host.sign(reader, "cancel_replay", {"replay_id": replay_id})), "CANNOT_CANCEL")
    cancels = [r for r in host.records_of(replay_id) if isinstance(r, ReplayCancelRequest)]
    assert [c.requester for c in cancels] == [addr(reader)]
    assert host.records_of(4243) == []
    logged = [e.event for e in read_committed_events(host.bootstrap, host.workers.prefix)
              if e.event.type == "ReplayCancelRequested" and e.event.body.replay_id in (replay_id, 4243)]
    assert [(e.body.replay_id, e.caller) for e in logged] == [(replay_id, addr(reader))]


def test_a_replay_settlement_written_to_the_commands_topic_is_refused(host: Host) -> None:
    thief = key()
    forged = ReplaySettled(4242, host.stream_id, addr(thief), None, Origin(addr(thief), 1, b"\x01" * 32))
    error = refused(host.raw(encode_keymgr_forward(forged), host.stream_id), "UNAUTHORIZED")
    assert "register_replay" in error["message"]
    assert host.records_of(4242) == []
    assert host.workers.alive(WORKER)


def test_a_replay_finish_written_to_the_commands_topic_is_refused_and_changes_nothing(host: Host) -> None:
    reader = key()
    register = host.sign(reader, "register_replay", request(host, 1, None))
    replay_id = ok(host.send(register))["replay_id"]
    finished = ReplayFinished(replay_id, host.stream_id, addr(reader), "completed", Origin.of(register))
    error = refused(host.raw(encode_replay_finished(finished), host.stream_id), "UNAUTHORIZED")
    assert "cancel_replay" in error["message"]
    # The replay is still cancellable.
    assert ok(host.send(host.sign(reader, "cancel_replay", {"replay_id": replay_id})))["cancel"] == "requested"
    assert not [e for e in read_committed_events(host.bootstrap, host.workers.prefix)
                if e.event.type == "ReplayFinished" and e.event.body.replay_id == replay_id]


def test_forged_replay_events_are_quarantined_and_the_restarted_worker_serves(host: Host, tmp_path: Path) -> None:
    """Written straight to the events topic (anyone who reaches the broker can): a registration that
    claims a price no order paid, and a replay price set by someone who is not the owner. The
    worker's rebuild quarantines both, and the stream stays free and serving."""
    thief = key()
    digest = b"\x0f" * 32
    forged = [
        Event(stream_id=host.stream_id, block_height=10, caller=addr(thief), nonce=1, digest=digest, reply={},
              body=ev.ReplayRegistered(
                  stream_id=host.stream_id, replay_id=replay_id_for(digest), namespace=host.stream_id,
                  requester=addr(thief), from_sequence=1, to_sequence=3, first=1, end_exclusive=3,
                  end_id=None, filter=None, skip=None, memo_hex="", price_cby=40)),
        Event(stream_id=host.stream_id, block_height=10, caller=addr(thief), nonce=2, digest=digest, reply={},
              body=ev.ReplayPricingSet(stream_id=host.stream_id, price_per_event_cby=1_000)),
    ]
    t_events = topic_name("events", host.workers.prefix)
    partition = partition_for(host.stream_id, PARTITIONS)
    offsets: list[int] = []
    producer = Producer(kafka_config(host.bootstrap))
    for event in forged:
        producer.produce(t_events, key=host.stream_id.encode(), value=encode_event(event), partition=partition,
                         on_delivery=lambda err, msg: offsets.append(-1 if err else int(msg.offset() or 0)))
    producer.flush(30)
    assert len(offsets) == 2
    assert -1 not in offsets
    health = tmp_path / "health.json"
    host.workers.terminate(WORKER)
    host.workers.start(WORKER, env={"WATCHTOWER_CBY_MINTER": addr(host.minter), "WATCHTOWER_HEALTH_FILE": str(health)})
    pid = host.workers.pid(WORKER)

    def quarantined(h: dict[str, Any]) -> bool:
        seen = {(q["topic"], q["partition"], q["offset"]) for q in h["last_quarantined"]}
        return h["pid"] == pid and h["state"] == "serving" and all((t_events, partition, o) in seen for o in offsets)

    wait_for_health(health, quarantined, timeout=120)
    reader = key()
    reply = ok(host.send(host.sign(reader, "register_replay", request(host, 1, 5))))
    assert reply["price_cby"] == 0  # the forged price did not apply
    assert host.workers.alive(WORKER)
