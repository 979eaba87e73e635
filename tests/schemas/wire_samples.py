"""Deterministic samples of every record kind Watchtower writes to Kafka, for the wire golden test.

Every input is fixed (keys from constant seeds, constant timestamps and block heights; ed25519
signatures, HKDF nonces and canonical CBOR are deterministic), so encoding a sample with the
same code always gives the same bytes. `test_wire_golden.py` checks those bytes against
``golden/wire_v1.json``; `make_wire_golden.py` writes that file.

Each `WireSample` says how today's code writes the record (`encode`), how today's code reads it
back and writes it again (`reencode`), and which field values a decoder that is not ours must
find in the bytes (`expect`, built from the protocol values, never from the codec).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import msgspec
import nacl.signing
from event_samples import KEY, OTHER, OWNER, SID, keymgr_events, one_of_each
from event_samples import event as sample_event

from watchtower.protocol.confidential.envelope import encrypt_for_epoch
from watchtower.protocol.confidential.receipt import sign_receipt
from watchtower.protocol.deployment import Deployment
from watchtower.protocol.errors import InsufficientCbyBalanceError, StaleSequenceError, WatchtowerError
from watchtower.protocol.events import ReplayRegistered, StreamCreated, event_fields
from watchtower.protocol.ledger.common import (
    CbyBurn,
    CbyCredit,
    KeymgrForward,
    Origin,
    PaidCommand,
    PurchaseDebit,
    PurchaseSettled,
    ReplayCharge,
    ReplayFinished,
    ReplaySettled,
)
from watchtower.protocol.push.checkpoint import PushCheckpoint
from watchtower.protocol.registry import REGISTRY_KEY
from watchtower.protocol.replay.control import ReplayDecision, finish_replay, settle_replay
from watchtower.protocol.replay.records import (
    ReplayCanceled,
    ReplayCompleted,
    ReplayErrored,
    ReplayProgress,
    ReplayRecord,
)
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.actor import Decision, StreamState, decide, evolve
from watchtower.protocol.stream.message import StreamMessage
from watchtower.protocol.stream.snapshots import decode_snapshot, encode_snapshot
from watchtower.protocol.stream.state import Event
from watchtower.schemas import codec, delivery_records, keymgr_records, replay_records, wire
from watchtower.schemas.events import event_record
from watchtower.schemas.keymgr_records import AuditRecord, NonceReservationRecord, WrappedSeedRecord
from watchtower.schemas.records import decode_message, encode_message
from watchtower.workers.aggregates import default_aggregates
from watchtower.workers.snapshots import snapshot_value

#: Keys of the decided streams (fixed seeds: every signature is the same on every run).
PUBLISHER = nacl.signing.SigningKey(b"\x08" * 32)
NEW_PUBLISHER = nacl.signing.SigningKey(b"\x09" * 32)
ALICE = nacl.signing.SigningKey(b"\x0a" * 32)
TREASURY = nacl.signing.SigningKey(b"\x0b" * 32)
KEYMGR = nacl.signing.SigningKey(b"\x0c" * 32)
MASTER_SEED = b"\x0d" * 32
PAID_SID = "paid-1"
HEIGHT = 1_000
T0 = 1_700_000_000_000
DEPLOYMENT = Deployment(protocol_treasury="0x" + bytes(TREASURY.verify_key).hex(),
                        keymgr_public_key=bytes(KEYMGR.verify_key))
ORIGIN = Origin(OWNER, 17, b"\x03" * 32)
SUPPLY = "cby:supply"


@dataclasses.dataclass(frozen=True)
class WireSample:
    """One record as a topic holds it.

    `format` names the independent decoder: ``avro`` (framed Avro, read with fastavro from the
    ``.avsc`` file), ``json`` (the standard library) or ``cbor`` (cbor2). `expect` holds field
    values that decoder must find (a subset of the document: nested dicts are matched key by key)."""

    topic: str
    kind: str
    name: str
    format: str
    encode: Callable[[], bytes]
    reencode: Callable[[bytes], bytes]
    expect: Mapping[str, Any]


# --- helpers -------------------------------------------------------------------------------------


def addr(key: nacl.signing.SigningKey) -> str:
    return "0x" + bytes(key.verify_key).hex()


def pub(key: nacl.signing.SigningKey) -> bytes:
    return bytes(key.verify_key)


def _json_safe(value: Any) -> Any:
    """A value as a JSON reader sees it: bytes as hex, tuples as lists (for `expect` of JSON records)."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _command_doc(cmd: Command) -> dict[str, Any]:
    """The fields of a signed command a JSON reader finds (body values checked by key only for bytes)."""
    body = {k: v for k, v in cmd.body.items() if not isinstance(v, bytes | Mapping | list | tuple)}
    return {"method": cmd.method, "stream_id": cmd.stream_id, "caller_public_key_hex": cmd.caller_public_key.hex(),
            "nonce": cmd.nonce, "body": body, "signature_hex": cmd.signature.hex()}


