"""Completeness proofs of filtered get_since pages (`watchtower.protocol.page.proof`).

A proof must pass for every honest page and fail for every page a server could have tampered
with: a matching message withheld, two messages swapped, a skipped entry's signature altered, a
skipped entry that actually matches, a gap, an entry of another stream.
"""

from __future__ import annotations

from typing import Any

import nacl.signing
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from protocol_strategies import PROPERTY

from watchtower.protocol.errors import InvalidFilterError, InvalidSignatureError, MalformedRecordError
from watchtower.protocol.page.proof import (
    ProofEntry,
    build_page_proof,
    require_provable,
    schedule_check,
    verify_page_proof,
)
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.filter_ast import Op, Predicate
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage

SID = "s-proof"
OLD_KEY = nacl.signing.SigningKey(bytes([7]) * 32)
NEW_KEY = nacl.signing.SigningKey(bytes([8]) * 32)
ROTATED_AFTER = 10  # sequences 1..10 signed with OLD_KEY (key 1), 11.. with NEW_KEY (key 2)
SCHEDULE = KeySchedule.initial(bytes(OLD_KEY.verify_key)).rotate(bytes(NEW_KEY.verify_key),
                                                                  head_sequence=ROTATED_AFTER)
CHECK = schedule_check(SCHEDULE)
BTC = {"field": "tags.symbol", "op": "eq", "value": "BTC"}
FILTERS = [
    BTC,
    {"field": "kind", "op": "eq", "value": "trade"},
    {"all": [{"field": "kind", "op": "in", "value": ["trade", "quote"]}, {"field": "tags.size", "op": "gte",
                                                                          "value": 5}]},
    {"not": {"field": "tags.symbol", "op": "exists", "value": True}},
    {"any": [{"field": "sequence", "op": "lte", "value": 3}, BTC]},
]


def signed(sequence: int, kind: str = "trade", tags: dict[str, Any] | None = None, *, ciphertext: bool = False,
           stream_id: str = SID) -> StreamMessage:
    key, key_id = (OLD_KEY, 1) if sequence <= ROTATED_AFTER else (NEW_KEY, 2)
    return sign_message(stream_id=stream_id, sequence=sequence, timestamp_unix_ms=1_700_000_000_000 + sequence,
                        kind=kind, payload=bytes(48) + sequence.to_bytes(4, "big"), signing_key=key,
                        tags=tags, payload_format="CIPHERTEXT" if ciphertext else "PLAINTEXT",
                        key_epoch=3 if ciphertext else None, signing_key_id=key_id)


def stream(n: int) -> list[StreamMessage]:
    """Sequences 1..n: BTC at every third, the rest ETH; sizes vary; every fourth is encrypted."""
    return [signed(s, "trade" if s % 2 else "quote", {"symbol": "BTC" if s % 3 == 0 else "ETH", "size": s % 7},
                   ciphertext=s % 4 == 0) for s in range(1, n + 1)]


def proven(messages: list[StreamMessage], flt: object) -> tuple[list[StreamMessage], dict[str, Any]]:
    page, proof = build_page_proof(messages, flt)
    return [StreamMessage.from_json_dict(m) for m in page], proof


def verify(page: list[StreamMessage], proof: object, flt: object = BTC, *, cursor: int = 0,
           next_cursor: int = 12) -> None:
    verify_page_proof(SID, cursor, next_cursor, page, proof, flt, CHECK)


def test_an_honest_filtered_page_with_its_proof_verifies() -> None:
    page, proof = proven(stream(12), BTC)
    assert [m.sequence for m in page] == [3, 6, 9, 12]
    assert [e["sequence"] for e in proof["skipped"]] == [1, 2, 4, 5, 7, 8, 10, 11]
    assert all("payload_inline_hex" not in e for e in proof["skipped"])
    verify(page, proof)


def test_a_page_with_a_matching_message_removed_fails() -> None:
    page, proof = proven(stream(12), BTC)
    with pytest.raises(MalformedRecordError, match="first missing: 6"):
        verify([m for m in page if m.sequence != 6], proof)


def test_a_page_with_two_messages_swapped_fails() -> None:
    page, proof = proven(stream(12), BTC)
    page[1], page[2] = page[2], page[1]
    with pytest.raises(MalformedRecordError, match="out of order"):
        verify(page, proof)


