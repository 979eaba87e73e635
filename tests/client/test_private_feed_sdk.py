"""Confidential private feeds through the SDK (client.private), on the in-memory API.

Members open the keyloads they are in and read the masked messages; a member removed by a re-key
reads everything before its removal and nothing after; a stranger reads nothing; the stored
stream (what the platform holds) contains neither a session key nor a plaintext. Every message is
still signed and verified by the ordinary Subscriber, over the ciphertext.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import nacl.public
import nacl.signing
import pytest

from watchtower.client.account import Account
from watchtower.client.fake import FakeApi
from watchtower.client.private import ConfidentialPublisher, newest_active_key
from watchtower.client.private_reader import ConfidentialReader
from watchtower.client.sdk import Publisher
from watchtower.client.subscriber import Subscriber
from watchtower.protocol.confidential.keyload import KEYLOAD_KIND, Recipient
from watchtower.protocol.errors import (
    DecryptionFailedError,
    InvalidArgumentError,
    InvalidSignatureError,
    RequestTimeoutError,
    UnauthorizedError,
)
from watchtower.protocol.ledger.common import account_instance
from watchtower.protocol.signed_command import Command

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


def read_all(api: FakeApi, reader: ConfidentialReader, *, prime: bool = False,
             **subscriber: Any) -> dict[int, bytes | Exception | None]:
    """Every message through a verifying Subscriber, then the member's reader: in order, as a live
    reader does, or with `prime` as `feed ID get-since --decrypt` does (every keyload and reseal
    taken in first, so a reseal later in the log unlocks earlier messages)."""
    messages = Subscriber(api, SID, **subscriber).poll(500)
    if prime:
        reader.prime(messages)
    out: dict[int, bytes | Exception | None] = {}
    for msg in messages:
        try:
            out[msg.sequence] = reader.read(msg).plaintext
        except (UnauthorizedError, DecryptionFailedError, InvalidArgumentError) as exc:
            out[msg.sequence] = exc
    return out


def read_history(api: FakeApi, reader: ConfidentialReader, **subscriber: Any) -> dict[int, bytes | Exception | None]:
    """`read_all` with `prime`."""
    return read_all(api, reader, prime=True, **subscriber)


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


# --- joining later, reseals, key rotation, branches ----------------------------------------------


def test_a_member_added_later_reads_from_its_join_and_what_the_owner_resealed(
        confidential: tuple[FakeApi, ConfidentialPublisher, Account]) -> None:
    api, pub, owner_account = confidential
    owner, alice, carol = Person(10), Person(11), Person(13)  # owner: the owner's reading identity
    for p in (owner, alice):
        api.command(owner_account.sign("allowlist_add", SID, {"address": p.address}))
    first = pub.rekey([owner.recipient(), alice.recipient()])            # 1
    pub.publish("tick", b"first-1")                                      # 2
    second = pub.rekey([owner.recipient(), alice.recipient()])           # 3
    pub.publish("tick", b"second-1")                                     # 4
    api.command(owner_account.sign("allowlist_add", SID, {"address": carol.address}))
    pub.rekey([owner.recipient(), alice.recipient(), carol.recipient()])  # 5: carol joins
    pub.publish("tick", b"third-1")                                      # 6

    got = read_history(api, carol.reader())
    assert got[6] == b"third-1"                                          # from its join
    assert isinstance(got[2], UnauthorizedError)
    assert isinstance(got[4], UnauthorizedError)

    # The owner opens the second keyload from the log (a member of every keyload) and reseals it.
    owner_reader = owner.reader()
    owner_reader.prime(Subscriber(api, SID).poll(500))
    past = owner_reader.keyload(second.keyload_id)
    assert past is not None
    assert past.session_key == second.session_key
    assert owner_reader.keyload(first.keyload_id) is not None
    pub.reseal(past.keyload_id, past.session_key, [carol.recipient()])   # 7
    got = read_history(api, carol.reader())
    assert got[4] == b"second-1"                                         # the chosen history
    assert isinstance(got[2], UnauthorizedError)                         # not resealed: still closed
    assert carol.reader().keyloads() == {}
    assert isinstance(read_history(api, Person(14).reader())[4], UnauthorizedError)  # a stranger: nothing


def test_a_reseal_that_commits_to_another_key_is_refused_by_the_member(
        confidential: tuple[FakeApi, ConfidentialPublisher, Account]) -> None:
    api, pub, owner_account = confidential
    alice, carol = Person(11), Person(13)
    for p in (alice, carol):
        api.command(owner_account.sign("allowlist_add", SID, {"address": p.address}))
    real = pub.rekey([alice.recipient()])                                # 1
    pub.publish("tick", b"secret")                                       # 2
    pub.reseal(real.keyload_id, bytes(32), [carol.recipient()])          # 3: a key the keyload never held
    got = read_history(api, carol.reader())  # reported on the message it would have opened
    assert isinstance(got[2], DecryptionFailedError)
    assert "commits to another key" in str(got[2])
    live, reader = Subscriber(api, SID).poll(500), carol.reader()  # live, in order: refused at the reseal
    reader.read(live[0])
    with pytest.raises(UnauthorizedError):
        reader.read(live[1])
    with pytest.raises(DecryptionFailedError, match="commits to another key"):
        reader.read(live[2])


def test_refresh_re_keys_when_a_members_account_key_rotates_and_not_otherwise(
        confidential: tuple[FakeApi, ConfidentialPublisher, Account]) -> None:
    api, pub, owner_account = confidential
    alice, bob = Person(11), Person(12)
    for p in (alice, bob):
        api.command(owner_account.sign("allowlist_add", SID, {"address": p.address}))
    members = [alice.recipient(), bob.recipient()]
    assert pub.refresh(members) is not None                              # 1: the first keyload
    assert pub.refresh(list(reversed(members))) is None                  # the same keys: nothing to do
    pub.publish("tick", b"before")                                       # 2
    rotated = Person(21)                                                 # bob's new X25519 key, id 2
    bob_new = Recipient(bob.address, 2, bytes(rotated.x25519.public_key))
    keyload = pub.refresh([alice.recipient(), bob_new])                  # 3: re-keyed to bob's new key
    assert keyload is not None
    assert (bob.address, 2) in {(m.address, m.account_key_id) for m in keyload.members}
    pub.publish("tick", b"after")                                        # 4
    assert read_history(api, ConfidentialReader(bob.address, bytes(rotated.x25519)))[4] == b"after"
    old_key = read_history(api, bob.reader())
    assert old_key[2] == b"before"
    assert isinstance(old_key[4], DecryptionFailedError)
    assert "key id 2" in str(old_key[4])


def test_newest_active_key_skips_revoked_and_picks_the_newest() -> None:
    body = {"keys": [{"account_key_id": 1, "scheme": "X25519", "public_key_hex": "11" * 32, "status": "ACTIVE"},
                     {"account_key_id": 3, "scheme": "X25519", "public_key_hex": "33" * 32, "status": "REVOKED"},
                     {"account_key_id": 2, "scheme": "X25519", "public_key_hex": "22" * 32, "status": "ACTIVE"}]}
    assert newest_active_key(body) == (2, b"\x22" * 32)
    assert newest_active_key({"keys": [dict(body["keys"][1])]}) is None
    assert newest_active_key({"keys": []}) is None


def test_each_branch_has_its_audience_and_a_subscriber_filters_by_branch(
        confidential: tuple[FakeApi, ConfidentialPublisher, Account]) -> None:
    api, main_pub, owner_account = confidential
    alice, bob = Person(11), Person(12)
    for p in (alice, bob):
        api.command(owner_account.sign("allowlist_add", SID, {"address": p.address}))
    pro = ConfidentialPublisher(main_pub.publisher, branch="pro")
    basic = ConfidentialPublisher(main_pub.publisher, branch="basic")
    pro.rekey([alice.recipient()])                                       # 1
    basic.rekey([alice.recipient(), bob.recipient()])                    # 2
    pro.publish("tick", b"pro-1")                                        # 3
    basic.publish("tick", b"basic-1")                                    # 4
    pro.publish("tick", b"pro-2")                                        # 5

    bob_all = read_history(api, bob.reader())
    assert bob_all[4] == b"basic-1"
    assert isinstance(bob_all[3], UnauthorizedError)
    only_pro = {"field": "tags.wt.branch", "op": "eq", "value": "pro"}
    got = read_history(api, alice.reader(), filter=only_pro)
    assert got == {1: None, 3: b"pro-1", 5: b"pro-2"}                    # the branch's keyload came along
    only_basic = {"field": "tags.wt.branch", "op": "eq", "value": "basic"}
    assert read_history(api, bob.reader(), filter=only_basic) == {2: None, 4: b"basic-1"}


def test_an_unreadable_keyload_record_is_reported_on_itself_and_stops_no_history_read(tmp_path: Path) -> None:
    """On a feed that is not confidential the writer checks no keyload rule, so its publisher can
    publish any bytes under the reserved kinds: a member's history read reports them and goes on."""
    owner = Account(nacl.signing.SigningKey(b"\x01" * 32), name="owner", home=tmp_path)
    publisher_key = nacl.signing.SigningKey(b"\x02" * 32)
    api = FakeApi()
    api.command(owner.sign("create_stream", SID, {"publisher_key_hex": bytes(publisher_key.verify_key).hex(),
                                                  "subscription_policy": "PRIVATE_ALLOWLIST"}))
    pub = ConfidentialPublisher(Publisher(api, owner, SID, publisher_key))
    pub.publisher.publish(KEYLOAD_KIND, b"not a keyload part", {"wt.keyload": "00" * 16})   # 1
    pub.publisher.publish("wt.reseal", b"\xa0", {"wt.keyload": "00" * 16})                  # 2
    alice = Person(11)
    pub.rekey([alice.recipient()])                                                           # 3
    pub.publish("tick", b"fine")                                                             # 4
    got = read_history(api, alice.reader())
    assert got[4] == b"fine"
    assert isinstance(got[1], InvalidArgumentError)
    assert isinstance(got[2], InvalidArgumentError)