# --- decided streams (the real pure deciders) ----------------------------------------------------


class DecidedStream:
    """One stream driven through `stream_actor.decide` / `evolve` as the worker drives it."""

    def __init__(self, stream_id: str, deployment: Deployment) -> None:
        self.state = StreamState.initial(stream_id)
        self.deployment = deployment
        self.height = HEIGHT
        self.decided: list[tuple[Command, Decision]] = []
        #: The worker forwards the stream decided (settlements, finishes): (forward, its decision).
        self.forwarded: list[tuple[ReplaySettled | ReplayFinished, ReplayDecision]] = []

    def do(self, key: nacl.signing.SigningKey, method: str, body: Mapping[str, Any]) -> Decision:
        record = self.state.callers.get(addr(key))
        nonce = 1 if record is None else record.last_nonce + 1
        cmd = sign_command(key, method, self.state.stream_id, nonce, dict(body))
        self.height += 1
        decision = decide(self.state, cmd, block_height=self.height, deployment=self.deployment)
        for event in decision.events:
            self.state = evolve(self.state, event)
        self.decided.append((cmd, decision))
        return decision

    def receive(self, forward: ReplaySettled | ReplayFinished) -> ReplayDecision:
        """A forward on ``internal``, decided as the stream worker decides it (`workers.aggregates.stream`)."""
        self.height += 1
        if isinstance(forward, ReplaySettled):
            decision = settle_replay(self.state, forward, height=self.height)
        else:
            decision = finish_replay(self.state, forward, height=self.height)
        for event in decision.events:
            self.state = evolve(self.state, event)
        self.forwarded.append((forward, decision))
        return decision


def plain_message(sequence: int, *, stream_id: str = SID) -> StreamMessage:
    return sign_message(stream_id=stream_id, sequence=sequence, timestamp_unix_ms=T0 + sequence, kind="price_batch",
                        tags={"symbol": "BTC", "n": 2, "live": True, "px": 0.5}, payload=b'{"px": 1}',
                        signing_key=PUBLISHER, signing_key_id=1)


def encrypted_message(sequence: int, *, stream_id: str = PAID_SID, key_epoch: int = 3) -> StreamMessage:
    """A CIPHERTEXT message: the payload is a real XChaCha20-Poly1305 envelope (deterministic nonce)."""
    envelope = encrypt_for_epoch(master_seed=MASTER_SEED, stream_id=stream_id, key_epoch=key_epoch,
                                 actor_nonce=sequence, sequence=sequence, kind="quote",
                                 content_type="application/json", plaintext=b'{"bid": 101.5}')
    return sign_message(stream_id=stream_id, sequence=sequence, timestamp_unix_ms=T0 + sequence, kind="quote",
                        tags={"venue": "x"}, payload=envelope, payload_format="CIPHERTEXT", key_epoch=key_epoch,
                        signing_key=PUBLISHER, signing_key_id=1)