def test_two_skipped_entries_swapped_fail() -> None:
    page, proof = proven(stream(12), BTC)
    skipped = proof["skipped"]
    skipped[0], skipped[1] = skipped[1], skipped[0]
    with pytest.raises(MalformedRecordError, match="out of order"):
        verify(page, proof)


def test_a_skipped_entry_whose_signature_was_altered_fails() -> None:
    page, proof = proven(stream(12), BTC)
    sig = bytearray.fromhex(proof["skipped"][3]["publisher_sig_hex"])
    sig[5] ^= 1
    proof["skipped"][3]["publisher_sig_hex"] = sig.hex()
    with pytest.raises(InvalidSignatureError, match=f"{SID}#5"):
        verify(page, proof)


def test_a_matching_message_relabelled_as_not_matching_fails_its_signature() -> None:
    # The server withholds #6 (BTC) and shows it in the proof with symbol ETH: the filter is then
    # satisfied, but the signature covers the tags.
    messages = stream(12)
    page, proof = proven(messages, BTC)
    forged = {**messages[5].to_json_dict(), "tags": {"symbol": "ETH", "size": 6.0}}
    del forged["payload_inline_hex"]
    proof["skipped"].insert(4, forged)
    with pytest.raises(InvalidSignatureError, match=f"{SID}#6"):
        verify([m for m in page if m.sequence != 6], proof)


def test_a_skipped_entry_that_actually_matches_fails() -> None:
    messages = stream(12)
    page, proof = proven(messages, BTC)
    withheld = ProofEntry.from_message(messages[5]).shape.to_json_dict()
    del withheld["payload_inline_hex"]
    proof["skipped"].insert(4, withheld)
    with pytest.raises(MalformedRecordError, match="withheld message #6, which matches"):
        verify([m for m in page if m.sequence != 6], proof)


def test_a_page_message_that_does_not_match_fails() -> None:
    messages = stream(12)
    page, proof = proven(messages, BTC)
    proof["skipped"] = [e for e in proof["skipped"] if e["sequence"] != 4]
    page.insert(1, messages[3])
    with pytest.raises(MalformedRecordError, match="#4, which does not match"):
        verify(page, proof)


def test_a_proof_that_stops_short_of_next_cursor_fails() -> None:
    page, proof = proven(stream(12), BTC)
    with pytest.raises(MalformedRecordError, match="first missing: 13"):
        verify(page, proof, next_cursor=13)


def test_a_repeated_sequence_in_page_and_proof_fails() -> None:
    messages = stream(12)
    page, proof = proven(messages, BTC)
    duplicate = messages[2].to_json_dict()
    del duplicate["payload_inline_hex"]
    proof["skipped"].insert(2, duplicate)
    proof["skipped"].remove(next(e for e in proof["skipped"] if e["sequence"] == 11))  # the count adds up
    with pytest.raises(MalformedRecordError, match="both in the page and in the proof"):
        verify(page, proof)


def test_an_entry_of_another_stream_fails() -> None:
    page, proof = proven(stream(12), BTC)
    other = signed(1, tags={"symbol": "ETH"}, stream_id="s-other").to_json_dict()
    del other["payload_inline_hex"]
    proof["skipped"][0] = other
    with pytest.raises(MalformedRecordError, match="another stream"):
        verify(page, proof)


def test_an_entry_signed_with_the_wrong_key_for_its_sequence_fails() -> None:
    page, proof = proven(stream(12), BTC)
    # #11 is in force under key 2; the same fields signed with the old key claim key 1.
    old = sign_message(stream_id=SID, sequence=11, timestamp_unix_ms=1, kind="trade", payload=b"x",
                       signing_key=OLD_KEY, tags={"symbol": "ETH"}).to_json_dict()
    del old["payload_inline_hex"]
    proof["skipped"][-1] = old
    with pytest.raises(InvalidSignatureError, match=f"{SID}#11"):
        verify(page, proof)


@pytest.mark.parametrize("proof", [None, [], {"skipped": []}, {"version": 2, "skipped": []},
                                   {"version": 1, "skipped": [{"sequence": 1}]},
                                   {"version": 1, "skipped": "x"}])
def test_a_malformed_proof_is_malformed_record(proof: object) -> None:
    with pytest.raises(MalformedRecordError):
        verify([], proof, next_cursor=1)


def test_an_entry_that_still_carries_its_payload_is_refused() -> None:
    messages = stream(2)
    proof = {"version": 1, "skipped": [messages[0].to_json_dict()]}
    with pytest.raises(MalformedRecordError, match="no payload_inline_hex"):
        verify([], proof, flt={"field": "kind", "op": "eq", "value": "none"}, next_cursor=1)