# --- the publisher checks the audience before it masks: nothing leaves for a reader gone ----------


class RecordingApi(FakeApi):
    """The in-memory API, keeping every signed command it was sent (what reached the command path)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[Command] = []

    def command(self, cmd: Command, *, timeout_s: float = 30.0) -> dict[str, Any]:
        self.sent.append(cmd)
        return super().command(cmd, timeout_s=timeout_s)


class Holder:
    """A member with an account of its own, whose X25519 account keys are registered in the API."""

    def __init__(self, seed: int, api: FakeApi, home: Path) -> None:
        self.api = api
        self.account = Account(nacl.signing.SigningKey(bytes([seed]) * 32), name=f"m{seed}", home=home)
        self.address = self.account.address
        self.keys: dict[int, nacl.public.PrivateKey] = {}
        self.rotate(seed)

    def rotate(self, seed: int) -> int:
        key = nacl.public.PrivateKey(bytes([seed, 0x55]) * 16)
        reply = self.api.command(self.account.sign("register_account_key", account_instance(self.address),
                                                   {"scheme": "X25519", "public_key": bytes(key.public_key)}))
        self.keys[int(reply["account_key_id"])] = key
        return int(reply["account_key_id"])

    def revoke(self, key_id: int) -> None:
        self.api.command(self.account.sign("revoke_account_key", account_instance(self.address),
                                           {"account_key_id": key_id}))

    def recipient(self) -> Recipient:
        key_id = max(self.keys)
        return Recipient(self.address, key_id, bytes(self.keys[key_id].public_key))

    def reader(self) -> ConfidentialReader:
        return ConfidentialReader(self.address, [bytes(self.keys[i]) for i in sorted(self.keys)])


@pytest.fixture
def members(tmp_path: Path) -> tuple[RecordingApi, ConfidentialPublisher, Account, Holder, Holder]:
    owner = Account(nacl.signing.SigningKey(b"\x01" * 32), name="owner", home=tmp_path)
    publisher_key = nacl.signing.SigningKey(b"\x02" * 32)
    api = RecordingApi()
    api.command(owner.sign("create_stream", SID, {"publisher_key_hex": bytes(publisher_key.verify_key).hex(),
                                                  "subscription_policy": "PRIVATE_ALLOWLIST", "confidential": True}))
    alice, bob = Holder(31, api, tmp_path), Holder(32, api, tmp_path)
    for person in (alice, bob):
        api.command(owner.sign("allowlist_add", SID, {"address": person.address}))
    pub = ConfidentialPublisher(Publisher(api, owner, SID, publisher_key))  # type: ignore[arg-type]
    pub.rekey([alice.recipient(), bob.recipient()])                      # 1
    pub.publish("tick", b"both")                                         # 2
    return api, pub, owner, alice, bob


def test_after_a_removal_the_publish_is_refused_before_anything_is_sent(
        members: tuple[RecordingApi, ConfidentialPublisher, Account, Holder, Holder]) -> None:
    api, pub, owner, alice, bob = members
    api.command(owner.sign("allowlist_remove", SID, {"address": bob.address}))
    sent = len(api.sent)
    with pytest.raises(UnauthorizedError, match=f"{bob.address} left the allowlist") as refused:
        pub.publish("tick", b"secret after bob left")
    assert len(api.sent) == sent                                         # nothing reached the command path
    assert f"watchtower feed {SID} rekey --branch main" in refused.value.message
    assert refused.value.details["removed"] == [bob.address]
    assert api.get_head(SID)["head_sequence"] == 2
    pub.rekey([alice.recipient()])                                       # 3
    pub.publish("tick", b"alice only")                                   # 4
    assert read_all(api, alice.reader())[4] == b"alice only"
    assert isinstance(read_all(api, bob.reader())[4], UnauthorizedError)


@pytest.mark.parametrize("change", ["revoked", "rotated"])
def test_a_members_revoked_or_rotated_key_refuses_the_publish_before_anything_is_sent(
        change: str, members: tuple[RecordingApi, ConfidentialPublisher, Account, Holder, Holder]) -> None:
    api, pub, _owner, alice, bob = members
    if change == "revoked":
        bob.revoke(1)
    else:
        bob.rotate(99)
    sent = len(api.sent)
    with pytest.raises(UnauthorizedError, match=bob.address) as refused:
        pub.publish("tick", b"secret under a stale key")
    assert len(api.sent) == sent
    assert refused.value.details[f"{change}_keys"] == [{"address": bob.address, "account_key_id": 1}]
    assert api.get_head(SID)["head_sequence"] == 2
    with pytest.raises(UnauthorizedError, match=bob.address):            # no new keyload to the old key either
        pub.rekey([alice.recipient(), Recipient(bob.address, 1, bytes(bob.keys[1].public_key))])
    assert len(api.sent) == sent


def test_rekey_on_change_re_keys_for_the_remaining_members_before_it_masks(
        members: tuple[RecordingApi, ConfidentialPublisher, Account, Holder, Holder]) -> None:
    api, pub, owner, alice, bob = members
    carol = Holder(33, api, pub.publisher.owner.home)
    api.command(owner.sign("allowlist_add", SID, {"address": carol.address}))  # not in the keyload: stays out
    api.command(owner.sign("allowlist_remove", SID, {"address": bob.address}))
    alice.rotate(77)                                                     # alice's newest key is id 2 now
    before = pub.keyload_id
    pub.rekey_on_change = True
    pub.publish("tick", b"after the change")                             # 3: keyload, 4: the message
    messages = Subscriber(api, SID).poll(500)
    assert [m.kind for m in messages] == [KEYLOAD_KIND, "tick", KEYLOAD_KIND, "tick"]
    assert pub.keyload_id != before
    assert read_all(api, alice.reader())[4] == b"after the change"
    assert isinstance(read_all(api, bob.reader())[4], UnauthorizedError)
    assert isinstance(read_all(api, carol.reader())[4], UnauthorizedError)
    assert pub.audience().clean
    assert pub.audience().details() == {"removed": [], "revoked_keys": [], "rotated_keys": []}


# --- a read side that folds the allowlist a moment after the writer acknowledges it -------------


class SlowProjection(FakeApi):
    """`FakeApi` whose stream reads show an allowlist change only from the `lag`-th read after the
    writer acknowledged it (a projection that folds it a moment later), deterministically."""

    def __init__(self, lag: int) -> None:
        super().__init__()
        self.lag = lag
        self.reads: dict[str, int] = {}
        self.changes: dict[str, list[tuple[int, list[str]]]] = {}  # (shown from read n, allowlist)

    def command(self, cmd: Command, *, timeout_s: float = 30.0) -> dict[str, Any]:
        result = super().command(cmd, timeout_s=timeout_s)
        state = self.states.get(cmd.stream_id)
        if state is not None:
            self.changes.setdefault(cmd.stream_id, []).append(
                (self.reads.get(cmd.stream_id, 0) + self.lag, sorted(state.allowlist)))
        return result

    def stream_info(self, stream_id: str) -> dict[str, Any]:
        info = super().stream_info(stream_id)
        self.reads[stream_id] = n = self.reads.get(stream_id, 0) + 1
        shown: list[str] = []
        for due, allowlist in self.changes.get(stream_id, []):
            if n > due:
                shown = allowlist
        info["allowlist"] = shown
        return info


def slow_feed(tmp_path: Path, lag: int) -> tuple[SlowProjection, ConfidentialPublisher, Account]:
    owner = Account(nacl.signing.SigningKey(b"\x01" * 32), name="owner", home=tmp_path)
    publisher_key = nacl.signing.SigningKey(b"\x02" * 32)
    api = SlowProjection(lag)
    api.command(owner.sign("create_stream", SID, {"publisher_key_hex": bytes(publisher_key.verify_key).hex(),
                                                  "subscription_policy": "PRIVATE_ALLOWLIST", "confidential": True}))
    return api, ConfidentialPublisher(Publisher(api, owner, SID, publisher_key)), owner


def test_a_member_just_added_is_sealed_to_once_the_read_side_shows_it(tmp_path: Path) -> None:
    api, pub, owner = slow_feed(tmp_path, lag=3)
    alice, bob = Person(11), Person(12)
    api.command(owner.sign("allowlist_add", SID, {"address": alice.address}))  # acknowledged by the writer
    with pytest.raises(UnauthorizedError, match=f"{alice.address} is not on the allowlist"):
        pub.rekey([alice.recipient()])  # the race: the read side has not folded the addition yet
    assert pub.rekey([alice.recipient()], wait_s=5.0).members[0].address == alice.address
    info = pub.allow(bob.address, timeout_s=5.0)  # adds, and returns once the read side shows bob
    assert bob.address in info["allowlist"]
    pub.rekey([alice.recipient(), bob.recipient()])  # no wait needed any more
    pub.publish("tick", b'{"n":1}')
    assert read_all(api, bob.reader())[3] == b'{"n":1}'


def test_waiting_for_the_allowlist_is_bounded_and_names_who_is_missing(tmp_path: Path) -> None:
    api, pub, _owner = slow_feed(tmp_path, lag=10_000)  # the addition never shows
    carol, dave = Person(13), Person(14)
    with pytest.raises(RequestTimeoutError, match=carol.address) as late:
        pub.allow(carol.address, timeout_s=0.2)
    assert "not folded it yet" in late.value.message
    with pytest.raises(UnauthorizedError, match=f"{dave.address} is not on the allowlist"):  # never added
        pub.rekey([dave.recipient()], wait_s=0.2)
    assert api.get_head(SID)["head_sequence"] == 0  # nothing sealed, nothing sent


def test_the_demo_step_waits_for_its_allowlist_changes_on_a_slow_read_side(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from watchtower.cli.demo_private import show_confidential_feed

    owner = Account(nacl.signing.SigningKey(b"\x03" * 32), name="demo-owner", home=tmp_path)
    show_confidential_feed(SlowProjection(lag=3), owner)  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "alice reads: ['before bob left #1', 'before bob left #2', 'after bob left', 'after carol joined'" in out
    assert "carol reads: ['before bob left #1', 'before bob left #2', 'UNAUTHORIZED', 'after carol joined'" in out