def open_stream() -> DecidedStream:
    """create_stream, three publishes, two subscribes, rotate_publisher_key, a free register_replay and
    its cancel_replay, set_replay_price, then a priced register_replay, on a PUBLIC stream; then the
    forwards the stream receives for the priced replay (its ReplaySettled and its ReplayFinished)."""
    s = DecidedStream(SID, Deployment())
    s.do(KEY, "create_stream", {"publisher_key": pub(PUBLISHER)})
    for sequence in (1, 2, 3):
        s.do(KEY, "publish", plain_message(sequence).to_json_dict())
    s.do(ALICE, "subscribe", {"mode": "PULL"})
    s.do(ALICE, "subscribe", {"mode": "PUSH", "filter": {"field": "kind", "op": "eq", "value": "price_batch"},
                              "start_cursor": 1})
    s.do(KEY, "rotate_publisher_key", {"new_key": pub(NEW_PUBLISHER)})
    s.do(ALICE, "register_replay", {"namespace": SID, "from": 1, "to": 3, "memo_hex": "ab" * 32,
                                    "config": {"filter": None, "skip": None, "max_payment_cby": None}})
    registered = s.decided[-1][1].events[0].body
    assert isinstance(registered, ReplayRegistered)
    replay_id = registered.replay_id
    s.do(ALICE, "cancel_replay", {"replay_id": replay_id})
    # A priced replay: the order is recorded and the charge forwarded to the requester's account.
    s.do(KEY, "set_replay_price", {"price_per_event_cby": 4})
    s.do(ALICE, "register_replay", {"namespace": SID, "from": 2, "to": 3, "memo_hex": "",
                                    "config": {"filter": {"field": "kind", "op": "eq", "value": "price_batch"},
                                               "skip": None, "max_payment_cby": 100}})
    # The account paid (the key manager's ReplaySettled), then the replay worker reports the end.
    charge = s.decided[-1][1].forwards[0].forward
    assert isinstance(charge, ReplayCharge)
    s.receive(ReplaySettled(charge.replay_id, SID, charge.requester, None, charge.origin, charge.command))
    s.receive(ReplayFinished(charge.replay_id, SID, charge.requester, "completed", charge.origin))
    return s


def paid_stream() -> DecidedStream:
    """A SUBSCRIBER_PAID stream: create_stream, then a ciphertext publish with the key manager's receipt."""
    s = DecidedStream(PAID_SID, DEPLOYMENT)
    s.do(KEY, "create_stream", {"publisher_key": pub(PUBLISHER), "access_mode": "SUBSCRIBER_PAID",
                                "paid_stream_config": {"fee_per_key_epoch_cby": 10, "protocol_fee_bps": 100,
                                                       "publisher_treasury": OWNER}})
    msg = encrypted_message(1)
    receipt = sign_receipt(KEYMGR, stream_id=PAID_SID, key_epoch=msg.key_epoch or 0, payload_hash=msg.payload_hash)
    s.do(KEY, "publish", {**msg.to_json_dict(), "keymgr_receipt": receipt})
    return s


# --- per topic -----------------------------------------------------------------------------------


def _event_expect(event: Event) -> dict[str, Any]:
    """What the Avro record of `event` holds: its body's fields (nested configs too) and the envelope."""
    body = {k: (list(v) if isinstance(v, tuple) else v.to_dict() if hasattr(v, "to_dict") else v)
            for k, v in event_fields(event.body).items()}
    return {**body, "block_height": event.block_height,
            "caused_by": {"aggregate_id": event.stream_id, "caller": event.caller, "nonce": event.nonce,
                          "digest": event.digest}}


def _stream_created_v2(event: Event) -> bytes:
    # StreamCreated v2, as written before v3 added config.confidential: the golden records of
    # that version stay pinned, and today's decoder must still read them.
    record = event_record(event)
    del record["config"]["confidential"]
    return codec.encode("StreamCreated", record, version=2)


def _event_sample(name: str, event: Event) -> list[WireSample]:
    latest = WireSample("events", event.type, name, "avro", lambda: wire.encode_event(event),
                        lambda data: wire.encode_event(wire.decode_event(data)), _event_expect(event))
    if not isinstance(event.body, StreamCreated) or event.body.config.confidential:
        return [latest]  # a confidential stream has no v2 record: v3 brought the flag
    v2 = WireSample("events", event.type, name, "avro", lambda: _stream_created_v2(event),
                    lambda data: _stream_created_v2(wire.decode_event(data)), _event_expect(event))
    expect = {**latest.expect, "config": {**latest.expect["config"], "confidential": False}}
    return [v2, dataclasses.replace(latest, name=f"{name}-v3", expect=expect)]


