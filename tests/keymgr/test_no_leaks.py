"""No master seed and no epoch content key ever leaves the key manager in clear, and no session
key of a confidential private feed ever reaches the platform.

A real stack (broker, worker, API, key manager) runs a paid feed end to end: the publisher
encrypts through stream_encrypt and publishes with the receipt, a subscriber is minted CBY,
registers an X25519 key, buys two epochs, fetches its sealed epoch keys (and opens them itself) and
decrypts through stream_decrypt. The test knows the KEK, so it unwraps the stream's master seed
from ``keymgr.state`` and derives every epoch key used; then every topic on the broker (records,
keys, headers, aborted ones too), every file under the stack's directory (service logs, state) and
the test's captured output are scanned for the seed, the epoch keys, the receipt signing key and
the plaintexts, raw, hex and base64: none may appear. So are the seeds of every other stack the
test session started before (unwrapped with their KEK files under the session's temporary
directory), in every topic and every service log of the session.

The scanner itself is proven first: a seed planted in a scratch topic (as a key, a header, inside
a base64 blob at an odd offset, inside an aborted transaction) and in a log file is found in every
form, and a secret that was never written is not.
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import nacl.public
import nacl.signing
import pytest
from api_calls import Caller, wait_for
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from keymgr_harness import KeymgrClient, addr, keymgr_stack
from leak_scan import LeakScanner
from waiting import wait_until

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.private import ConfidentialPublisher
from watchtower.client.private_reader import ConfidentialReader
from watchtower.client.sdk import Publisher, wait_until_visible
from watchtower.client.sse import SseSource
from watchtower.client.subscriber import Subscriber
from watchtower.keymgr.kek import Kek, KekError
from watchtower.keymgr.vault import SEED_PURPOSE, seed_key
from watchtower.protocol.confidential.envelope import (
    decrypt_with_content_key,
    derive_content_key,
    envelope_aad,
    unwrap_epoch_key,
)
from watchtower.protocol.confidential.keyload import Recipient
from watchtower.protocol.ledger.billing import key_epoch_at
from watchtower.protocol.signing import sign_message
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import TopicSpec, topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import read_committed

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


EPOCH_BLOCKS = 86_400  # one-day epochs: the scenario never straddles an epoch boundary


def test_no_seed_epoch_key_or_plaintext_in_any_topic_log_or_output(
        kafka_bootstrap: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    owner, publisher, minter = (nacl.signing.SigningKey.generate() for _ in range(3))
    subscriber = nacl.signing.SigningKey.generate()
    x25519 = nacl.public.PrivateKey.generate()
    monkeypatch.setenv("WATCHTOWER_CBY_MINTER", addr(minter))  # inherited by the workers
    sid = f"paid-leaks-{uuid.uuid4().hex[:8]}"
    stack_dir = tmp_path / "stack"
    with keymgr_stack(kafka_bootstrap, stack_dir) as (services, _kek_file, kek):
        api, url = services.api_url, services.keymgr_url
        assert url is not None
        paid = {"fee_per_key_epoch_cby": 10, "protocol_fee_bps": 100, "publisher_treasury": addr(owner),
                "key_epoch_blocks": EPOCH_BLOCKS}
        creator = Caller(api, owner)
        creator.ok("create_stream", sid, {"publisher_key": bytes(publisher.verify_key),
                                          "access_mode": "PLATFORM_MANAGED", "paid_stream_config": paid})
        epoch = key_epoch_at(int(time.time() * 1000), EPOCH_BLOCKS)
        plaintexts = {seq: os.urandom(48) for seq in (1, 2, 3)}
        epochs = {1: epoch, 2: epoch, 3: epoch + 1}
        envelopes = {}
        for seq, plaintext in plaintexts.items():
            envelopes[seq] = _encrypt_and_publish(api, url, creator, publisher, sid, seq, epochs[seq], plaintext)

        Caller(api, minter).ok("mint_cby", "cby:supply", {"to": addr(subscriber), "amount_cby": 1_000_000})
        buyer = Caller(api, subscriber)
        buyer.ok("register_account_key", f"acct:{addr(subscriber)}",
                 {"scheme": "X25519", "public_key": bytes(x25519.public_key)})
        receipt = wait_for(lambda: _acquire(buyer, sid, epoch + 1), timeout_s=120, what="the purchase")
        assert receipt["to_key_epoch"] == epoch + 1

        client = KeymgrClient(url, subscriber)
        status, sealed = client.call("fetch_epoch_keys", sid, {"account": addr(subscriber), "from_key_epoch": epoch,
                                                               "to_key_epoch": epoch + 1})
        assert status == 200, sealed
        content_keys = {k["key_epoch"]: unwrap_epoch_key(bytes.fromhex(k["sealed_key_hex"]), bytes(x25519))
                        for k in sealed["keys"]}
        assert sorted(content_keys) == [epoch, epoch + 1]
        for seq, env in envelopes.items():
            aad = _aad(sid, seq, epochs[seq])
            assert decrypt_with_content_key(content_key=content_keys[epochs[seq]], stream_id=sid,
                                            key_epoch=epochs[seq], sequence=seq, kind="price",
                                            content_type="application/octet-stream", envelope=env) == plaintexts[seq]
            status, opened = client.call("stream_decrypt", sid, {"beneficiary_account": addr(subscriber),
                                                                 "key_epoch": epochs[seq], "aad": aad, "envelope": env})
            assert status == 200, opened
            assert bytes.fromhex(opened["plaintext_hex"]) == plaintexts[seq]

        wrapped = [bytes.fromhex(json.loads(m.value() or b"{}")["wrapped_hex"])
                   for m in read_committed(services.bootstrap, [topic_name("keymgr-state", services.prefix)])
                   if m.key() == seed_key(sid).encode()]
        assert wrapped, "the key manager stored no seed for the stream"
        seeds = {kek.unwrap(SEED_PURPOSE, sid, w) for w in wrapped}
        assert len(seeds) == 1, "the stream's seed changed"
        seed = seeds.pop()
        for e, key in content_keys.items():
            assert derive_content_key(seed, sid, e) == key, "the sealed key is not the epoch's content key"
        secrets: dict[str, bytes] = {"master seed": seed, "receipt signing key": bytes(kek.receipt_signing_key())}
        secrets |= {f"epoch {e} key": key for e, key in content_keys.items()}
        secrets |= {f"plaintext #{seq}": p for seq, p in plaintexts.items()}
        # A confidential private feed on the same stack: no component ever holds its session keys.
        confidential, served = _confidential_feed(api, tmp_path / "home")
        secrets |= confidential

    # The stack has stopped: every log is complete. Every other stack of the session so far is
    # scanned for too: its seeds in every topic, and in every service log of the session (not in
    # the broker's segment files, NNN.log: their records are the topics, read above).
    others = {k: v for k, v in _session_seeds(kafka_bootstrap, tmp_path_factory.getbasetemp()).items()
              if v != seed}
    scanner = LeakScanner(secrets | others)
    records, in_topics = scanner.scan_topics(kafka_bootstrap)
    files, in_files = scanner.scan_tree(stack_dir)
    in_files += [f for path in tmp_path_factory.getbasetemp().rglob("*.log")
                 if path.is_file() and stack_dir not in path.parents and not path.stem.isdigit()
                 for f in LeakScanner(others or {"seed": seed}).scan_bytes(path.read_bytes(), str(path))]
    out, err = capfd.readouterr()
    print(f"secrets looked for: {len(secrets)} of this scenario, {len(others)} seeds of other stacks; "
          f"{records} records and {files} files of this stack scanned")
    in_output = scanner.scan_text(out, "stdout") + scanner.scan_text(err, "stderr") + scanner.scan_text(
        caplog.text, "log capture") + scanner.scan_text(served, "a stranger's get_since of the confidential feed")
    assert records > 0
    assert files > 0
    assert any(p.name == "keymgr.log" for p in stack_dir.rglob("*.log")), "the key manager's log was not scanned"
    leaks = [str(f) for f in in_topics + in_files + in_output]
    assert leaks == [], "secrets in clear:\n" + "\n".join(leaks)


def _confidential_feed(api_url: str, home: Path) -> tuple[dict[str, bytes], str]:
    """A confidential private feed through the SDK (docs/private-feeds.md): two members, one removed
    mid-stream and the feed re-keyed, a third member given the first keyload by a reseal, and a
    second branch with a keyload of its own. Returns its session keys and plaintexts, after
    checking that the members read every message they should with them (so the scan looks for the
    real secrets, and the worker took the branch and the reseal), and what a stranger with no
    credentials is served by ``GET /v1/streams/{id}/messages`` and the feed's SSE route (scanned too)."""
    api = ApiClient(api_url)
    owner = Account(nacl.signing.SigningKey.generate(), name="confidential-owner", home=home)
    publisher_key = nacl.signing.SigningKey.generate()
    sid = f"conf-leaks-{uuid.uuid4().hex[:8]}"
    api.command(owner.sign("create_stream", sid, {"publisher_key_hex": bytes(publisher_key.verify_key).hex(),
                                                  "subscription_policy": "PRIVATE_ALLOWLIST", "confidential": True,
                                                  "feed": {"name": sid, "description": "confidential"}}))
    members = [(addr(nacl.signing.SigningKey.generate()), nacl.public.PrivateKey.generate()) for _ in range(3)]
    recipients = [Recipient(a, 1, bytes(k.public_key)) for a, k in members]
    for address, _ in members[:2]:
        api.command(owner.sign("allowlist_add", sid, {"address": address}))
    wait_until_visible(api, sid, timeout_s=120)
    pub = ConfidentialPublisher(Publisher(api, owner, sid, publisher_key))
    first = pub.rekey(recipients[:2])                                           # 1
    texts = [os.urandom(40) for _ in range(4)]
    pub.publish("tick", texts[0])                                               # 2
    pub.publish("tick", texts[1])                                               # 3
    api.command(owner.sign("allowlist_remove", sid, {"address": members[1][0]}))
    second = pub.rekey(recipients[:1])                                          # 4
    pub.publish("tick", texts[2])                                               # 5
    api.command(owner.sign("allowlist_add", sid, {"address": members[2][0]}))
    pub.reseal(first.keyload_id, first.session_key, recipients[2:])             # 6: chosen history
    pro = ConfidentialPublisher(pub.publisher, branch="pro")
    third = pro.rekey(recipients[:1])                                           # 7
    pro.publish("tick", texts[3])                                               # 8
    wait_until_visible(api, sid, min_head=8, timeout_s=120)
    reader = ConfidentialReader(members[0][0], bytes(members[0][1]))
    opened = [reader.read(m).plaintext for m in Subscriber(api, sid).poll(20)]
    assert [p for p in opened if p is not None] == texts
    joined = ConfidentialReader(members[2][0], bytes(members[2][1]))
    history = Subscriber(api, sid).poll(20)
    joined.prime(history)
    assert [joined.read(m).plaintext for m in history if m.sequence in (2, 3)] == texts[:2]
    served = httpx.get(f"{api_url}/v1/streams/{sid}/messages", params={"cursor": 0, "limit": 100},
                       timeout=30).text  # a stranger: no account, no key
    payloads = {bytes.fromhex(m["payload_inline_hex"]) for m in json.loads(served)["messages"]}
    assert len(payloads) == 8
    assert not payloads & set(texts)
    # The live feed over SSE, from the start, as a stranger's browser or EventSource would follow it.
    feed_id = wait_for(lambda: next((f["feed_id"] for f in api.feeds() if f["stream_id"] == sid), None),
                       timeout_s=120, what="the confidential feed's listing")
    pushed: list[Any] = []
    with SseSource(api_url, int(feed_id), last_event_id=0) as sse:

        def eight_pushed() -> bool:
            pushed.extend(sse.poll(1.0))
            return len(pushed) >= 8

        wait_until(lambda: f"8 live messages over SSE (got {len(pushed)})", eight_pushed, timeout_s=120, every_s=0)
    assert [m.sequence for m in pushed] == list(range(1, 9))
    assert {m.payload_inline for m in pushed} == payloads
    served += json.dumps([m.to_json_dict() for m in pushed])
    return {"session key 1": first.session_key, "session key 2": second.session_key,
            "session key 3 (branch pro)": third.session_key,
            **{f"confidential plaintext #{i}": t for i, t in enumerate(texts)}}, served


