"""Regenerate ``keyloads.json``: keyload and masked-payload conformance vectors (docs/private-feeds.md).

    .venv/bin/python vectors/generate_keyloads.py > vectors/keyloads.json

Vector types: ``keyload_check`` (every part of a keyload checked together), ``keyload_open`` (one
member opens its sealed session key), ``reseal_open`` (a member added later opens a past keyload's
key from a reseal, checked against the keyload's key commitment when given), ``masked_payload``
(mask with a given nonce) and ``unmask``.

Everything comes from fixed seeds. A sealed box (libsodium ``crypto_box_seal``) normally draws a
random ephemeral key; here each box is sealed with an ephemeral key derived from the keyload id and
the member's address, in the sealed-box format itself (ephemeral public key ‖ crypto_box with the
nonce BLAKE2b-24(ephemeral public key ‖ recipient public key)), so the output is stable and any
libsodium opens it. ``tests/protocol/test_keyload_vectors.py`` checks the committed file equals it.

The X25519 secret keys in the vectors belong to test-only members derived from public seeds: they
protect nothing and must never be used for a real account.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from typing import Any

import cbor2
import nacl.bindings
import nacl.public
import nacl.signing

from watchtower.protocol import cbor
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.confidential.keyload import Recipient, build_keyload, decode_part
from watchtower.protocol.confidential.reseal import decode_reseal
from watchtower.protocol.confidential.session_key import key_commitment, mask, masked_aad, payload_key

STREAM = "news.private-desk"
SESSION_KEY = hashlib.sha256(b"watchtower test session key 1").digest()
OTHER_SESSION_KEY = hashlib.sha256(b"watchtower test session key 2").digest()
KEYLOAD_ID = bytes.fromhex("00112233445566778899aabbccddeeff")
OTHER_KEYLOAD_ID = bytes.fromhex("ffeeddccbbaa99887766554433221100")
TEST_KEY_NOTE = "test-only key derived from a public seed; never use it for a real account"


@dataclasses.dataclass(frozen=True)
class TestMember:
    """A member with a test-only ed25519 account address and X25519 account key."""

    name: str
    address: str
    account_key_id: int
    x25519_secret: bytes

    @property
    def x25519_public(self) -> bytes:
        return bytes(nacl.public.PrivateKey(self.x25519_secret).public_key)

    def recipient(self) -> Recipient:
        return Recipient(self.address, self.account_key_id, self.x25519_public)


def _member(name: str, account_key_id: int = 1) -> TestMember:
    account = nacl.signing.SigningKey(hashlib.sha256(f"watchtower test account {name}".encode()).digest())
    secret = hashlib.sha256(f"watchtower test x25519 {name}".encode()).digest()
    return TestMember(name, address_from_public_key(bytes(account.verify_key)), account_key_id, secret)


ALICE, BOB, CAROL = _member("alice"), _member("bob", account_key_id=2), _member("carol")
STRANGER = _member("stranger")
SMALL = (ALICE, BOB, CAROL)
#: Enough members for two parts (about 135 fit in one 16,384-byte part).
CROWD = tuple(_member(f"crowd-{i:03d}") for i in range(140))


def _seal(message: bytes, recipient_public: bytes, seed: bytes) -> bytes:
    ephemeral = nacl.public.PrivateKey(hashlib.sha256(b"watchtower test ephemeral" + seed).digest())
    ephemeral_public = bytes(ephemeral.public_key)
    nonce = hashlib.blake2b(ephemeral_public + recipient_public, digest_size=24).digest()
    return ephemeral_public + nacl.bindings.crypto_box(message, nonce, recipient_public, bytes(ephemeral))


def _reseal(part: bytes, session_key: bytes, members: tuple[TestMember, ...]) -> bytes:
    # The part as build_keyload packed it, with every sealed box replaced by a deterministic one
    # of the same length (so the packing is unchanged).
    publics = {m.address: m.x25519_public for m in members}
    doc = cbor2.loads(part)
    for entry in doc["entries"]:
        entry[2] = _seal(session_key, publics["0x" + entry[0].hex()], doc["keyload_id"] + entry[0])
    out = cbor.encode(doc)
    assert len(out) == len(part)
    decode_part(out)
    return out


def keyload_parts(members: tuple[TestMember, ...], *, session_key: bytes = SESSION_KEY,
                  keyload_id: bytes = KEYLOAD_ID, branch: str = "main", stream_id: str = STREAM) -> list[bytes]:
    """The parts of a keyload of `members`, with deterministic sealed boxes."""
    built = build_keyload(stream_id, [m.recipient() for m in members], branch=branch, session_key=session_key,
                          keyload_id=keyload_id)
    return [_reseal(p, session_key, members) for p in built.parts]


def _edit(part: bytes, change: Any) -> bytes:
    doc = cbor2.loads(part)
    change(doc)
    return cbor.encode(doc)


def _entry_of(doc: dict[str, Any], member: TestMember) -> list[Any]:
    return next(e for e in doc["entries"] if "0x" + e[0].hex() == member.address)


def _flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1:]


def _members(members: tuple[TestMember, ...]) -> list[dict[str, Any]]:
    return [{"address": m.address, "account_key_id": m.account_key_id}
            for m in sorted(members, key=lambda m: m.address)]


def _summary(members: tuple[TestMember, ...], parts: list[bytes], *, session_key: bytes = SESSION_KEY,
             keyload_id: bytes = KEYLOAD_ID, branch: str = "main") -> dict[str, Any]:
    head = cbor2.loads(parts[0])
    return {"keyload_id_hex": keyload_id.hex(), "stream_id": STREAM, "branch": branch, "parts": len(parts),
            "members": _members(members), "members_digest_hex": head["members_digest"].hex(),
            "key_commitment_hex": key_commitment(session_key, keyload_id).hex()}


def _check(vid: str, parts: list[bytes], expect: dict[str, Any]) -> dict[str, Any]:
    return {"id": vid, "type": "keyload_check", "input": {"parts_hex": [p.hex() for p in parts]}, "expect": expect}


def _open(vid: str, parts: list[bytes], member: TestMember, expect: dict[str, Any],
          address: str | None = None) -> dict[str, Any]:
    return {"id": vid, "type": "keyload_open",
            "input": {"parts_hex": [p.hex() for p in parts], "address": address or member.address,
                      "test_only_x25519_secret_key_hex": member.x25519_secret.hex(), "note": TEST_KEY_NOTE},
            "expect": expect}


def _opened(part: int, member: TestMember, *, session_key: bytes = SESSION_KEY,
            keyload_id: bytes = KEYLOAD_ID) -> dict[str, Any]:
    return {"keyload_id_hex": keyload_id.hex(), "part": part, "account_key_id": member.account_key_id,
            "session_key_hex": session_key.hex(), "key_commitment_hex": key_commitment(session_key, keyload_id).hex()}


def keyload_vectors() -> list[dict[str, Any]]:
    small = keyload_parts(SMALL)
    crowd = keyload_parts(CROWD)
    assert len(crowd) == 2
    crowd_other = keyload_parts(CROWD, session_key=OTHER_SESSION_KEY, keyload_id=OTHER_KEYLOAD_ID)
    first_of = {i: min(cbor2.loads(p)["entries"], key=lambda e: e[0]) for i, p in enumerate(crowd)}
    by_address = {m.address: m for m in CROWD}
    crowd_second = by_address["0x" + first_of[1][0].hex()]
    bad = {"error": "INVALID_ARGUMENT"}
    out = [
        _check("keyload-three-members", small, _summary(SMALL, small)),
        # Parts may arrive in any order.
        _check("keyload-two-parts-given-last-first", crowd[::-1], _summary(CROWD, crowd)),
        _check("keyload-branch-audit", keyload_parts(SMALL, branch="audit"),
               _summary(SMALL, keyload_parts(SMALL, branch="audit"), branch="audit")),
    ]
    out += [_open(f"keyload-open-{m.name}", small, m, _opened(0, m)) for m in SMALL]
    out += [
        # A member needs only the part holding its address.
        _open("keyload-open-member-of-part-1-from-that-part-alone", crowd[1:], crowd_second, _opened(1, crowd_second)),
        _open("keyload-open-stranger-opens-nothing", small, STRANGER, {"error": "UNAUTHORIZED"}),
        _open("keyload-open-stranger-claiming-a-member-address", small, STRANGER, {"error": "DECRYPTION_FAILED"},
              address=ALICE.address),
        _open("keyload-open-member-key-on-another-member-entry", small, BOB, {"error": "DECRYPTION_FAILED"},
              address=ALICE.address),
    ]

    # Refused keyloads.
    def drop_bob(doc: dict[str, Any]) -> None:
        doc["entries"].remove(_entry_of(doc, BOB))

    omitted = [_edit(small[0], drop_bob)]
    out.append(_check("keyload-omits-a-member-it-claims", omitted, bad))

    def drop_bob_and_count(doc: dict[str, Any]) -> None:
        drop_bob(doc)
        doc["members"] -= 1

    out.append(_check("keyload-omits-a-member-and-lowers-the-count", [_edit(small[0], drop_bob_and_count)], bad))
    out.append(_check("keyload-missing-a-part", crowd[1:], bad))
    out.append(_check("keyload-part-of-another-keyload", [crowd[0], crowd_other[1]], bad))
    out.append(_check("keyload-same-part-twice", [small[0], small[0]], bad))

    def add_stranger(doc: dict[str, Any]) -> None:
        doc["entries"].append([bytes.fromhex(STRANGER.address[2:]), 1, _seal(SESSION_KEY, STRANGER.x25519_public,
                                                                             b"stranger")])
        doc["entries"].sort(key=lambda e: e[0])

    out.append(_check("keyload-adds-a-member-it-does-not-claim", [_edit(small[0], add_stranger)], bad))

    def moved_box(doc: dict[str, Any]) -> None:
        _entry_of(doc, ALICE)[2] = _seal(OTHER_SESSION_KEY, ALICE.x25519_public, b"moved")

    moved = [_edit(small[0], moved_box)]
    # The member set is intact, so the parts check passes; the member's open is what refuses it.
    out.append(_check("keyload-with-a-sealed-box-moved-in-still-lists-its-members", moved, _summary(SMALL, moved)))
    out.append(_open("keyload-open-sealed-box-moved-from-another-keyload", moved, ALICE,
                     {"error": "DECRYPTION_FAILED"}))

    def swapped_boxes(doc: dict[str, Any]) -> None:
        a, b = _entry_of(doc, ALICE), _entry_of(doc, BOB)
        a[2], b[2] = b[2], a[2]

    out.append(_open("keyload-open-sealed-boxes-swapped-between-members", [_edit(small[0], swapped_boxes)], ALICE,
                     {"error": "DECRYPTION_FAILED"}))
    sealed_at = small[0].index(_entry_of(cbor2.loads(small[0]), ALICE)[2])
    out.append(_open("keyload-open-sealed-box-byte-flipped", [_flip(small[0], sealed_at + 40)], ALICE,
                     {"error": "DECRYPTION_FAILED"}))
    commitment_at = small[0].index(key_commitment(SESSION_KEY, KEYLOAD_ID))
    out.append(_open("keyload-open-key-commitment-byte-flipped", [_flip(small[0], commitment_at)], ALICE,
                     {"error": "DECRYPTION_FAILED"}))
    digest_at = small[0].index(cbor2.loads(small[0])["members_digest"])
    out.append(_check("keyload-members-digest-byte-flipped", [_flip(small[0], digest_at)], bad))
    address_at = small[0].index(bytes.fromhex(BOB.address[2:]))
    out.append(_check("keyload-member-address-byte-flipped", [_flip(small[0], address_at + 31)], bad))
    out.append(_check("keyload-cbor-head-byte-flipped", [_flip(small[0], 0)], bad))
    out.append(_check("keyload-truncated", [small[0][:-1]], bad))
    out.append(_check("keyload-trailing-byte", [small[0] + b"\x00"], bad))
    unsorted = cbor2.dumps(dict(reversed(list(cbor2.loads(small[0]).items()))))
    out.append(_check("keyload-non-canonical-map-order", [unsorted], bad))
    # "v": 1 spelled with a one-byte argument (0x18 0x01) instead of the shortest head.
    long_head = small[0].replace(b"\x61v\x01", b"\x61v\x18\x01", 1)
    assert long_head != small[0]
    out.append(_check("keyload-non-canonical-integer-head", [long_head], bad))
    # "v": 1 spelled as the half-precision float 1.0 (0xf9 0x3c00): equal to 1 in many languages.
    float_version = small[0].replace(b"\x61v\x01", b"\x61v\xf9\x3c\x00", 1)
    assert float_version != small[0]
    out.append(_check("keyload-version-as-a-float", [float_version], bad))

    def version_two(doc: dict[str, Any]) -> None:
        doc["v"] = 2

    out.append(_check("keyload-unknown-version", [_edit(small[0], version_two)], bad))

    def unsorted_entries(doc: dict[str, Any]) -> None:
        doc["entries"].reverse()

    out.append(_check("keyload-entries-out-of-address-order", [_edit(small[0], unsorted_entries)], bad))
    out.append(_check("keyload-no-parts", [], bad))
    return out


MASK_BASE: dict[str, Any] = {
    "session_key_hex": SESSION_KEY.hex(), "keyload_id_hex": KEYLOAD_ID.hex(), "stream_id": STREAM, "sequence": 7,
    "branch": "main", "kind": "article", "content_type": "application/json",
}
NONCE = bytes(range(0x40, 0x40 + 24))
PLAINTEXT = b'{"headline":"rates unchanged","desk":"private"}'


def _masked(fields: dict[str, Any], nonce: bytes, plaintext: bytes) -> dict[str, Any]:
    session_key, kid = bytes.fromhex(fields["session_key_hex"]), bytes.fromhex(fields["keyload_id_hex"])
    ctx = {k: fields[k] for k in ("stream_id", "sequence", "branch", "kind", "content_type")}
    return {"payload_key_hex": payload_key(session_key, kid).hex(),
            "aad_hex": masked_aad(keyload_id=kid, **ctx).hex(),
            "masked_hex": mask(session_key, keyload_id=kid, plaintext=plaintext, nonce=nonce, **ctx).hex()}


def mask_vectors() -> list[dict[str, Any]]:
    def masked(vid: str, nonce: bytes = NONCE, plaintext: bytes = PLAINTEXT, **changes: Any) -> dict[str, Any]:
        fields = {**MASK_BASE, **changes}
        return {"id": vid, "type": "masked_payload",
                "input": {**fields, "nonce_hex": nonce.hex(), "plaintext_hex": plaintext.hex()},
                "expect": _masked(fields, nonce, plaintext)}

    out = [
        masked("mask-basic"),
        masked("mask-empty-plaintext", plaintext=b""),
        masked("mask-branch-audit", branch="audit"),
        masked("mask-other-nonce", nonce=bytes(24)),
    ]
    bad = {"error": "INVALID_ARGUMENT"}
    for vid, changes, nonce in (("mask-nonce-too-short", {}, NONCE[:-1]),
                                ("mask-sequence-zero", {"sequence": 0}, NONCE),
                                ("mask-branch-with-capitals", {"branch": "Main"}, NONCE),
                                ("mask-session-key-too-short", {"session_key_hex": SESSION_KEY[:31].hex()}, NONCE)):
        out.append({"id": vid, "type": "masked_payload",
                    "input": {**MASK_BASE, **changes, "nonce_hex": nonce.hex(), "plaintext_hex": PLAINTEXT.hex()},
                    "expect": bad})

    good = bytes.fromhex(_masked(MASK_BASE, NONCE, PLAINTEXT)["masked_hex"])

    def unmask(vid: str, expect: dict[str, Any], data: bytes = good, **changes: Any) -> dict[str, Any]:
        return {"id": vid, "type": "unmask", "input": {**MASK_BASE, **changes, "masked_hex": data.hex()},
                "expect": expect}

    failed = {"error": "DECRYPTION_FAILED"}
    out += [
        unmask("unmask-basic", {"plaintext_hex": PLAINTEXT.hex()}),
        unmask("unmask-another-stream", failed, stream_id="news.public-desk"),
        unmask("unmask-another-sequence", failed, sequence=8),
        unmask("unmask-another-keyload-id", failed, keyload_id_hex=OTHER_KEYLOAD_ID.hex()),
        unmask("unmask-another-branch", failed, branch="audit"),
        unmask("unmask-another-kind", failed, kind="wt.keyload"),
        unmask("unmask-another-content-type", failed, content_type="text/plain"),
        unmask("unmask-another-session-key", failed, session_key_hex=OTHER_SESSION_KEY.hex()),
        unmask("unmask-nonce-byte-flipped", failed, _flip(good, 0)),
        unmask("unmask-ciphertext-byte-flipped", failed, _flip(good, 30)),
        unmask("unmask-tag-byte-flipped", failed, _flip(good, len(good) - 1)),
        unmask("unmask-truncated", failed, good[:-1]),
        unmask("unmask-shorter-than-a-nonce-and-tag", failed, good[:39]),
    ]
    return out


def reseal_bytes(members: tuple[TestMember, ...], *, session_key: bytes = SESSION_KEY,
                 commitment: bytes | None = None, change: Any = None) -> bytes:
    """A reseal of KEYLOAD_ID (branch main) to `members`, with deterministic sealed boxes."""
    doc: dict[str, Any] = {
        "v": 1, "keyload_id": KEYLOAD_ID, "stream_id": STREAM, "branch": "main",
        "key_commitment": commitment if commitment is not None else key_commitment(session_key, KEYLOAD_ID),
        "entries": [[bytes.fromhex(m.address[2:]), m.account_key_id,
                     _seal(session_key, m.x25519_public, b"reseal" + KEYLOAD_ID + bytes.fromhex(m.address[2:]))]
                    for m in sorted(members, key=lambda m: m.address)]}
    if change is not None:
        change(doc)
    return cbor.encode(doc)


def reseal_vectors() -> list[dict[str, Any]]:
    keyload_commitment = key_commitment(SESSION_KEY, KEYLOAD_ID)

    def opened(vid: str, data: bytes, member: TestMember, expect: dict[str, Any], *,
               with_commitment: bool = True) -> dict[str, Any]:
        inp: dict[str, Any] = {"reseal_hex": data.hex(), "address": member.address,
                               "test_only_x25519_secret_key_hex": member.x25519_secret.hex(), "note": TEST_KEY_NOTE}
        if with_commitment:
            inp["keyload_key_commitment_hex"] = keyload_commitment.hex()
        return {"id": vid, "type": "reseal_open", "input": inp, "expect": expect}

    def got(member: TestMember) -> dict[str, Any]:
        return {"keyload_id_hex": KEYLOAD_ID.hex(), "account_key_id": member.account_key_id,
                "session_key_hex": SESSION_KEY.hex(), "key_commitment_hex": keyload_commitment.hex()}

    good = reseal_bytes((CAROL, BOB))
    decode_reseal(good)
    failed, bad = {"error": "DECRYPTION_FAILED"}, {"error": "INVALID_ARGUMENT"}
    entry_at = good.index(bytes.fromhex(CAROL.address[2:]))
    return [
        opened("reseal-open-carol", good, CAROL, got(CAROL)),
        opened("reseal-open-bob-key-id-2", good, BOB, got(BOB)),
        opened("reseal-open-without-the-keyloads-commitment", good, CAROL, got(CAROL), with_commitment=False),
        opened("reseal-open-stranger-opens-nothing", good, STRANGER, {"error": "UNAUTHORIZED"}),
        opened("reseal-open-another-key-than-the-keyload", reseal_bytes((CAROL,), session_key=OTHER_SESSION_KEY),
               CAROL, failed),
        opened("reseal-open-commitment-swapped-in", reseal_bytes((CAROL,), session_key=OTHER_SESSION_KEY,
                                                                 commitment=keyload_commitment), CAROL, failed,
               with_commitment=False),
        opened("reseal-open-sealed-box-byte-flipped", _flip(good, entry_at + 32 + 2 + 40), CAROL, failed),
        opened("reseal-open-version-two", reseal_bytes((CAROL,), change=lambda d: d.update(v=2)), CAROL, bad),
        opened("reseal-open-no-entries", reseal_bytes((CAROL,), change=lambda d: d.update(entries=[])), CAROL, bad),
        opened("reseal-open-not-deterministic-cbor", cbor2.dumps(dict(reversed(list(cbor2.loads(good).items())))),
               CAROL, bad),
    ]


def document() -> dict[str, Any]:
    """The whole vectors file."""
    return {"format": "watchtower-vectors/1", "vectors": keyload_vectors() + reseal_vectors() + mask_vectors()}


if __name__ == "__main__":
    json.dump(document(), sys.stdout, indent=1)
    sys.stdout.write("\n")