def confidential_stream() -> DecidedStream:
    """A confidential PRIVATE_ALLOWLIST stream: create_stream with confidential, then allowlist_add."""
    s = DecidedStream("private-1", Deployment())
    s.do(KEY, "create_stream", {"publisher_key": pub(PUBLISHER), "subscription_policy": "PRIVATE_ALLOWLIST",
                                "confidential": True})
    s.do(KEY, "allowlist_add", {"address": addr(ALICE)})
    return s


def event_samples() -> list[WireSample]:
    out = [sample for e in one_of_each() for sample in _event_sample(f"events/{e.type}/sample", e)]
    for label, stream in (("decided", open_stream()), ("decided-paid", paid_stream()),
                          ("decided-confidential", confidential_stream())):
        for i, (cmd, decision) in enumerate(stream.decided):
            for j, event in enumerate(decision.events):
                out.extend(_event_sample(f"events/{event.type}/{label}-{i}.{j}-{cmd.method}", event))
        for i, (forward, forward_decision) in enumerate(stream.forwarded):
            for j, event in enumerate(forward_decision.events):
                kind = "replay_settled" if isinstance(forward, ReplaySettled) else "replay_finished"
                out.extend(_event_sample(f"events/{event.type}/{label}-forward-{i}.{j}-{kind}", event))
    return out


def _message_expect(msg: StreamMessage) -> dict[str, Any]:
    return {"version": msg.version, "stream_id": msg.stream_id, "sequence": msg.sequence,
            "timestamp_unix_ms": msg.timestamp_unix_ms, "kind": msg.kind, "content_type": msg.content_type,
            "tags": dict(msg.tags), "payload_format": str(msg.payload_format), "payload_inline": msg.payload_inline,
            "payload_hash": msg.payload_hash, "key_epoch": msg.key_epoch, "signing_key_id": msg.signing_key_id,
            "publisher_sig": msg.publisher_sig}


def _message_sample(name: str, msg: StreamMessage) -> WireSample:
    return WireSample("messages", "StreamMessage", name, "avro", lambda: encode_message(msg),
                      lambda data: encode_message(decode_message(data)), _message_expect(msg))


def message_samples() -> list[WireSample]:
    decided = [m for _, d in open_stream().decided for m in d.messages]
    paid = [m for _, d in paid_stream().decided for m in d.messages]
    untagged = sign_message(stream_id=SID, sequence=7, timestamp_unix_ms=0, kind="k", payload=b"",
                            signing_key=PUBLISHER, signing_key_id=2**31)
    return [
        _message_sample("messages/plaintext-tags", plain_message(1)),
        _message_sample("messages/plaintext-empty", untagged),
        _message_sample("messages/ciphertext-tags", encrypted_message(2)),
        *(_message_sample(f"messages/decided-{m.sequence}", m) for m in decided),
        *(_message_sample(f"messages/decided-paid-{m.sequence}", m) for m in paid),
    ]


def _reencode_command(data: bytes) -> bytes:
    decoded = wire.decode_command(data)
    if isinstance(decoded, Command):
        return wire.encode_command(decoded)
    if isinstance(decoded, wire.RegistryForward):
        return wire.encode_registry_forward(decoded.create)
    if isinstance(decoded, ReplayFinished):
        return wire.encode_replay_finished(decoded)
    return wire.encode_keymgr_forward(decoded)


def _command_sample(topic: str, name: str, encode: Callable[[], bytes], expect: Mapping[str, Any],
                    kind: str) -> WireSample:
    return WireSample(topic, kind, name, "json", encode, _reencode_command, {"v": 1, **expect})


