"""Confidential private feeds through the SDK (client.private), on the in-memory API.

Members open the keyloads they are in and read the masked messages; a member removed by a re-key
reads everything before its removal and nothing after; a stranger reads nothing; the stored
stream (what the platform holds) contains neither a session key nor a plaintext. Every message is
still signed and verified by the ordinary Subscriber, over the ciphertext.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import nacl.public
import nacl.signing
import pytest

from watchtower.client.account import Account
from watchtower.client.fake import FakeApi
from watchtower.client.private import ConfidentialPublisher, ConfidentialReader
from watchtower.client.sdk import Publisher, Subscriber
from watchtower.protocol.errors import (
    DecryptionFailedError,
    InvalidArgumentError,
    InvalidSignatureError,
    UnauthorizedError,
)
from watchtower.protocol.keyload import KEYLOAD_KIND, Recipient

SID = "private-feed"


class Person:
    def __init__(self, seed: int) -> None:
        self.x25519 = nacl.public.PrivateKey(bytes([seed]) * 32)
        self.address = "0x" + (bytes([seed]) + b"\xaa" * 31).hex()

    def recipient(self) -> Recipient:
        return Recipient(self.address, 1, bytes(self.x25519.public_key))

    def reader(self) -> ConfidentialReader:
        return ConfidentialReader(self.address, bytes(self.x25519))


@pytest.fixture
def feed(tmp_path: Path) -> tuple[FakeApi, ConfidentialPublisher]:
    owner = Account(nacl.signing.SigningKey(b"\x01" * 32), name="owner", home=tmp_path)
    publisher_key = nacl.signing.SigningKey(b"\x02" * 32)
    api = FakeApi()
    api.command(owner.sign("create_stream", SID, {"publisher_key_hex": bytes(publisher_key.verify_key).hex(),
                                                  "subscription_policy": "PRIVATE_ALLOWLIST"}))
    return api, ConfidentialPublisher(Publisher(api, owner, SID, publisher_key))


def read_all(api: FakeApi, reader: ConfidentialReader) -> dict[int, bytes | Exception | None]:
    """Every message through a verifying Subscriber, then the member's reader."""
    out: dict[int, bytes | Exception | None] = {}
    for msg in Subscriber(api, SID).poll(500):
        try:
            out[msg.sequence] = reader.read(msg).plaintext
        except (UnauthorizedError, DecryptionFailedError) as exc:
            out[msg.sequence] = exc
    return out


def test_members_read_a_removed_member_reads_only_before_and_a_stranger_nothing(
        feed: tuple[FakeApi, ConfidentialPublisher]) -> None:
    api, pub = feed
    owner, alice, bob, stranger = Person(10), Person(11), Person(12), Person(13)
    pub.rekey([owner.recipient(), alice.recipient(), bob.recipient()])   # sequence 1 (one part)
    for i in range(3):
        pub.publish("tick", b'{"n":%d}' % i)                             # 2, 3, 4
    pub.rekey([owner.recipient(), alice.recipient()])                    # 5: bob removed
    for i in range(3, 5):
        pub.publish("tick", b'{"n":%d}' % i)                             # 6, 7

    expected = {2: b'{"n":0}', 3: b'{"n":1}', 4: b'{"n":2}', 6: b'{"n":3}', 7: b'{"n":4}'}
    for member in (owner, alice):
        got = read_all(api, member.reader())
        assert {s: v for s, v in got.items() if s not in (1, 5)} == expected
    bobs = read_all(api, bob.reader())
    assert {s: bobs[s] for s in (2, 3, 4)} == {s: expected[s] for s in (2, 3, 4)}
    assert all(isinstance(bobs[s], UnauthorizedError) for s in (6, 7))
    strangers = read_all(api, stranger.reader())
    assert all(isinstance(strangers[s], UnauthorizedError) for s in expected)


def test_the_stored_stream_holds_no_session_key_and_no_plaintext(feed: tuple[FakeApi, ConfidentialPublisher]) -> None:
    api, pub = feed
    keyload = pub.rekey([Person(10).recipient()])
    secret = b"the launch code is 0000"
    pub.publish("note", secret)
    stored = b"".join(m.payload_inline + repr(m.tags).encode() for m in api.messages[SID].values())
    assert keyload.session_key not in stored
    assert secret not in stored
    kinds = [m.kind for m in api.messages[SID].values()]
    assert kinds == [KEYLOAD_KIND, "note"]


