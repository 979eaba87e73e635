"""Keyloads and masked payloads (protocol.confidential.keyload): who can open what, and what a checker refuses.

Pure: real X25519 keys and libsodium sealed boxes, no broker. cbor2 is the independent decoder of
the parts' bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import cbor2
import nacl.public
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watchtower.protocol import cbor
from watchtower.protocol.confidential.keyload import (
    MAX_PART_BYTES,
    Member,
    Recipient,
    build_keyload,
    check_keyload,
    decode_part,
    members_digest,
    open_keyload,
    part_for,
)
from watchtower.protocol.confidential.reseal import build_reseals, decode_reseal, open_reseal
from watchtower.protocol.confidential.session_key import key_commitment, mask, payload_key, require_branch, unmask
from watchtower.protocol.errors import DecryptionFailedError, InvalidArgumentError, UnauthorizedError

SID = "private.prices"


def person(i: int) -> tuple[Recipient, nacl.public.PrivateKey]:
    key = nacl.public.PrivateKey(bytes([i % 251 + 1]) * 31 + bytes([i // 251]))
    return Recipient("0x" + (i.to_bytes(4, "big") * 8).hex(), 1 + i % 3, bytes(key.public_key)), key


def people(n: int) -> list[tuple[Recipient, nacl.public.PrivateKey]]:
    return [person(i) for i in range(n)]


def parts_of(keyload: object) -> list:
    return [decode_part(p) for p in keyload.parts]  # type: ignore[attr-defined]


def test_every_member_opens_the_session_key_and_a_stranger_cannot() -> None:
    group = people(5)
    keyload = build_keyload(SID, [r for r, _ in group])
    (part,) = parts_of(keyload)
    for recipient, private in group:
        assert open_keyload(part, recipient.address, bytes(private)) == keyload.session_key
    stranger, stranger_key = person(99)
    with pytest.raises(UnauthorizedError, match="not a member"):
        open_keyload(part, stranger.address, bytes(stranger_key))
    # A member's address with another member's private key: the sealed box does not open.
    with pytest.raises(DecryptionFailedError):
        open_keyload(part, group[0][0].address, bytes(group[1][1]))


def test_no_part_holds_the_session_key_or_a_key_derived_from_it() -> None:
    keyload = build_keyload(SID, [r for r, _ in people(3)])
    blob = b"".join(keyload.parts)
    assert keyload.session_key not in blob
    # The commitment is published; the payload key is not.
    from watchtower.protocol.confidential.session_key import payload_key
    assert payload_key(keyload.session_key, keyload.keyload_id) not in blob
    assert key_commitment(keyload.session_key, keyload.keyload_id) in blob


def test_a_large_keyload_spans_parts_each_within_one_message_and_checks_whole() -> None:
    group = people(400)
    keyload = build_keyload(SID, [r for r, _ in group], branch="pro")
    assert len(keyload.parts) > 1
    assert all(len(p) <= MAX_PART_BYTES for p in keyload.parts)
    parts = parts_of(keyload)
    summary = check_keyload(list(reversed(parts)))  # any arrival order
    assert [m.address for m in summary.members] == sorted(r.address for r, _ in group)
    assert summary.branch == "pro"
    # A member needs only its own part.
    recipient, private = group[321]
    mine = part_for(parts, recipient.address)
    assert mine is not None
    assert open_keyload(mine, recipient.address, bytes(private)) == keyload.session_key


def test_parts_are_deterministic_cbor_that_an_independent_decoder_reads() -> None:
    group = people(3)
    keyload = build_keyload(SID, [r for r, _ in group], keyload_id=b"\x01" * 16)
    doc = cbor2.loads(keyload.parts[0])
    assert doc["keyload_id"] == b"\x01" * 16
    assert doc["stream_id"] == SID
    assert [("0x" + e[0].hex(), e[1]) for e in doc["entries"]] == [(m.address, m.account_key_id)
                                                                  for m in keyload.members]
    assert cbor.encode(doc) == keyload.parts[0]


def test_a_keyload_that_omits_a_member_while_claiming_it_is_refused() -> None:
    keyload = build_keyload(SID, [r for r, _ in people(4)])
    doc = cbor2.loads(keyload.parts[0])
    doc["entries"] = doc["entries"][:-1]  # the count still says 4, the digest covers 4
    with pytest.raises(InvalidArgumentError, match="claims 4 members and holds 3"):
        check_keyload([decode_part(cbor.encode(doc))])
    doc["members"] = 3  # count fixed: the digest still names the omitted member
    with pytest.raises(InvalidArgumentError, match="members digest"):
        check_keyload([decode_part(cbor.encode(doc))])


def test_a_missing_or_foreign_part_is_refused() -> None:
    group = people(400)
    one = parts_of(build_keyload(SID, [r for r, _ in group]))
    other = parts_of(build_keyload(SID, [r for r, _ in group]))
    with pytest.raises(InvalidArgumentError, match="needs parts"):
        check_keyload(one[:-1])
    with pytest.raises(InvalidArgumentError, match="does not belong"):
        check_keyload([*one[:-1], other[-1]])


def test_a_sealed_key_moved_from_another_keyload_is_refused_by_the_commitment() -> None:
    group = people(2)
    first = build_keyload(SID, [r for r, _ in group], keyload_id=b"\x02" * 16)
    second = build_keyload(SID, [r for r, _ in group], keyload_id=b"\x03" * 16)
    doc = cbor2.loads(second.parts[0])
    doc["entries"][0][2] = cbor2.loads(first.parts[0])["entries"][0][2]
    forged = decode_part(cbor.encode(doc))
    with pytest.raises(DecryptionFailedError, match="forged or altered"):
        open_keyload(forged, group_sorted_first(group)[0].address, bytes(group_sorted_first(group)[1]))


def group_sorted_first(group: list[tuple[Recipient, nacl.public.PrivateKey]]) -> tuple[Recipient,
                                                                                      nacl.public.PrivateKey]:
    return min(group, key=lambda g: g[0].address)


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(v=2),
    lambda d: d.update(extra=1),
    lambda d: d.update(entries=[]),
    lambda d: d.update(part=d["parts"]),
    lambda d: d.update(branch="Upper"),
    lambda d: d.update(members_digest=b"\x00" * 31),
    lambda d: d["entries"].reverse(),
    lambda d: d["entries"][0].__setitem__(2, b"\x00" * 79),
])
def test_hostile_parts_are_refused_with_invalid_argument(mutate: object) -> None:
    doc = cbor2.loads(build_keyload(SID, [r for r, _ in people(3)]).parts[0])
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(InvalidArgumentError):
        decode_part(cbor.encode(doc))


def test_a_part_in_another_cbor_spelling_is_refused() -> None:
    part = build_keyload(SID, [r for r, _ in people(2)]).parts[0]
    doc = cbor2.loads(part)
    respelled = cbor2.dumps(dict(reversed(list(doc.items()))))  # same fields, another key order
    assert respelled != part
    with pytest.raises(InvalidArgumentError, match="deterministic"):
        decode_part(respelled)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_never_crash_the_part_decoder(data: bytes) -> None:
    with contextlib.suppress(InvalidArgumentError):
        decode_part(data)


def test_duplicate_members_and_empty_keyloads_are_refused() -> None:
    r, _ = person(1)
    with pytest.raises(InvalidArgumentError, match="twice"):
        build_keyload(SID, [r, dataclasses.replace(r, account_key_id=2)])
    with pytest.raises(InvalidArgumentError, match="at least one member"):
        build_keyload(SID, [])


# --- masked payloads ----------------------------------------------------------------------------

CONTEXT = {"keyload_id": b"\x05" * 16, "stream_id": SID, "sequence": 7, "branch": "main", "kind": "tick",
           "content_type": "application/json"}


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=2048))
def test_mask_and_unmask_round_trip(plaintext: bytes) -> None:
    key = os.urandom(32)
    assert unmask(key, mask(key, plaintext=plaintext, **CONTEXT), **CONTEXT) == plaintext


@pytest.mark.parametrize(("field", "value"), [("stream_id", "other"), ("sequence", 8), ("keyload_id", b"\x06" * 16),
                                         ("branch", "pro"), ("kind", "trade"), ("content_type", "text/plain")])
def test_a_masked_payload_moved_to_another_context_does_not_open(field: str, value: object) -> None:
    key = os.urandom(32)
    masked = mask(key, plaintext=b'{"p":1}', **CONTEXT)
    with pytest.raises(DecryptionFailedError):
        unmask(key, masked, **{**CONTEXT, field: value})


def test_a_tampered_payload_or_a_stale_key_does_not_open() -> None:
    key = os.urandom(32)
    masked = bytearray(mask(key, plaintext=b'{"p":1}', **CONTEXT))
    masked[-1] ^= 1
    with pytest.raises(DecryptionFailedError):
        unmask(key, bytes(masked), **CONTEXT)
    with pytest.raises(DecryptionFailedError):
        unmask(os.urandom(32), mask(key, plaintext=b"x", **CONTEXT), **CONTEXT)


def test_branch_names() -> None:
    assert require_branch("pro") == "pro"
    for bad in ("", "Pro", "a b", "x" * 33, "ü"):
        with pytest.raises(InvalidArgumentError):
            require_branch(bad)


def test_the_members_digest_depends_on_every_member_and_the_keyload() -> None:
    members = [Member("0x" + "11" * 32, 1), Member("0x" + "22" * 32, 1)]
    base = members_digest(SID, "main", b"\x00" * 16, members)
    assert members_digest(SID, "main", b"\x00" * 16, members[:1]) != base
    assert members_digest(SID, "main", b"\x00" * 16, [members[0], Member(members[1].address, 2)]) != base
    assert members_digest(SID, "pro", b"\x00" * 16, members) != base
    assert members_digest(SID, "main", b"\x01" * 16, members) != base


# --- reseals ------------------------------------------------------------------------------------


def resealed(count: int = 2) -> tuple[object, list[tuple[Recipient, nacl.public.PrivateKey]], tuple[bytes, ...]]:
    group = people(count)
    keyload = build_keyload(SID, [r for r, _ in people(1)], branch="pro")
    return keyload, group, build_reseals(SID, [r for r, _ in group], branch="pro", keyload_id=keyload.keyload_id,
                                         session_key=keyload.session_key)


def test_a_reseal_gives_its_members_the_past_keyloads_key_and_no_one_else() -> None:
    keyload, group, raws = resealed()
    reseal = decode_reseal(raws[0])
    assert (reseal.keyload_id, reseal.stream_id, reseal.branch) == (keyload.keyload_id, SID, "pro")
    assert reseal.key_commitment == key_commitment(keyload.session_key, keyload.keyload_id)
    commitment = decode_part(keyload.parts[0]).key_commitment
    for recipient, private in group:
        assert open_reseal(reseal, recipient.address, bytes(private), commitment=commitment) == keyload.session_key
    stranger, stranger_key = person(400)
    with pytest.raises(UnauthorizedError):
        open_reseal(reseal, stranger.address, bytes(stranger_key))
    with pytest.raises(DecryptionFailedError):
        open_reseal(reseal, group[0][0].address, bytes(group[1][1]))  # another member's key
    for raw in raws:  # no reseal carries the session key or the payload key in clear
        assert keyload.session_key not in raw
        assert payload_key(keyload.session_key, keyload.keyload_id) not in raw


def test_a_reseal_of_another_key_is_refused_against_the_keyloads_commitment() -> None:
    keyload, group, _ = resealed()
    forged = decode_reseal(build_reseals(SID, [r for r, _ in group], branch="pro", keyload_id=keyload.keyload_id,
                                         session_key=os.urandom(32))[0])
    # Alone, a forged reseal is self-consistent; the keyload's own commitment exposes it.
    assert open_reseal(forged, group[0][0].address, bytes(group[0][1])) != keyload.session_key
    with pytest.raises(DecryptionFailedError, match="commits to another key"):
        open_reseal(forged, group[0][0].address, bytes(group[0][1]),
                    commitment=decode_part(keyload.parts[0]).key_commitment)
    doc = cbor2.loads(build_reseals(SID, [r for r, _ in group], branch="pro", keyload_id=keyload.keyload_id,
                                    session_key=keyload.session_key)[0])
    doc["key_commitment"] = bytes(32)  # a commitment swapped in: the opened key does not match it
    with pytest.raises(DecryptionFailedError):
        open_reseal(decode_reseal(cbor.encode(doc)), group[0][0].address, bytes(group[0][1]))


def test_a_reseal_to_many_members_spans_messages_each_within_the_limit() -> None:
    _, _group, raws = resealed(400)
    assert len(raws) > 1
    assert all(len(raw) <= MAX_PART_BYTES for raw in raws)
    assert sum(len(decode_reseal(raw).entries) for raw in raws) == 400


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(v=2),
    lambda d: d.update(extra=1),
    lambda d: d.pop("key_commitment"),
    lambda d: d.update(entries=[]),
    lambda d: d.update(key_commitment=b"\x00" * 31),
    lambda d: d.update(keyload_id=b"\x00" * 15),
    lambda d: d["entries"].reverse(),
])
def test_hostile_reseals_are_refused_with_invalid_argument(mutate: object) -> None:
    _, _, raws = resealed(3)
    doc = cbor2.loads(raws[0])
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(InvalidArgumentError):
        decode_reseal(cbor.encode(doc))
    with pytest.raises(InvalidArgumentError, match="deterministic"):
        decode_reseal(cbor2.dumps(dict(reversed(list(cbor2.loads(raws[0]).items())))))


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_never_crash_the_reseal_decoder(data: bytes) -> None:
    with contextlib.suppress(InvalidArgumentError):
        decode_reseal(data)