def command_samples() -> list[WireSample]:
    cmds = [(f"decided-{i}", cmd) for i, (cmd, _) in enumerate(open_stream().decided)]
    cmds += [(f"decided-paid-{i}", cmd) for i, (cmd, _) in enumerate(paid_stream().decided)]
    cmds += [("account", sign_command(ALICE, "burn_cby", "acct:" + addr(ALICE), 9, {"amount_cby": 1})),
             ("paid", sign_command(ALICE, "renew_subscription", PAID_SID, 3, {"target_key_epoch": 4}))]
    return [_command_sample("commands", f"commands/{c.method}/{label}", partial(wire.encode_command, c),
                            {"command": _command_doc(c)}, c.method) for label, c in cmds]


_FORWARD_KINDS = {CbyCredit: "credit", PurchaseDebit: "purchase_debit", PurchaseSettled: "purchase_settled",
                  CbyBurn: "burn", PaidCommand: "paid_command", ReplayCharge: "replay_charge",
                  ReplaySettled: "replay_settled"}


def keymgr_forwards() -> list[KeymgrForward]:
    renew = sign_command(ALICE, "renew_subscription", PAID_SID, 9, {"target_key_epoch": 3})
    register = sign_command(ALICE, "register_replay", SID, 4, {"namespace": SID, "from": 1, "to": 2, "memo_hex": "",
                                                               "config": {"filter": None, "skip": None,
                                                                          "max_payment_cby": 50}})
    broke = InsufficientCbyBalanceError("fund it", details={"balance_cby": "1"}).to_dict()
    return [
        CbyCredit(addr(ALICE), 2**63 - 1, "transfer", "ab" * 32, OWNER, ORIGIN),
        PurchaseDebit("cd" * 32, PAID_SID, addr(ALICE), OTHER, OWNER, addr(TREASURY), 100, 2, 102, ORIGIN),
        PurchaseSettled("cd" * 32, PAID_SID, OTHER, None, ORIGIN),
        PurchaseSettled("cd" * 32, PAID_SID, OTHER, broke, ORIGIN),
        CbyBurn(addr(ALICE), 5, ORIGIN),
        PaidCommand(renew),
        ReplayCharge(2**63 - 1, SID, addr(ALICE), OWNER, 2**63 - 1, ORIGIN),
        ReplayCharge(12, SID, addr(ALICE), OWNER, 40, ORIGIN, register),
        ReplaySettled(9, SID, addr(ALICE), None, ORIGIN),
        ReplaySettled(9, SID, addr(ALICE), InsufficientCbyBalanceError("fund it").to_dict(), ORIGIN, register),
    ]


def _forward_expect(forward: KeymgrForward | ReplayFinished) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(forward):
        value = getattr(forward, f.name)
        if isinstance(value, Origin):
            fields["origin"] = {"caller": value.caller, "nonce": value.nonce, "digest_hex": value.digest.hex()}
        elif isinstance(value, Command):
            fields[f.name] = _command_doc(value)
        elif value is not None:
            fields[f.name] = _json_safe(value)
    return fields


