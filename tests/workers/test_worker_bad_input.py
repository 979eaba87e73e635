"""Bad input on the commands topic gets its spec error code, and the worker and partition keep going.

One worker process serves the whole module. Every case sends its bad record keyed by the feed's
stream id, so it lands on the feed's partition; the worker must answer it with the right code and
an actionable message, stay the same running process, and then acknowledge a valid publish on
that partition with the next sequence. At the end the log holds exactly the accepted messages.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from worker_harness import RawCommandChannel, Workers, partition_for, workers

from watchtower.cli.message_log import read_committed_messages
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.constants import MAX_INLINE_PAYLOAD_BYTES
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.signing import sign_message, verify_with_schedule
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas.wire import H_REPLY_PARTITION, encode_command, encode_registry_forward
from watchtower.topics.catalogue import topic_name
from watchtower.topics.reader import read_committed

pytestmark = pytest.mark.integration

WORKER = "bad-input"
PARTITIONS = 3


@dataclass
class Feed:
    """One stream served by one worker, with the bookkeeping every case shares."""

    workers: Workers
    worker_pid: int
    channel: RawCommandChannel
    stream_id: str
    owner: nacl.signing.SigningKey = field(default_factory=nacl.signing.SigningKey.generate)
    publisher: nacl.signing.SigningKey = field(default_factory=nacl.signing.SigningKey.generate)
    stranger: nacl.signing.SigningKey = field(default_factory=nacl.signing.SigningKey.generate)
    partition: int = -1
    head: int = 0
    owner_nonce: int = 0
    accepted: list[StreamMessage] = field(default_factory=list)

    def next_nonce(self) -> int:
        self.owner_nonce += 1
        return self.owner_nonce

    def message(self, sequence: int, payload: bytes = b'{"p":1}') -> StreamMessage:
        return sign_message(stream_id=self.stream_id, sequence=sequence, timestamp_unix_ms=1_790_000_000_000 + sequence,
                            kind="tick", payload=payload, signing_key=self.publisher, tags={"n": sequence})

    def send_raw(self, value: bytes | None) -> dict[str, Any]:
        """Send a record keyed by the stream id; check it reached the feed's partition; return the reply."""
        partition, reply = self.channel.request(value, key=self.stream_id)
        if self.partition < 0:
            self.partition = partition
        assert partition == self.partition, "the record did not land on the feed's partition"
        return reply

    def send(self, cmd: Command) -> dict[str, Any]:
        return self.send_raw(encode_command(cmd))

    def publish_cmd(self, msg: StreamMessage, nonce: int | None = None) -> Command:
        return sign_command(self.owner, "publish", self.stream_id, nonce or self.next_nonce(), msg.to_json_dict())

    def publish_next(self, payload: bytes = b'{"p":1}') -> dict[str, Any]:
        """Publish head+1 and require the acknowledgement; returns the reply's result."""
        msg = self.message(self.head + 1, payload)
        result = ok(self.send(self.publish_cmd(msg)))
        assert result["sequence"] == self.head + 1
        assert result["head"] == self.head + 1
        self.head += 1
        self.accepted.append(msg)
        return result

    def assert_still_flowing(self) -> None:
        """The same worker process is running and the feed's partition still acknowledges publishes."""
        assert self.workers.alive(WORKER), f"the worker died:\n{self.workers.log(WORKER)}"
        assert self.workers.pid(WORKER) == self.worker_pid, "the worker was restarted"
        self.publish_next()
        assert self.workers.alive(WORKER)