def test_an_empty_range_has_an_empty_proof() -> None:
    page, proof = proven([], BTC)
    assert (page, proof["skipped"]) == ([], [])
    verify(page, proof, cursor=5, next_cursor=5)


def test_a_filter_on_a_field_outside_the_signed_headers_cannot_be_proven() -> None:
    with pytest.raises(InvalidFilterError, match="not a signed header field"):
        require_provable(Predicate("payload", Op.EQ, "x"))
    require_provable(Predicate("tags.symbol", Op.EQ, "x"))


# --- properties ----------------------------------------------------------------------------------

STREAM = stream(30)


@st.composite
def pages(draw: st.DrawFn) -> tuple[int, int, object, list[StreamMessage], dict[str, Any]]:
    cursor = draw(st.integers(min_value=0, max_value=29))
    next_cursor = draw(st.integers(min_value=cursor, max_value=30))
    flt = draw(st.sampled_from([None, *FILTERS]))
    page, proof = proven(STREAM[cursor:next_cursor], flt)
    return cursor, next_cursor, flt, page, proof


@PROPERTY
@given(pages())
def test_every_honest_page_and_proof_verifies(case: tuple[int, int, object, list[StreamMessage], dict]) -> None:
    cursor, next_cursor, flt, page, proof = case
    verify(page, proof, flt, cursor=cursor, next_cursor=next_cursor)


@PROPERTY
@given(pages(), st.data())
def test_removing_any_matching_message_fails(case: tuple[int, int, object, list[StreamMessage], dict],
                                             data: st.DataObject) -> None:
    cursor, next_cursor, flt, page, proof = case
    assume(page)
    drop = data.draw(st.integers(min_value=0, max_value=len(page) - 1))
    with pytest.raises(MalformedRecordError):
        verify(page[:drop] + page[drop + 1:], proof, flt, cursor=cursor, next_cursor=next_cursor)


@PROPERTY
@given(pages(), st.data())
def test_hiding_any_matching_message_in_the_proof_fails(case: tuple[int, int, object, list[StreamMessage], dict],
                                                        data: st.DataObject) -> None:
    cursor, next_cursor, flt, page, proof = case
    assume(page)
    hidden = page.pop(data.draw(st.integers(min_value=0, max_value=len(page) - 1)))
    entry = hidden.to_json_dict()
    del entry["payload_inline_hex"]
    proof["skipped"] = sorted([*proof["skipped"], entry], key=lambda e: e["sequence"])
    with pytest.raises(MalformedRecordError, match="withheld"):
        verify(page, proof, flt, cursor=cursor, next_cursor=next_cursor)


@PROPERTY
@given(pages(), st.data())
def test_swapping_any_two_items_fails(case: tuple[int, int, object, list[StreamMessage], dict],
                                      data: st.DataObject) -> None:
    cursor, next_cursor, flt, page, proof = case
    items: list[Any] = data.draw(st.sampled_from([page, proof["skipped"]]))
    assume(len(items) >= 2)
    i = data.draw(st.integers(min_value=0, max_value=len(items) - 2))
    j = data.draw(st.integers(min_value=i + 1, max_value=len(items) - 1))
    items[i], items[j] = items[j], items[i]
    with pytest.raises(MalformedRecordError):
        verify(page, proof, flt, cursor=cursor, next_cursor=next_cursor)


@PROPERTY
@given(pages(), st.data())
def test_altering_any_signed_field_of_a_skipped_entry_fails(
        case: tuple[int, int, object, list[StreamMessage], dict], data: st.DataObject) -> None:
    cursor, next_cursor, flt, page, proof = case
    assume(proof["skipped"])
    entry = data.draw(st.sampled_from(proof["skipped"]))
    field = data.draw(st.sampled_from(["publisher_sig_hex", "payload_hash_hex", "timestamp_unix_ms",
                                       "content_type"]))
    if field.endswith("_hex"):
        raw = bytearray.fromhex(entry[field])
        raw[data.draw(st.integers(min_value=0, max_value=len(raw) - 1))] ^= 1 << data.draw(st.integers(0, 7))
        entry[field] = raw.hex()
    elif field == "timestamp_unix_ms":
        entry[field] += 1
    else:
        entry[field] = "text/plain"
    with pytest.raises(InvalidSignatureError):
        verify(page, proof, flt, cursor=cursor, next_cursor=next_cursor)
