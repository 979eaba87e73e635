"""The writer's rules for confidential private feeds (protocol.confidential.rules), through decide / evolve.

A confidential flag needs PRIVATE_ALLOWLIST; a masked message must name the current, fully
published keyload; after allowlist_remove nothing but a new keyload is accepted, and no keyload
may list a member off the allowlist; a keyload's parts come in order. The state survives a
rebuild from the log and a snapshot. A private feed that is not confidential is unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import nacl.public
import nacl.signing
import pytest

from watchtower.protocol.confidential.keyload import (
    BRANCH_TAG,
    KEYLOAD_ID_TAG,
    KEYLOAD_KIND,
    MAX_BRANCHES,
    Keyload,
    Recipient,
    build_keyload,
)
from watchtower.protocol.confidential.reseal import RESEAL_KIND, build_reseals
from watchtower.protocol.confidential.rules import NO_KEYLOADS, Keyloads, KeyloadState, fold_keyload_part
from watchtower.protocol.confidential.session_key import mask
from watchtower.protocol.config import StreamConfig
from watchtower.protocol.errors import (
    InvalidArgumentError,
    MalformedRecordError,
    UnauthorizedError,
    WatchtowerError,
)
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.actor import Decision, StreamState, decide, evolve, state_digest
from watchtower.protocol.stream.snapshots import decode_streams, encode_streams

SID = "conf-1"
OWNER = nacl.signing.SigningKey(b"\x01" * 32)
PUBLISHER = nacl.signing.SigningKey(b"\x02" * 32)


def addr(key: nacl.signing.SigningKey) -> str:
    return "0x" + bytes(key.verify_key).hex()


class Member:
    def __init__(self, seed: int) -> None:
        self.x25519 = nacl.public.PrivateKey(bytes([seed]) * 32)
        self.address = "0x" + (bytes([seed]) + b"\xaa" * 31).hex()

    def recipient(self) -> Recipient:
        return Recipient(self.address, 1, bytes(self.x25519.public_key))


ALICE, BOB, CAROL = Member(11), Member(12), Member(13)


class Stream:
    def __init__(self, *, confidential: bool = True) -> None:
        self.state = StreamState.initial(SID)
        self.nonce = 0
        self.height = 100
        self.log: list[Any] = []
        body: dict[str, Any] = {"publisher_key_hex": bytes(PUBLISHER.verify_key).hex(),
                                "subscription_policy": "PRIVATE_ALLOWLIST"}
        if confidential:
            body["confidential"] = True
        self.do("create_stream", body)

    def do(self, method: str, body: Mapping[str, Any]) -> Decision:
        self.nonce += 1
        self.height += 1
        decision = decide(self.state, sign_command(OWNER, method, SID, self.nonce, dict(body)),
                          block_height=self.height)
        for event in decision.events:
            self.state = evolve(self.state, event)
            self.log.append(event)
        return decision

    def publish(self, kind: str, payload: bytes, tags: Mapping[str, Any] | None = None) -> Decision:
        msg = sign_message(stream_id=SID, sequence=self.state.head + 1, timestamp_unix_ms=1_700_000_000_000,
                           kind=kind, payload=payload, tags=tags, signing_key=PUBLISHER, signing_key_id=1)
        return self.do("publish", msg.to_json_dict())

    def publish_keyload(self, keyload: Keyload, parts: range | None = None) -> None:
        for i in parts if parts is not None else range(len(keyload.parts)):
            self.publish(KEYLOAD_KIND, keyload.parts[i], {KEYLOAD_ID_TAG: keyload.keyload_id.hex()})

    def publish_masked(self, keyload: Keyload, plaintext: bytes = b"{}", *, name: str | None = None) -> Decision:
        sequence = self.state.head + 1
        masked = mask(keyload.session_key, keyload_id=keyload.keyload_id, stream_id=SID, sequence=sequence,
                      branch="main", kind="tick", content_type="application/json", plaintext=plaintext)
        return self.publish("tick", masked, {KEYLOAD_ID_TAG: name if name is not None else keyload.keyload_id.hex()})

    def allow(self, *members: Member) -> None:
        for m in members:
            self.do("allowlist_add", {"address": m.address})


def keyload_for(*members: Member) -> Keyload:
    return build_keyload(SID, [m.recipient() for m in members])


def big_keyload(count: int) -> tuple[list[Member], Keyload]:
    """A keyload of `count` members: more than one part."""
    members = [Member(20 + i % 200) for i in range(count)]
    for i, m in enumerate(members):  # distinct addresses (keys may repeat: the writer never opens them)
        m.address = "0x" + (b"\x01" + i.to_bytes(2, "big") + b"\xbb" * 29).hex()
    return members, build_keyload(SID, [m.recipient() for m in members])


@pytest.fixture
def stream() -> Stream:
    s = Stream()
    s.allow(ALICE, BOB)
    return s


# --- the flag -----------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["PUBLIC", None])
def test_a_confidential_flag_without_private_allowlist_is_refused(policy: str | None) -> None:
    body: dict[str, Any] = {"publisher_key_hex": bytes(PUBLISHER.verify_key).hex(), "confidential": True}
    if policy is not None:
        body["subscription_policy"] = policy
    with pytest.raises(InvalidArgumentError, match="PRIVATE_ALLOWLIST") as info:
        decide(StreamState.initial(SID), sign_command(OWNER, "create_stream", SID, 1, body), block_height=1)
    assert info.value.code == "INVALID_ARGUMENT"


def test_confidential_must_be_a_boolean_and_is_recorded_in_the_config(stream: Stream) -> None:
    with pytest.raises(InvalidArgumentError, match="true or false"):
        StreamConfig(stream_id=SID, owner=addr(OWNER), publisher_key=bytes(32), confidential="yes",  # type: ignore[arg-type]
                     subscription_policy="PRIVATE_ALLOWLIST")  # type: ignore[arg-type]
    assert stream.state.config is not None
    assert stream.state.config.confidential is True
    assert stream.log[0].body.config.confidential is True


def test_a_confidential_stream_cannot_go_public(stream: Stream) -> None:
    with pytest.raises(InvalidArgumentError, match="confidential"):
        stream.do("set_subscription_policy", {"policy": "PUBLIC"})


# --- masked messages ----------------------------------------------------------------------------


def test_a_message_before_any_keyload_is_refused(stream: Stream) -> None:
    with pytest.raises(UnauthorizedError, match="no keyload yet"):
        stream.publish("tick", b"{}")


def test_a_message_without_the_keyload_tag_is_refused(stream: Stream) -> None:
    stream.publish_keyload(keyload_for(ALICE, BOB))
    with pytest.raises(UnauthorizedError, match=r"wt\.keyload") as info:
        stream.publish("tick", b"{}", {"other": "x"})
    assert info.value.code == "UNAUTHORIZED"
    assert stream.state.head == 1


def test_a_message_under_a_stale_keyload_is_refused_and_the_current_one_accepted(stream: Stream) -> None:
    first, second = keyload_for(ALICE, BOB), keyload_for(ALICE, BOB)
    stream.publish_keyload(first)
    stream.publish_masked(first)
    stream.publish_keyload(second)
    with pytest.raises(UnauthorizedError, match="not the current keyload"):
        stream.publish_masked(first)
    with pytest.raises(UnauthorizedError, match="not the current keyload"):
        stream.publish_masked(second, name="00" * 16)
    assert stream.publish_masked(second).reply["sequence"] == 4


# --- removal and re-key -------------------------------------------------------------------------


def test_after_allowlist_remove_a_message_is_refused_until_a_new_keyload(stream: Stream) -> None:
    before = keyload_for(ALICE, BOB)
    stream.publish_keyload(before)
    stream.publish_masked(before)
    stream.do("allowlist_remove", {"address": BOB.address})
    with pytest.raises(UnauthorizedError, match="left the allowlist"):
        stream.publish_masked(before)
    after = keyload_for(ALICE)
    stream.publish_keyload(after)
    assert stream.publish_masked(after).reply["sequence"] == 4
    assert stream.state.keyloads.of("main").rekey_required is False


def test_a_keyload_naming_the_removed_member_is_refused(stream: Stream) -> None:
    stream.publish_keyload(keyload_for(ALICE, BOB))
    stream.do("allowlist_remove", {"address": BOB.address})
    with pytest.raises(UnauthorizedError, match=BOB.address):
        stream.publish_keyload(keyload_for(ALICE, BOB))
    assert stream.state.keyloads.of("main").rekey_required is True


def test_a_keyload_naming_someone_never_allowlisted_is_refused_but_the_owner_may_be_in_it(stream: Stream) -> None:
    with pytest.raises(UnauthorizedError, match=CAROL.address):
        stream.publish_keyload(keyload_for(ALICE, CAROL))
    owner = Member(14)
    owner.address = addr(OWNER)
    stream.publish_keyload(keyload_for(ALICE, owner))
    assert stream.state.head == 1


def test_removing_an_address_not_on_the_allowlist_requires_no_rekey(stream: Stream) -> None:
    kl = keyload_for(ALICE, BOB)
    stream.publish_keyload(kl)
    stream.do("allowlist_remove", {"address": CAROL.address})
    stream.publish_masked(kl)


# --- parts --------------------------------------------------------------------------------------


def test_a_keyload_of_several_parts_is_in_force_only_once_every_part_is_published() -> None:
    members, kl = big_keyload(300)
    assert len(kl.parts) >= 3
    s = Stream()
    s.allow(*members)
    s.publish_keyload(kl, range(1))
    with pytest.raises(UnauthorizedError, match="part"):
        s.publish_masked(kl)
    with pytest.raises(InvalidArgumentError, match="in order"):
        s.publish_keyload(kl, range(2, 3))
    with pytest.raises(InvalidArgumentError, match="fresh id"):
        s.publish_keyload(kl, range(1))
    s.publish_keyload(kl, range(1, len(kl.parts)))
    s.publish_masked(kl)


def test_a_removal_while_a_keyload_is_being_published_drops_it() -> None:
    members, kl = big_keyload(200)
    s = Stream()
    s.allow(*members)
    s.publish_keyload(kl, range(1))
    s.do("allowlist_remove", {"address": members[-1].address})
    with pytest.raises(InvalidArgumentError, match="in order"):
        s.publish_keyload(kl, range(1, 2))


# --- rebuild, snapshot, and the feeds that are not confidential ---------------------------------


def test_the_keyload_state_is_rebuilt_from_the_log_and_survives_a_snapshot(stream: Stream) -> None:
    kl = keyload_for(ALICE, BOB)
    stream.publish_keyload(kl)
    stream.publish_masked(kl)
    stream.do("allowlist_remove", {"address": BOB.address})
    rebuilt = StreamState.initial(SID)
    for event in stream.log:
        rebuilt = evolve(rebuilt, event)
    assert rebuilt.keyloads == stream.state.keyloads
    assert rebuilt.keyloads.of("main").keyload_id == kl.keyload_id
    assert state_digest(rebuilt) == state_digest(stream.state)
    restored = decode_streams(encode_streams({SID: stream.state}))[SID]
    assert restored.keyloads == stream.state.keyloads
    assert state_digest(restored) == state_digest(stream.state)


def test_a_private_feed_that_is_not_confidential_is_unchanged() -> None:
    s = Stream(confidential=False)
    s.allow(ALICE, BOB)
    s.publish("tick", b"{}")  # no keyload, no tag: accepted as before
    s.do("allowlist_remove", {"address": BOB.address})
    s.publish("tick", b"{}")
    assert s.state.head == 2
    assert s.state.keyloads.is_default
    assert "confidential" not in s.log[0].body.config.to_dict()
    assert "keyload" not in s.log[-1].reply


def test_a_refusal_never_names_a_key(stream: Stream) -> None:
    kl = keyload_for(ALICE, BOB)
    stream.publish_keyload(kl)
    stream.do("allowlist_remove", {"address": BOB.address})
    with pytest.raises(WatchtowerError) as info:
        stream.publish_masked(kl)
    assert kl.session_key.hex() not in str(info.value)


def test_confidential_is_refused_on_a_paid_stream() -> None:
    with pytest.raises(InvalidArgumentError, match="choose one"):
        StreamConfig.from_dict({"stream_id": SID, "owner": addr(OWNER), "publisher_key": bytes(32),
                                "subscription_policy": "PRIVATE_ALLOWLIST", "confidential": True,
                                "access_mode": "PLATFORM_MANAGED",
                                "paid_stream_config": {"fee_per_key_epoch_cby": 1, "protocol_fee_bps": 0,
                                                       "publisher_treasury": addr(OWNER),
                                                       "protocol_treasury": addr(OWNER)}})


def test_a_logged_keyload_part_that_cannot_follow_the_state_is_a_malformed_record(stream: Stream) -> None:
    kl = keyload_for(ALICE, BOB)
    stream.publish_keyload(kl)
    event = stream.log[-1]
    forged = dataclasses.replace(event, reply={**event.reply, "keyload": {"keyload_id": "ab" * 16, "part": 1,
                                                                           "parts": 2}})
    with pytest.raises(MalformedRecordError, match="does not follow"):
        evolve(dataclasses.replace(stream.state, head=0), forged)


@pytest.mark.parametrize("entry", [
    {}, {"keyload_id": 7, "part": 0, "parts": 1}, {"keyload_id": "zz", "part": 0, "parts": 1},
    {"keyload_id": "00" * 16, "part": "0", "parts": 1}, {"keyload_id": "00" * 16, "part": 0},
    {"keyload_id": "00" * 16, "part": 0, "parts": 1, "branch": "Not A Branch"},
    {"keyload_id": "00" * 16, "part": 0, "parts": 1, "branch": 7},
])
def test_a_forged_keyload_reply_in_the_log_is_a_refused_record_not_an_unexpected_error(entry: dict[str, Any]) -> None:
    """Folds quarantine an INVALID_ARGUMENT as a broken rule; a KeyError or a TypeError from a forged
    reply would surface as an unexpected error instead."""
    with pytest.raises(InvalidArgumentError):
        fold_keyload_part(NO_KEYLOADS, {"keyload": entry})


# --- branches -----------------------------------------------------------------------------------


def branch_keyload(branch: str, *members: Member) -> Keyload:
    return build_keyload(SID, [m.recipient() for m in members], branch=branch)


def publish_branch_keyload(stream: Stream, keyload: Keyload, branch: str) -> None:
    for part in keyload.parts:
        stream.publish(KEYLOAD_KIND, part, {KEYLOAD_ID_TAG: keyload.keyload_id.hex(), BRANCH_TAG: branch})


def publish_on_branch(stream: Stream, keyload: Keyload, branch: str, *, tag: str | None = None) -> Decision:
    sequence = stream.state.head + 1
    masked = mask(keyload.session_key, keyload_id=keyload.keyload_id, stream_id=SID, sequence=sequence,
                  branch=branch, kind="tick", content_type="application/json", plaintext=b"{}")
    return stream.publish("tick", masked, {KEYLOAD_ID_TAG: keyload.keyload_id.hex(),
                                           BRANCH_TAG: tag if tag is not None else branch})


def test_each_branch_has_its_own_current_keyload(stream: Stream) -> None:
    stream.allow(CAROL)
    pro, basic = branch_keyload("pro", ALICE), branch_keyload("basic", ALICE, BOB, CAROL)
    publish_branch_keyload(stream, pro, "pro")
    publish_branch_keyload(stream, basic, "basic")
    publish_on_branch(stream, pro, "pro")
    publish_on_branch(stream, basic, "basic")
    with pytest.raises(UnauthorizedError, match=r"not the current keyload .* of branch 'basic'"):
        publish_on_branch(stream, pro, "pro", tag="basic")  # pro's keyload named on basic
    with pytest.raises(UnauthorizedError, match=r"branch 'main' .* has no keyload yet"):
        stream.publish("tick", b"{}", {KEYLOAD_ID_TAG: pro.keyload_id.hex()})  # no branch tag: main
    # A new pro keyload leaves basic's untouched.
    pro2 = branch_keyload("pro", ALICE, CAROL)
    publish_branch_keyload(stream, pro2, "pro")
    publish_on_branch(stream, basic, "basic")
    with pytest.raises(UnauthorizedError, match="not the current keyload"):
        publish_on_branch(stream, pro, "pro")  # stale on its own branch
    publish_on_branch(stream, pro2, "pro")
    assert stream.state.keyloads.of("pro").keyload_id == pro2.keyload_id
    assert stream.state.keyloads.of("basic").keyload_id == basic.keyload_id


def test_a_part_must_name_its_branch_and_another_branch_cannot_start_mid_keyload(stream: Stream) -> None:
    pro = branch_keyload("pro", ALICE)
    with pytest.raises(InvalidArgumentError, match="names its branch"):
        stream.publish(KEYLOAD_KIND, pro.parts[0], {KEYLOAD_ID_TAG: pro.keyload_id.hex()})  # tag says main
    members, big = big_keyload(300)
    stream.allow(*members)
    stream.publish(KEYLOAD_KIND, big.parts[0], {KEYLOAD_ID_TAG: big.keyload_id.hex()})
    with pytest.raises(UnauthorizedError, match="finish it before starting another branch"):
        publish_branch_keyload(stream, pro, "pro")
    with pytest.raises(UnauthorizedError, match="still has"):
        stream.publish(RESEAL_KIND, b"\xa0", {KEYLOAD_ID_TAG: big.keyload_id.hex()})


def test_a_removed_member_makes_every_branch_re_key_and_each_re_keys_on_its_own(stream: Stream) -> None:
    pro, basic = branch_keyload("pro", ALICE), branch_keyload("basic", ALICE, BOB)
    publish_branch_keyload(stream, pro, "pro")
    publish_branch_keyload(stream, basic, "basic")
    stream.do("allowlist_remove", {"address": BOB.address})
    for keyload, branch in ((pro, "pro"), (basic, "basic")):
        with pytest.raises(UnauthorizedError, match=f"remaining members of branch '{branch}'"):
            publish_on_branch(stream, keyload, branch)
    with pytest.raises(UnauthorizedError, match="not on the allowlist"):
        publish_branch_keyload(stream, branch_keyload("basic", ALICE, BOB), "basic")
    basic2 = branch_keyload("basic", ALICE)
    publish_branch_keyload(stream, basic2, "basic")
    publish_on_branch(stream, basic2, "basic")
    with pytest.raises(UnauthorizedError, match="remaining members of branch 'pro'"):
        publish_on_branch(stream, pro, "pro")  # pro has not re-keyed yet


def test_branch_states_survive_a_rebuild_and_a_snapshot_and_main_alone_keeps_its_old_spelling(stream: Stream) -> None:
    main = keyload_for(ALICE)
    stream.publish_keyload(main)
    assert stream.state.keyloads.canonical() == [main.keyload_id, 0, False]  # as written before branches
    publish_branch_keyload(stream, branch_keyload("pro", ALICE), "pro")
    assert set(stream.state.keyloads.canonical()) == {"main", "pro"}
    rebuilt = StreamState.initial(SID)
    for event in stream.log:
        rebuilt = evolve(rebuilt, event)
    assert state_digest(rebuilt) == state_digest(stream.state)
    restored = decode_streams(encode_streams({SID: stream.state}))[SID]
    assert restored.keyloads == stream.state.keyloads
    assert state_digest(restored) == state_digest(stream.state)


def test_a_reply_written_before_branches_folds_into_main() -> None:
    folded = fold_keyload_part(NO_KEYLOADS, {"keyload": {"keyload_id": "07" * 16, "part": 0, "parts": 2}})
    assert folded.of("main") == KeyloadState(b"\x07" * 16, 1, False)
    assert folded.of("pro").is_default


# --- reseals ------------------------------------------------------------------------------------


def publish_reseals(stream: Stream, keyload: Keyload, *members: Member, branch: str = "main") -> list[Decision]:
    return [stream.publish(RESEAL_KIND, raw, {KEYLOAD_ID_TAG: keyload.keyload_id.hex(), BRANCH_TAG: branch})
            for raw in build_reseals(SID, [m.recipient() for m in members], branch=branch,
                                     keyload_id=keyload.keyload_id, session_key=keyload.session_key)]


def test_a_reseal_to_an_allowlisted_member_is_accepted_and_changes_no_keyload_state(stream: Stream) -> None:
    first = keyload_for(ALICE)
    stream.publish_keyload(first)
    stream.publish_masked(first)
    stream.allow(CAROL)
    before = stream.state.keyloads
    publish_reseals(stream, first, CAROL)
    assert stream.state.keyloads == before
    stream.publish_masked(first)  # the current keyload is still the current keyload


def test_a_reseal_to_a_member_off_the_allowlist_or_for_another_stream_is_refused(stream: Stream) -> None:
    first = keyload_for(ALICE, BOB)
    stream.publish_keyload(first)
    with pytest.raises(UnauthorizedError, match="not on the allowlist"):
        publish_reseals(stream, first, CAROL)
    stream.do("allowlist_remove", {"address": BOB.address})
    with pytest.raises(UnauthorizedError, match="not on the allowlist"):
        publish_reseals(stream, first, BOB)
    other = build_reseals("another-stream", [ALICE.recipient()], branch="main", keyload_id=first.keyload_id,
                          session_key=first.session_key)[0]
    with pytest.raises(InvalidArgumentError, match="for stream 'another-stream'"):
        stream.publish(RESEAL_KIND, other, {KEYLOAD_ID_TAG: first.keyload_id.hex()})
    with pytest.raises(InvalidArgumentError, match="reseal"):
        stream.publish(RESEAL_KIND, b"not cbor", {KEYLOAD_ID_TAG: first.keyload_id.hex()})
    valid = build_reseals(SID, [ALICE.recipient()], branch="main", keyload_id=first.keyload_id,
                          session_key=first.session_key)[0]
    with pytest.raises(InvalidArgumentError, match="names its keyload"):
        stream.publish(RESEAL_KIND, valid, {KEYLOAD_ID_TAG: "09" * 16})
    with pytest.raises(InvalidArgumentError, match="names its keyload"):
        stream.publish(RESEAL_KIND, valid, {KEYLOAD_ID_TAG: first.keyload_id.hex(), BRANCH_TAG: "pro"})


def test_a_stream_keys_at_most_max_branches_branches_from_the_writer_the_log_and_a_snapshot(stream: Stream) -> None:
    for i in range(MAX_BRANCHES):
        publish_branch_keyload(stream, branch_keyload(f"b{i}", ALICE), f"b{i}")
    with pytest.raises(UnauthorizedError, match=f"already keys {MAX_BRANCHES} branches"):
        publish_branch_keyload(stream, branch_keyload("one-more", ALICE), "one-more")
    publish_branch_keyload(stream, branch_keyload("b0", ALICE), "b0")  # an existing branch re-keys as ever
    forged = {"keyload": {"keyload_id": "07" * 16, "part": 0, "parts": 1, "branch": "one-more"}}
    with pytest.raises(InvalidArgumentError, match="at most"):
        fold_keyload_part(stream.state.keyloads, forged)
    too_many = {f"b{i}": [b"\x07" * 16, 0, False] for i in range(MAX_BRANCHES + 1)}
    with pytest.raises(InvalidArgumentError, match="at most"):
        Keyloads.from_canonical(too_many)


# --- the publisher's rule: a keyload's audience against who may read now (keyload_audience) -------


def test_audience_drift_names_removed_members_and_revoked_or_superseded_keys() -> None:
    from watchtower.protocol.confidential.audience import audience_drift, require_current_audience, require_sealable
    from watchtower.protocol.confidential.keyload import Member

    owner, alice, bob, carol, dave = ("0x" + c * 64 for c in "01234")
    members = [Member(owner, 1), Member(alice, 1), Member(bob, 2), Member(carol, 1), Member(dave, 5)]
    keys = {owner: {1: "ACTIVE"}, alice: {1: "ACTIVE"}, bob: {1: "ACTIVE", 2: "REVOKED"},
            carol: {1: "ACTIVE", 2: "REVOKED", 3: "ACTIVE"}, dave: {}}
    drift = audience_drift(members, owner=owner, allowlist={alice, bob, carol, dave}, account_keys=keys)
    assert drift.clean is False
    assert (drift.removed, drift.revoked, drift.rotated) == ((), (Member(bob, 2),), (Member(carol, 1),))
    # dave's key 5 was never registered: the publisher's own choice, not judged
    gone = audience_drift(members, owner=owner, allowlist={bob}, account_keys=keys)
    assert gone.removed == tuple(sorted((alice, carol, dave)))           # the owner needs no allowlist entry
    assert audience_drift(members, owner=owner, allowlist=None, account_keys=keys).removed == ()  # not confidential
    clean = audience_drift(members[:2], owner=owner, allowlist={alice}, account_keys=keys)
    assert clean.clean
    require_current_audience(clean, stream_id="s", branch="main", keyload_id=b"\x01" * 16)
    require_sealable(clean, stream_id="s")
    with pytest.raises(UnauthorizedError, match="rekey --branch main") as refused:
        require_current_audience(gone, stream_id="s", branch="main", keyload_id=b"\x01" * 16)
    assert refused.value.details["removed"] == sorted((alice, carol, dave))
    with pytest.raises(UnauthorizedError, match=f"account key 2 of {bob} is revoked"):
        require_sealable(drift, stream_id="s")