def internal_samples() -> list[WireSample]:
    out: list[WireSample] = []
    create = sign_command(KEY, "create_stream", "listed", 1, {"publisher_key": pub(PUBLISHER),
                                                             "feed": {"name": "prices", "description": "BTC"}})
    out.append(_command_sample("internal", "internal/register_feed", lambda: wire.encode_registry_forward(create),
                               {"register_feed": _command_doc(create)}, "register_feed"))
    for i, forward in enumerate(keymgr_forwards()):
        kind = _FORWARD_KINDS[type(forward)]
        out.append(_command_sample("internal", f"internal/keymgr/{kind}/{i}",
                                   partial(wire.encode_keymgr_forward, forward),
                                   {"keymgr": {"kind": kind, **_forward_expect(forward)}}, kind))
    # What the stream worker forwards for a paid create_stream (workers.aggregates.stream).
    paid_create = paid_stream().decided[0][0]
    out.append(_command_sample("internal", "internal/keymgr/paid_command/decided-paid-create",
                               lambda: wire.encode_keymgr_forward(PaidCommand(paid_create)),
                               {"keymgr": {"kind": "paid_command", "command": _command_doc(paid_create)}},
                               "paid_command"))
    for label, stream in (("open", open_stream()), ("paid", paid_stream())):
        for i, (cmd, decision) in enumerate(stream.decided):
            for j, routed in enumerate(decision.forwards):
                kind = _FORWARD_KINDS[type(routed.forward)]
                out.append(_command_sample("internal", f"internal/keymgr/{kind}/decided-{label}-{i}.{j}-{cmd.method}",
                                           partial(wire.encode_keymgr_forward, routed.forward),
                                           {"keymgr": {"kind": kind, **_forward_expect(routed.forward)}}, kind))
    for i, (received, _) in enumerate(open_stream().forwarded):
        if isinstance(received, ReplaySettled):
            out.append(_command_sample("internal", f"internal/keymgr/replay_settled/decided-{i}",
                                       partial(wire.encode_keymgr_forward, received),
                                       {"keymgr": {"kind": "replay_settled", **_forward_expect(received)}},
                                       "replay_settled"))
        else:
            out.append(_command_sample("internal", f"internal/keymgr/replay_finished/decided-{i}",
                                       partial(wire.encode_replay_finished, received),
                                       {"keymgr": {"kind": "replay_finished", **_forward_expect(received)}},
                                       "replay_finished"))
    finished = ReplayFinished(7, SID, addr(ALICE), "completed", ORIGIN)
    out.append(_command_sample("internal", "internal/keymgr/replay_finished",
                               lambda: wire.encode_replay_finished(finished),
                               {"keymgr": {"kind": "replay_finished", **_forward_expect(finished)}},
                               "replay_finished"))
    return out


def _reencode_reply(data: bytes) -> bytes:
    doc = wire.decode_reply(data)
    if doc["ok"]:
        return wire.encode_reply(True, doc["result"])
    return wire.encode_reply(False, error=WatchtowerError.from_dict(doc["error"]))


def reply_samples() -> list[WireSample]:
    out: list[WireSample] = []
    for label, stream in (("open", open_stream()), ("paid", paid_stream())):
        answered: list[tuple[str, dict[str, Any]]] = [(cmd.method, d.reply) for cmd, d in stream.decided
                                                         if d.answers]
        answered += [("replay_settled", dict(d.reply)) for _, d in stream.forwarded if d.reply is not None]
        for i, (method, result) in enumerate(answered):
            out.append(WireSample("replies", "ok", f"replies/ok/{label}-{i}-{method}", "json",
                                  partial(wire.encode_reply, True, result), _reencode_reply,
                                  {"v": 1, "ok": True, "result": _json_safe(result)}))
    errors = [InsufficientCbyBalanceError("fund it", details={"balance_cby": "1", "needed": 3}),
              StaleSequenceError("publish sequence 5; the head is 3")]
    for err in errors:
        out.append(WireSample("replies", "error", f"replies/error/{err.code}", "json",
                              partial(wire.encode_reply, False, error=err), _reencode_reply,
                              {"v": 1, "ok": False, "error": _json_safe(err.to_dict())}))
    return out


def replay_record_list() -> list[tuple[str, ReplayRecord]]:
    """The writer's records from decided events (with the signed command), then the worker's four kinds."""
    out: list[tuple[str, ReplayRecord]] = []
    stream = open_stream()
    decided: list[tuple[Command | None, tuple[Event, ...]]] = [(cmd, d.events) for cmd, d in stream.decided]
    decided += [(f.command if isinstance(f, ReplaySettled) else None, d.events) for f, d in stream.forwarded]
    for i, (command, events) in enumerate(decided):
        for event in events:
            data = wire.replay_record_for(event, command)
            if data is not None:
                out.append((f"decided-{i}", replay_records.decode_replay_record(data)))
    rid = 2**62 + 5
    return [*out,
            ("service", ReplayProgress(1, rid, SID, "service", 2, 40, 7, 5, 1, 0, T0)),
            ("spark", ReplayProgress(1, rid, SID, "spark", 0, 0, 1, 0, 0, 0, T0)),
            ("service", ReplayCompleted(1, rid, SID, "service", 9, 2, 1, T0 + 5)),
            ("worker", ReplayCanceled(1, rid, SID, 3, T0 + 6)),
            ("worker", ReplayErrored(1, rid, SID, "sequence 4 is missing from the archive", 3, T0 + 7))]