def ok(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply.get("ok") is True, f"expected success, got {reply}"
    result = reply["result"]
    assert isinstance(result, dict)
    return result


def refused(reply: dict[str, Any], code: str) -> dict[str, Any]:
    """Require a refusal with ``code`` and a message that tells the user what to do; return the error."""
    assert reply.get("ok") is False, f"expected {code}, got success: {reply}"
    error = reply["error"]
    assert error["code"] == code, f"expected {code}, got {error}"
    message = error.get("message")
    assert isinstance(message, str)
    assert message.strip(), f"{code} came with an empty message"
    assert message.strip() != code, f"{code} came with the bare code as its message"
    return dict(error)


@pytest.fixture(scope="module")
def feed(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Feed]:
    log_dir: Path = tmp_path_factory.mktemp("bad-input-worker")
    with workers(kafka_bootstrap, partitions=PARTITIONS, log_dir=log_dir) as w:
        w.start(WORKER)
        channel = RawCommandChannel(kafka_bootstrap, w.prefix, reply_partition=1)
        try:
            f = Feed(workers=w, worker_pid=w.pid(WORKER), channel=channel, stream_id=f"bad-input.{w.prefix}")
            cfg = {"stream_id": f.stream_id, "owner": address_from_public_key(bytes(f.owner.verify_key)),
                   "publisher_key_hex": bytes(f.publisher.verify_key).hex()}
            # The first reply also waits for the worker to start and join the group.
            _, created = channel.request(encode_command(sign_command(f.owner, "create_stream", f.stream_id,
                                                                     f.next_nonce(), cfg)),
                                         key=f.stream_id, timeout=120)
            ok(created)
            f.publish_next()
            yield f
        finally:
            channel.close()


# --- Records that are not commands ----------------------------------------------------------------


@pytest.mark.parametrize("value", [
    pytest.param(b"\x00\xff\xfe not json at all", id="binary"),
    pytest.param(b'{"v": 1, "command": {', id="truncated-json"),
    pytest.param(b"[1, 2, 3]", id="json-array"),
    pytest.param(None, id="no-value"),
])
def test_malformed_record(feed: Feed, value: bytes | None) -> None:
    refused(feed.send_raw(value), "MALFORMED_RECORD")
    feed.assert_still_flowing()


def test_deeply_nested_json_is_malformed_record(feed: Feed) -> None:
    # JSON nested deeper than any parser will build is just another undecodable record. Liveness
    # is checked first so that a wrong code still tells whether the worker survived.
    reply = feed.send_raw(b"[" * 200_000 + b"]" * 200_000)
    feed.assert_still_flowing()
    refused(reply, "MALFORMED_RECORD")


def test_reply_header_that_is_not_a_number(feed: Feed) -> None:
    # Nobody can be answered, so the record is dropped; the records after it are still served.
    _, partition = feed.channel.send(b"garbage", key=feed.stream_id, headers={H_REPLY_PARTITION: "not-a-partition"})
    assert partition == feed.partition
    feed.assert_still_flowing()


def test_unknown_envelope_version_is_schema_mismatch(feed: Feed) -> None:
    cmd = feed.publish_cmd(feed.message(feed.head + 1))
    error = refused(feed.send_raw(json.dumps({"v": 99, "command": cmd.to_dict()}).encode()), "SCHEMA_MISMATCH")
    assert "99" in error["message"]
    feed.assert_still_flowing()


@pytest.mark.parametrize("missing", ["signature_hex", "body", "nonce"])
def test_command_missing_a_field_is_invalid_argument(feed: Feed, missing: str) -> None:
    # The envelope is a v1 envelope; its command object lacks a field: the field is the user's to fix.
    data = feed.publish_cmd(feed.message(feed.head + 1)).to_dict()
    del data[missing]
    error = refused(feed.send_raw(json.dumps({"v": 1, "command": data}).encode()), "INVALID_ARGUMENT")
    assert missing in error["message"]
    feed.assert_still_flowing()


def test_command_field_of_the_wrong_type_is_invalid_argument(feed: Feed) -> None:
    data = feed.publish_cmd(feed.message(feed.head + 1)).to_dict()
    data["nonce"] = str(data["nonce"])
    error = refused(feed.send_raw(json.dumps({"v": 1, "command": data}).encode()), "INVALID_ARGUMENT")
    assert "nonce" in error["message"]
    feed.assert_still_flowing()


# --- Commands that are well-formed but not allowed ------------------------------------------------


def test_flipped_signature_byte_is_invalid_signature(feed: Feed) -> None:
    # A command's own signature (a publish is authorised by its message's: docs/publish-auth.md).
    data = sign_command(feed.owner, "set_subscription_policy", feed.stream_id, feed.next_nonce(),
                        {"policy": "PUBLIC"}).to_dict()
    sig = bytearray.fromhex(data["signature_hex"])
    sig[10] ^= 0x01
    data["signature_hex"] = sig.hex()
    refused(feed.send_raw(json.dumps({"v": 1, "command": data}).encode()), "INVALID_SIGNATURE")
    data = feed.publish_cmd(feed.message(feed.head + 1)).to_dict()
    sig = bytearray.fromhex(data["body"]["publisher_sig_hex"])
    sig[10] ^= 0x01
    data["body"]["publisher_sig_hex"] = sig.hex()
    refused(feed.send_raw(json.dumps({"v": 1, "command": data}).encode()), "INVALID_SIGNATURE")
    feed.assert_still_flowing()


def test_altered_body_is_invalid_signature(feed: Feed) -> None:
    # The owner's signature is intact but covers another body: the command was tampered with.
    data = feed.publish_cmd(feed.message(feed.head + 1)).to_dict()
    data["body"]["kind"] = "forged"
    refused(feed.send_raw(json.dumps({"v": 1, "command": data}).encode()), "INVALID_SIGNATURE")
    feed.assert_still_flowing()


@pytest.mark.parametrize("method", ["publish", "rotate_publisher_key", "set_subscription_policy"])
def test_stranger_is_unauthorized(feed: Feed, method: str) -> None:
    body: dict[str, Any] = {
        "publish": lambda: feed.message(feed.head + 1).to_json_dict(),
        "rotate_publisher_key": lambda: {"new_key": bytes(nacl.signing.SigningKey.generate().verify_key)},
        "set_subscription_policy": lambda: {"policy": "PRIVATE_ALLOWLIST"},
    }[method]()
    # The stranger's own nonce 1 is fresh, so only ownership can be the reason for the refusal.
    error = refused(feed.send(sign_command(feed.stranger, method, feed.stream_id, 1, body)), "UNAUTHORIZED")
    assert address_from_public_key(bytes(feed.stranger.verify_key)) in error["message"]
    feed.assert_still_flowing()


def test_forged_feed_registration_on_the_commands_topic_is_unauthorized(feed: Feed) -> None:
    # A stranger signs a create for the victim's stream with a listing and sends the registry
    # forward straight to the public commands topic, hoping to be listed as the owner.
    forged = sign_command(feed.stranger, "create_stream", feed.stream_id, 1,
                          {"publisher_key_hex": bytes(feed.stranger.verify_key).hex(), "feed": {"name": "mine"}})
    error = refused(feed.send_raw(encode_registry_forward(forged)), "UNAUTHORIZED")
    assert "forwarded by stream workers" in error["message"]
    feed.assert_still_flowing()


def test_replayed_nonce_and_idempotent_retry(feed: Feed) -> None:
    msg = feed.message(feed.head + 1)
    original = feed.publish_cmd(msg)
    first = ok(feed.send(original))
    assert first["sequence"] == msg.sequence
    feed.head += 1
    feed.accepted.append(msg)

    # A different command under the owner's last nonce: a replay, refused. (A publish's replay
    # protection is its sequence, not its nonce: docs/publish-auth.md.)
    policy = sign_command(feed.owner, "set_subscription_policy", feed.stream_id, feed.next_nonce(),
                          {"policy": "PUBLIC"})
    ok(feed.send(policy))
    other = sign_command(feed.owner, "announce_key_epoch", feed.stream_id, policy.nonce, {"key_epoch": 1})
    error = refused(feed.send(other), "NONCE_REPLAYED")
    assert error["details"]["last_nonce"] == policy.nonce
    # An older nonce is a replay too.
    older = sign_command(feed.owner, "announce_key_epoch", feed.stream_id, policy.nonce - 1, {"key_epoch": 1})
    refused(feed.send(older), "NONCE_REPLAYED")

    # The very same command again is a retry: the original answer, marked, and no second message.
    again = ok(feed.send(original))
    assert again == {**first, "duplicate": True}
    feed.assert_still_flowing()  # acknowledged as head+1: the retry did not take a sequence


def test_oversize_payload_is_payload_too_large(feed: Feed) -> None:
    # sign_message refuses an oversize payload, so build the message JSON by hand; the worker
    # must be the one that refuses it.
    data = feed.message(feed.head + 1).to_json_dict()
    payload = b"x" * (MAX_INLINE_PAYLOAD_BYTES + 1)
    data["payload_inline_hex"] = payload.hex()
    data["payload_hash_hex"] = hashlib.sha256(payload).hexdigest()
    cmd = sign_command(feed.owner, "publish", feed.stream_id, feed.next_nonce(), data)
    error = refused(feed.send(cmd), "PAYLOAD_TOO_LARGE")
    assert str(MAX_INLINE_PAYLOAD_BYTES) in error["message"]
    feed.assert_still_flowing()
    # The limit itself is allowed.
    feed.publish_next(payload=b"y" * MAX_INLINE_PAYLOAD_BYTES)


@pytest.mark.parametrize("offset", [pytest.param(0, id="behind-head"), pytest.param(2, id="ahead-of-head")])
def test_stale_sequence_leaves_the_head_alone(feed: Feed, offset: int) -> None:
    head = feed.head
    cmd = feed.publish_cmd(feed.message(head + offset))
    error = refused(feed.send(cmd), "STALE_SEQUENCE")
    assert error["details"] == {"expected_sequence": head + offset, "head": head}
    assert feed.head == head
    feed.assert_still_flowing()  # acknowledged as head+1: the head did not move


def test_a_signed_command_on_another_partition_than_its_key_is_refused_and_writes_nothing(feed: Feed) -> None:
    """A valid create_stream, keyed by its stream but produced to another partition (as a client that
    took it from the public key history could), is refused before it is decided: no event anywhere.
    The same bytes sent where the key puts them are then accepted, so only the placement was wrong."""
    sid = f"misplaced.{feed.workers.prefix}"
    home = partition_for(sid, PARTITIONS)
    wrong = (home + 1) % PARTITIONS
    owner = nacl.signing.SigningKey.generate()
    cfg = {"stream_id": sid, "owner": address_from_public_key(bytes(owner.verify_key)),
           "publisher_key_hex": bytes(owner.verify_key).hex()}
    value = encode_command(sign_command(owner, "create_stream", sid, 1, cfg))
    corr, landed = feed.channel.send(value, key=sid, partition=wrong)
    assert landed == wrong
    error = refused(feed.channel.reply(corr, timeout=60), "MALFORMED_RECORD")
    assert error["details"] == {"partition": wrong, "home_partition": home}
    # The refusal's transaction is committed, so any event it had written would be readable now.
    assert [m for m in read_committed(feed.workers.bootstrap, [topic_name("events", feed.workers.prefix)])
            if m.key() == sid.encode()] == []
    landed, created = feed.channel.request(value, key=sid, timeout=60)
    assert landed == home
    ok(created)
    events = [m for m in read_committed(feed.workers.bootstrap, [topic_name("events", feed.workers.prefix)])
              if m.key() == sid.encode()]
    assert events
    assert {int(m.partition() or 0) for m in events} == {home}
    feed.assert_still_flowing()


def test_log_holds_exactly_the_accepted_messages(feed: Feed) -> None:
    feed.assert_still_flowing()
    logged = read_committed_messages(feed.workers.bootstrap, prefix=feed.workers.prefix, stream_id=feed.stream_id)
    assert [m.sequence for m in logged] == list(range(1, feed.head + 1))
    assert [m.publisher_sig for m in logged] == [m.publisher_sig for m in feed.accepted]
    schedule = KeySchedule.initial(bytes(feed.publisher.verify_key))
    assert all(verify_with_schedule(m, schedule) for m in logged)


# --- A record that can never be answered ----------------------------------------------------------


def test_reply_partition_that_does_not_exist(kafka_bootstrap: str, tmp_path: Path) -> None:
    """A command asking for its reply on a partition the replies topic lacks must not wedge the worker.

    Runs its own worker: if the record does wedge it, the shared feed worker is unaffected.
    """
    worker = "bad-reply-partition"
    with workers(kafka_bootstrap, partitions=3, log_dir=tmp_path) as w:
        w.start(worker)
        channel = RawCommandChannel(kafka_bootstrap, w.prefix)
        try:
            owner = nacl.signing.SigningKey.generate()
            sid = f"bad-reply.{w.prefix}"
            cfg = {"stream_id": sid, "owner": address_from_public_key(bytes(owner.verify_key)),
                   "publisher_key_hex": bytes(owner.verify_key).hex()}
            _, created = channel.request(encode_command(sign_command(owner, "create_stream", sid, 1, cfg)),
                                         key=sid, timeout=120)
            ok(created)
            pid = w.pid(worker)
            channel.send(b"garbage", key=sid, headers={H_REPLY_PARTITION: "99"})
            policy = sign_command(owner, "set_subscription_policy", sid, 2, {"policy": "PRIVATE_ALLOWLIST"})
            try:
                _, reply = channel.request(encode_command(policy), key=sid, timeout=20)
            except TimeoutError:
                pytest.fail("the partition stopped after a command asking for a reply on partition 99; "
                            f"last worker log lines:\n{''.join(w.log(worker).splitlines(True)[-3:])}")
            assert ok(reply) == {"policy": "PRIVATE_ALLOWLIST"}
            assert w.alive(worker)
            assert w.pid(worker) == pid
        finally:
            channel.close()
