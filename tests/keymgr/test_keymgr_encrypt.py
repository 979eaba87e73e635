"""stream_encrypt through the key manager against a real worker: receipts, refusals, secrets at rest, restarts."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from api_calls import Caller, http, wait_for
from confluent_kafka import Producer
from keymgr_harness import KeymgrClient, addr, keymgr_stack

from watchtower.keymgr.kek import Kek
from watchtower.keymgr.vault import SEED_PURPOSE, seed_key
from watchtower.local.stack import ServiceSet
from watchtower.protocol.confidential.envelope import derive_content_key, envelope_aad, open_payload
from watchtower.protocol.confidential.receipt import envelope_hash, verify_receipt
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.topics.catalogue import catalogue, topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import read_committed

pytestmark = pytest.mark.integration

OWNER = nacl.signing.SigningKey(b"\x21" * 32)
PUBLISHER = nacl.signing.SigningKey(b"\x22" * 32)
STRANGER = nacl.signing.SigningKey(b"\x23" * 32)
SID = "prices.paid"
OTHER_SID = "prices.paid-other"
OPEN_SID = "prices.open"
HEAD = {SID: 0}  # the last sequence the worker accepted on SID (the tests run in order)
EPOCH = 0


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceSet, Path, Kek]]:
    with keymgr_stack(kafka_bootstrap, tmp_path_factory.mktemp("keymgr")) as running:
        services = running[0]
        owner = Caller(services.api_url, OWNER)
        paid = {"fee_per_key_epoch_cby": 10, "protocol_fee_bps": 100, "publisher_treasury": addr(OWNER)}
        owner.ok(
            "create_stream",
            SID,
            {
                "publisher_key": bytes(PUBLISHER.verify_key),
                "access_mode": "PLATFORM_MANAGED",
                "paid_stream_config": paid,
            },
        )
        owner.ok(
            "create_stream",
            OTHER_SID,
            {
                "publisher_key": bytes(PUBLISHER.verify_key),
                "access_mode": "PLATFORM_MANAGED",
                "paid_stream_config": paid,
            },
        )
        owner.ok("create_stream", OPEN_SID, {"publisher_key": bytes(PUBLISHER.verify_key)})
        yield running


def _aad(sequence: int, stream_id: str = SID, key_epoch: int = EPOCH) -> bytes:
    return envelope_aad(
        stream_id=stream_id, sequence=sequence, key_epoch=key_epoch, kind="price", content_type="application/json"
    )


def _encrypt(
    url: str, key: nacl.signing.SigningKey, sequence: int, plaintext: bytes, stream_id: str = SID
) -> tuple[int, Any]:
    return KeymgrClient(url, key).call(
        "stream_encrypt", stream_id, {"key_epoch": EPOCH, "aad": _aad(sequence, stream_id), "plaintext": plaintext}
    )


def _publish(api: str, sequence: int, envelope: bytes, receipt: bytes | None) -> tuple[int, Any]:
    msg = sign_message(
        stream_id=SID,
        sequence=sequence,
        timestamp_unix_ms=1_700_000_000_000 + sequence,
        kind="price",
        payload=envelope,
        payload_format="CIPHERTEXT",
        key_epoch=EPOCH,
        signing_key=PUBLISHER,
        content_type="application/json",
    )
    body: dict[str, Any] = msg.to_json_dict()
    if receipt is not None:
        body["keymgr_receipt"] = receipt
    return Caller(api, OWNER).call("publish", SID, body)


def _wrapped_seeds(services: ServiceSet) -> list[bytes]:
    topic = topic_name("keymgr-state", services.prefix)
    return [
        bytes.fromhex(json.loads(m.value())["wrapped_hex"])
        for m in read_committed(services.bootstrap, [topic])
        if m.key() == seed_key(SID).encode()
    ]


def _reserved_through(services: ServiceSet) -> int:
    topic = topic_name("keymgr-state", services.prefix)
    return max(
        json.loads(m.value())["reserved_through"]
        for m in read_committed(services.bootstrap, [topic])
        if m.key() == b"actor-nonces"
    )


def test_the_publisher_key_encrypts_and_the_worker_accepts_the_envelope_with_its_receipt(stack: Any) -> None:
    services, _, kek = stack
    status, reply = _encrypt(services.keymgr_url, PUBLISHER, 1, b'{"px": 101}')
    assert status == 200, reply
    envelope, receipt = bytes.fromhex(reply["envelope_hex"]), bytes.fromhex(reply["keymgr_receipt_hex"])
    verify_receipt(
        kek.receipt_public_key(), receipt, stream_id=SID, key_epoch=EPOCH, payload_hash=envelope_hash(envelope)
    )
    status, reply = _publish(services.api_url, 1, envelope, receipt)
    assert status == 200, reply
    assert reply["result"]["sequence"] == 1
    HEAD[SID] = 1


@pytest.mark.parametrize("forgery", ["missing", "forged-envelope", "tampered-tag", "other-stream", "other-epoch"])
def test_a_forged_or_foreign_ciphertext_is_refused_at_publish_and_the_worker_keeps_serving(
    stack: Any, forgery: str
) -> None:
    services, _, _ = stack
    api, url = services.api_url, services.keymgr_url
    sequence = HEAD[SID] + 1
    status, good = _encrypt(url, OWNER, sequence, b'{"px": 7}')
    assert status == 200, good
    envelope, receipt = bytes.fromhex(good["envelope_hex"]), bytes.fromhex(good["keymgr_receipt_hex"])
    bad_envelope, bad_receipt = envelope, receipt
    if forgery == "missing":
        bad_receipt = None
    elif forgery == "forged-envelope":
        bad_envelope = bytes(24) + b"not sealed by the key manager" + bytes(16)
    elif forgery == "tampered-tag":
        bad_envelope = envelope[:-1] + bytes([envelope[-1] ^ 0x01])
    elif forgery == "other-stream":  # a genuine envelope and receipt, but of another paid stream
        status, other = _encrypt(url, OWNER, sequence, b'{"px": 7}', stream_id=OTHER_SID)
        assert status == 200, other
        bad_envelope, bad_receipt = bytes.fromhex(other["envelope_hex"]), bytes.fromhex(other["keymgr_receipt_hex"])
    elif forgery == "other-epoch":
        status, later = KeymgrClient(url, OWNER).call(
            "stream_encrypt",
            SID,
            {"key_epoch": EPOCH + 1, "aad": _aad(sequence, key_epoch=EPOCH + 1), "plaintext": b"x"},
        )
        assert status == 200, later
        bad_receipt = bytes.fromhex(later["keymgr_receipt_hex"])
    status, reply = _publish(api, sequence, bad_envelope, bad_receipt)
    assert status != 200, reply
    assert reply["error"]["code"] in ("INVALID_SIGNATURE", "UNAUTHORIZED"), reply  # CIP-7's publish codes
    assert "stream_encrypt" in reply["error"]["message"]
    # The same worker takes the genuine envelope at the very sequence the refused one asked for.
    status, reply = _publish(api, sequence, envelope, receipt)
    assert status == 200, reply
    assert reply["result"]["sequence"] == sequence
    HEAD[SID] = sequence


def test_the_key_manager_encrypts_only_for_the_owner_or_publisher_of_a_paid_stream(stack: Any) -> None:
    services, _, _ = stack
    url = services.keymgr_url
    status, reply = _encrypt(url, STRANGER, 1, b"x")
    assert (status, reply["error"]["code"]) == (403, "UNAUTHORIZED"), reply
    status, reply = _encrypt(url, OWNER, 1, b"x", stream_id=OPEN_SID)
    assert reply["error"]["code"] == "NOT_PLATFORM_MANAGED_STREAM", reply
    status, reply = _encrypt(url, OWNER, 1, bytes(16_345))
    assert reply["error"]["code"] == "PAYLOAD_TOO_LARGE", reply
    status, reply = KeymgrClient(url, OWNER).call(
        "stream_encrypt", SID, {"key_epoch": EPOCH, "aad": _aad(1, OTHER_SID), "plaintext": b"x"}
    )
    assert reply["error"]["code"] == "INVALID_ARGUMENT", reply


def test_requests_must_be_signed_fresh_and_never_replayed(stack: Any) -> None:
    services, _, _ = stack
    client = KeymgrClient(services.keymgr_url, OWNER)
    body = {"key_epoch": EPOCH, "aad": _aad(1), "plaintext": b"x"}
    nonce = client.nonce()
    assert client.call("stream_encrypt", SID, body, nonce=nonce)[0] == 200
    status, reply = client.call("stream_encrypt", SID, body, nonce=nonce)
    assert reply["error"]["code"] == "NONCE_REPLAYED", reply
    stale = time.time_ns() // 1_000 - 6 * 60 * 1_000_000
    assert client.call("stream_encrypt", SID, body, nonce=stale)[1]["error"]["code"] == "NONCE_REPLAYED"
    # A signature by one key claiming another caller: refused before anything else.
    cmd = sign_command(OWNER, "stream_encrypt", SID, client.nonce(), body).to_dict()
    cmd["signature_hex"] = "00" * 64
    status, reply = http("POST", f"{services.keymgr_url}/v1/keymgr/encrypt", {"command": cmd})
    assert reply["error"]["code"] == "INVALID_SIGNATURE", reply
    status, reply = http("POST", f"{services.keymgr_url}/v1/keymgr/encrypt", {"command": {"method": 1}})
    assert reply["error"]["code"] == "INVALID_ARGUMENT", reply
    big = {"command": {"method": "stream_encrypt", "pad": "x" * 200_000}}
    status, reply = http("POST", f"{services.keymgr_url}/v1/keymgr/encrypt", big)
    assert (status, reply["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE"), reply


def test_the_seed_is_stored_only_wrapped_and_never_appears_in_clear(stack: Any) -> None:
    services, kek_file, kek = stack
    (wrapped,) = _wrapped_seeds(services)
    seed = kek.unwrap(SEED_PURPOSE, SID, wrapped)
    # The seed really is the stream's: it opens an envelope the key manager made.
    status, reply = _encrypt(services.keymgr_url, OWNER, 99, b"secret words")
    assert status == 200, reply
    key = derive_content_key(seed, SID, EPOCH)
    assert open_payload(content_key=key, aad=_aad(99), envelope=bytes.fromhex(reply["envelope_hex"])) == b"secret words"
    needles = [
        seed,
        seed.hex().encode(),
        seed.hex().upper().encode(),
        base64.b64encode(seed),
        base64.urlsafe_b64encode(seed),
        base64.b64encode(seed).rstrip(b"="),
    ]
    topics = [spec.name for spec in catalogue(services.prefix)]
    plaintexts = [b"secret words", b'{"px": 101}', b"secret words".hex().encode()]
    scanned = 0
    for record in read_committed(services.bootstrap, topics):
        blob = (record.key() or b"") + (record.value() or b"")
        scanned += 1
        where = f"{record.topic()}[{record.partition()}]@{record.offset()}"
        for needle in needles:
            assert needle not in blob, f"the seed appears in {where}"
        for plain in plaintexts:  # plaintext never crosses Kafka either
            assert plain not in blob, f"a plaintext appears in {where}"
    assert scanned > 0
    for log in services.log_dir.glob("*.log"):
        text = log.read_bytes()
        for needle in needles:
            assert needle not in text, f"the seed appears in {log.name}"
    assert kek_file.read_text().strip().encode() not in b"".join(p.read_bytes() for p in services.log_dir.glob("*.log"))


def test_after_kill_9_the_restarted_key_manager_has_the_same_seed_and_never_reuses_an_actor_nonce(stack: Any) -> None:
    services, kek_file, kek = stack
    url = services.keymgr_url
    issued = []
    for i in range(5):
        status, reply = _encrypt(url, OWNER, 200 + i, b"before")
        assert status == 200, reply
        issued.append(reply["actor_nonce"])
    reserved_before = _reserved_through(services)
    assert max(issued) <= reserved_before
    port = int(url.rsplit(":", 1)[1])
    services.kill9("keymgr")
    services.start_keymgr(port, kek_file)
    services.wait_keymgr()
    status, reply = _encrypt(url, OWNER, 300, b"after restart")
    assert status == 200, reply
    assert reply["actor_nonce"] > reserved_before >= max(issued)
    (wrapped,) = _wrapped_seeds(services)  # still one seed record: the restart created none
    seed = kek.unwrap(SEED_PURPOSE, SID, wrapped)
    key = derive_content_key(seed, SID, EPOCH)
    assert open_payload(content_key=key, aad=_aad(300), envelope=bytes.fromhex(reply["envelope_hex"])) == (
        b"after restart"
    )


def test_a_record_on_events_that_is_no_event_is_quarantined_and_the_service_keeps_serving(stack: Any) -> None:
    services, _, _ = stack
    producer = Producer(kafka_config(services.bootstrap))
    for value in (b"not an event", b"\x57\x00\x01garbage", b""):
        producer.produce(topic_name("events", services.prefix), key=SID.encode(), value=value)
    assert producer.flush(30) == 0
    # The fold skips the three records and goes on, and the service answers meanwhile.
    wait_for(lambda: http("GET", f"{services.keymgr_url}/healthz")[1].get("quarantined", 0) >= 3,
             what="the key manager quarantining the three records")
    status, reply = _encrypt(services.keymgr_url, OWNER, 400, b"still serving")
    assert status == 200, reply
    assert "quarantined" in (services.log_dir / "keymgr.log").read_text()