def _reencode_replay(data: bytes) -> bytes:
    return replay_records.encode_replay_record(replay_records.decode_replay_record(data))


def replay_samples() -> list[WireSample]:
    out: list[WireSample] = []
    for label, record in replay_record_list():
        kind = type(record).__struct_config__.tag
        expect = {"kind": kind, **msgspec.structs.asdict(record)}
        out.append(WireSample("replay", str(kind), f"replay/{kind}/{label}", "json",
                              partial(replay_records.encode_replay_record, record), _reencode_replay, expect))
    return out


def checkpoint_samples() -> list[WireSample]:
    checkpoints = [
        PushCheckpoint(SID, 4, {addr(ALICE): 9, OTHER: 9, OWNER: 12}, addr(ALICE), 1_001, 3, 2, 17, 0),
        PushCheckpoint(PAID_SID, 1, {}, None, 0, 0, 0, None, 5),
    ]
    return [WireSample("delivery-state", "PushCheckpoint", f"delivery-state/{c.stream_id}", "json",
                       partial(delivery_records.encode_checkpoint, c),
                       lambda data: delivery_records.encode_checkpoint(delivery_records.decode_checkpoint(data)),
                       {"v": 1, "stream_id": c.stream_id, "low_watermark": c.low_watermark, "pointer": c.pointer,
                        "block": c.block, "used_deliveries": c.used_deliveries, "used_cycles": c.used_cycles,
                        "resume_offset": c.resume_offset, "dropped": c.dropped}) for c in checkpoints]


def keymgr_samples() -> list[WireSample]:
    enc = keymgr_records.encode_keymgr_record
    seed = WrappedSeedRecord(1, "00ff00ff00ff00ff", "ab" * 60)
    nonces = NonceReservationRecord(1, 3000)
    fetch = AuditRecord(v=1, action="fetch_epoch_keys", stream_id=PAID_SID, caller=addr(ALICE), account=addr(ALICE),
                        key_epochs=[4, 9], at_ms=T0, account_key_id=2)
    decrypt = AuditRecord(v=1, action="stream_decrypt", stream_id=PAID_SID, caller=OWNER, account=OTHER,
                          key_epochs=[3], at_ms=T0 + 1)
    return [
        WireSample("keymgr-state", "WrappedSeedRecord", "keymgr-state/seed", "json", lambda: enc(seed),
                   lambda d: enc(keymgr_records.decode_wrapped_seed(d)),
                   {"v": 1, "kek_id": seed.kek_id, "wrapped_hex": seed.wrapped_hex}),
        WireSample("keymgr-state", "NonceReservationRecord", "keymgr-state/actor-nonces", "json", lambda: enc(nonces),
                   lambda d: enc(keymgr_records.decode_nonce_reservation(d)), {"v": 1, "reserved_through": 3000}),
        *(WireSample("keymgr", "AuditRecord", f"keymgr/audit/{a.action}", "json", partial(enc, a),
                     lambda d: enc(keymgr_records.decode_audit(d)),
                     {k: v for k, v in msgspec.structs.asdict(a).items() if v is not None}) for a in (fetch, decrypt)),
    ]


ACCOUNT_FACTS = frozenset({"ActorCreated", "SpendingAllowanceGranted", "SpendingAllowanceRevoked"})
"""Account events newer than the first snapshot sample, which folds without them (its bytes stay as pinned)."""