def _aad(sid: str, seq: int, key_epoch: int) -> bytes:
    return envelope_aad(stream_id=sid, sequence=seq, key_epoch=key_epoch, kind="price",
                        content_type="application/octet-stream")


def _encrypt_and_publish(api: str, url: str, creator: Caller, publisher: nacl.signing.SigningKey, sid: str,
                         seq: int, key_epoch: int, plaintext: bytes) -> bytes:
    status, reply = KeymgrClient(url, publisher).call(
        "stream_encrypt", sid, {"key_epoch": key_epoch, "aad": _aad(sid, seq, key_epoch), "plaintext": plaintext})
    assert status == 200, reply
    envelope = bytes.fromhex(reply["envelope_hex"])
    msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=1_790_000_000_000 + seq, kind="price",
                       payload=envelope, payload_format="CIPHERTEXT", key_epoch=key_epoch, signing_key=publisher,
                       content_type="application/octet-stream")
    body: dict[str, Any] = {**msg.to_json_dict(), "keymgr_receipt": bytes.fromhex(reply["keymgr_receipt_hex"])}
    assert creator.ok("publish", sid, body)["sequence"] == seq
    return envelope


def _acquire(buyer: Caller, sid: str, target: int) -> dict[str, Any] | None:
    """The receipt, or None while the paid instance has not heard of the stream yet (its creation
    reaches it as a forward after the creator's answer) or the purchase is still settling."""
    status, reply = buyer.call("acquire_epoch_access", f"paid:{sid}", {"stream_id": sid, "target_key_epoch": target})
    if status == 200:
        return dict(reply["result"])
    assert reply["error"]["code"] in ("NOT_PLATFORM_MANAGED_STREAM", "NOT_READY", "TIMEOUT"), reply
    return None


def _session_seeds(bootstrap: str, root: Path) -> dict[str, bytes]:
    """Every master seed on every ``keymgr.state`` topic of the broker that a KEK file somewhere
    under `root` (the test session's temporary directory) unwraps: the seeds of every stack the
    session started so far."""
    keks = []
    for path in root.rglob("kek.key"):
        try:
            keks.append(Kek(bytes.fromhex(path.read_text().strip())))
        except (OSError, ValueError, KekError):
            continue  # a test's deliberately broken KEK file
    admin = AdminClient(kafka_config(bootstrap))
    state_topics = [t for t in admin.list_topics(timeout=30).topics if t.endswith("keymgr.state")]
    seeds: dict[str, bytes] = {}
    for record in read_committed(bootstrap, state_topics):
        key = (record.key() or b"").decode(errors="replace")
        if not key.startswith("seed/"):
            continue
        try:
            wrapped = bytes.fromhex(json.loads(record.value() or b"{}")["wrapped_hex"])
        except (ValueError, KeyError, TypeError):
            continue
        for kek in keks:
            try:
                seeds[f"seed of {key[5:]} on {record.topic()}"] = kek.unwrap(SEED_PURPOSE, key[5:], wrapped)
            except KekError:
                continue
    return seeds