def test_a_large_membership_spans_several_keyload_messages_and_each_member_reads(
        feed: tuple[FakeApi, ConfidentialPublisher]) -> None:
    api, pub = feed
    people = [Person(i) for i in range(20, 220)]
    keyload = pub.rekey([p.recipient() for p in people])
    assert len(keyload.parts) > 1
    pub.publish("tick", b"hello")
    for person in (people[0], people[123], people[-1]):
        got = read_all(api, person.reader())
        assert got[len(keyload.parts) + 1] == b"hello"


def test_a_message_tampered_in_the_store_is_refused_by_the_subscriber(
        feed: tuple[FakeApi, ConfidentialPublisher]) -> None:
    api, pub = feed
    pub.rekey([Person(10).recipient()])
    pub.publish("tick", b"x")
    stored = api.messages[SID][2]
    # Flip a bit: setting the last byte to a constant left the payload unchanged 1 time in 256.
    tampered = stored.payload_inline[:-1] + bytes([stored.payload_inline[-1] ^ 0x01])
    api.messages[SID][2] = dataclasses.replace(stored, payload_inline=tampered)
    with pytest.raises(InvalidSignatureError, match="altered or forged"):
        Subscriber(api, SID).poll(10)


def test_publishing_before_a_keyload_or_with_reserved_names_is_refused(
        feed: tuple[FakeApi, ConfidentialPublisher]) -> None:
    _api, pub = feed
    with pytest.raises(InvalidArgumentError, match="rekey"):
        pub.publish("tick", b"x")
    pub.rekey([Person(10).recipient()])
    with pytest.raises(InvalidArgumentError, match="reserved"):
        pub.publish(KEYLOAD_KIND, b"x")
    with pytest.raises(InvalidArgumentError, match="set by the confidential publisher"):
        pub.publish("tick", b"x", {"wt.keyload": "00"})


def test_the_reader_never_shows_a_key() -> None:
    reader = Person(10).reader()
    assert bytes(Person(10).x25519).hex() not in repr(reader)


# --- a confidential stream: the writer holds the SDK to the keyload rules -----------------------


@pytest.fixture
def confidential(tmp_path: Path) -> tuple[FakeApi, ConfidentialPublisher, Account]:
    owner = Account(nacl.signing.SigningKey(b"\x01" * 32), name="owner", home=tmp_path)
    publisher_key = nacl.signing.SigningKey(b"\x02" * 32)
    api = FakeApi()
    api.command(owner.sign("create_stream", SID, {"publisher_key_hex": bytes(publisher_key.verify_key).hex(),
                                                  "subscription_policy": "PRIVATE_ALLOWLIST", "confidential": True}))
    return api, ConfidentialPublisher(Publisher(api, owner, SID, publisher_key)), owner  # type: ignore[arg-type]


def test_the_sdk_passes_the_writers_checks_and_a_removal_forces_a_rekey(
        confidential: tuple[FakeApi, ConfidentialPublisher, Account]) -> None:
    api, pub, owner = confidential
    alice, bob = Person(11), Person(12)
    for person in (alice, bob):
        api.command(owner.sign("allowlist_add", SID, {"address": person.address}))
    with pytest.raises(UnauthorizedError, match="no keyload yet"):
        pub.publisher.publish("tick", b"{}")
    pub.rekey([alice.recipient(), bob.recipient()])                      # 1
    pub.publish("tick", b'{"n":0}')                                      # 2
    api.command(owner.sign("allowlist_remove", SID, {"address": bob.address}))
    with pytest.raises(UnauthorizedError, match="left the allowlist"):
        pub.publish("tick", b'{"n":1}')
    with pytest.raises(UnauthorizedError, match=bob.address):
        pub.rekey([alice.recipient(), bob.recipient()])
    pub.rekey([alice.recipient()])                                       # 3
    pub.publish("tick", b'{"n":1}')                                      # 4
    assert read_all(api, alice.reader()) == {1: None, 2: b'{"n":0}', 3: None, 4: b'{"n":1}'}
    got = read_all(api, bob.reader())
    assert got[2] == b'{"n":0}'
    assert isinstance(got[4], UnauthorizedError)


def test_a_confidential_flag_on_a_public_feed_is_refused(tmp_path: Path) -> None:
    owner = Account(nacl.signing.SigningKey(b"\x01" * 32), name="owner", home=tmp_path)
    with pytest.raises(InvalidArgumentError, match="PRIVATE_ALLOWLIST"):
        FakeApi().command(owner.sign("create_stream", SID, {"publisher_key_hex": "22" * 32, "confidential": True}))