def snapshot_states(*, account_facts: bool = False) -> dict[str, dict[str, Any]]:
    """Every default aggregate's instances, folded from decided and sample events with its own evolve
    (with `account_facts`, also an own actor and a spending allowance granted and revoked)."""
    skipped = {"CbyMinted", "CbyBurned", "EpochAccessFailed"} | (set() if account_facts else ACCOUNT_FACTS)
    aggregates = {a.name: a for a in default_aggregates()}
    states: dict[str, dict[str, Any]] = {name: {} for name in aggregates}
    events = [e for s in (open_stream(), paid_stream()) for _, d in s.decided for e in d.events]
    events += [e for e in one_of_each() if e.stream_id == REGISTRY_KEY]
    # The samples' ledger events, minus the three that do not follow from the others, plus a supply that does.
    events += [e for e in keymgr_events() if e.type not in skipped]
    events += [sample_event("CbyMinted", {"to": OTHER, "amount_cby": 10, "total_supply_cby": 10}, stream_id=SUPPLY),
               sample_event("CbyBurned", {"account": OWNER, "amount_cby": 4, "total_supply_cby": 6}, stream_id=SUPPLY,
                            nonce=3)]
    for event in events:
        for name, aggregate in aggregates.items():
            if aggregate.owns_event(event):
                key = aggregate.event_key(event)
                current = states[name].get(key, aggregate.initial(key))
                states[name][key] = aggregate.evolve(current, event)
                break
    return states


def _reencode_snapshot(data: bytes) -> bytes:
    partition, offset, parts = decode_snapshot(data)
    aggregates = {a.name: a for a in default_aggregates()}
    return encode_snapshot(partition, offset, {
        name: aggregates[name].encode_snapshot(aggregates[name].decode_snapshot(part)) for name, part in parts.items()})


def _snapshot_parts_expect(states: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What each aggregate's part holds (each part is itself CBOR, read as such)."""
    def rows(name: str, fields: Callable[[Any], dict[str, Any]]) -> list[Any]:
        return [[key, fields(state)] for key, state in sorted(states[name].items())]

    return {
        "stream": {"v": 1, "streams": [{"stream_id": key, "owner": st.owner, "head": st.head, "created": st.created}
                                       for key, st in sorted(states["stream"].items())]},
        "registry": {"v": 1, "registries": {key: {"next_feed_id": st.next_feed_id}
                                            for key, st in states["registry"].items()}},
        "account": {"v": 1, "accounts": rows("account", lambda st: {"balance_cby": st.balance_cby})},
        "paid_stream": {"v": 1, "paid_streams": rows("paid_stream", lambda st: {"owner": st.owner})},
        "supply": {"v": 1, "supply": rows("supply", lambda st: {"total_supply_cby": st.total_supply_cby})},
    }


def snapshot_samples() -> list[WireSample]:
    states, facts = snapshot_states(), snapshot_states(account_facts=True)
    empty: dict[str, dict[str, Any]] = {}
    return [
        WireSample("snapshots", "snapshot", "snapshots/p0-all-aggregates", "cbor",
                   lambda: snapshot_value(0, 4242, states, default_aggregates()), _reencode_snapshot,
                   {"v": 1, "partition": 0, "events_offset": 4242, "parts": _snapshot_parts_expect(states)}),
        WireSample("snapshots", "snapshot", "snapshots/p1-own-actor-and-allowance", "cbor",
                   lambda: snapshot_value(1, 4343, facts, default_aggregates()), _reencode_snapshot,
                   {"v": 1, "partition": 1, "events_offset": 4343, "parts": _snapshot_parts_expect(facts)}),
        WireSample("snapshots", "snapshot", "snapshots/p2-empty", "cbor",
                   lambda: snapshot_value(2, 0, empty, default_aggregates()), _reencode_snapshot,
                   {"v": 1, "partition": 2, "events_offset": 0}),
    ]


def all_samples() -> list[WireSample]:
    """Every sample, in a fixed order."""
    samples = [*event_samples(), *message_samples(), *command_samples(), *internal_samples(), *reply_samples(),
               *replay_samples(), *checkpoint_samples(), *keymgr_samples(), *snapshot_samples()]
    names = [s.name for s in samples]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise AssertionError(f"sample names must be unique: {duplicates}")
    return samples


def golden_document(samples: list[WireSample]) -> dict[str, Any]:
    """The golden file's content: each record's topic, kind, name and bytes as hex."""
    return {"schema": "watchtower wire golden v1",
            "records": [{"topic": s.topic, "kind": s.kind, "name": s.name, "hex": s.encode().hex()}
                        for s in samples]}


def dumps(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=1, sort_keys=False) + "\n"
