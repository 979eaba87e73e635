"""Completeness proofs of filtered `get_since` pages (docs/page-proofs.md).

A filtered page skips sequences, so a client cannot tell a message that did not match from one the
server withheld. The signature covers ``payload_hash``, not the payload, so every skipped message
can be shown without its payload: its signed header fields, its payload hash and its signature (a
*proof entry*). With one entry for every sequence of the scanned range that the page does not
carry, the client checks:

- the page's messages and the proof's entries together are exactly ``cursor+1 .. next_cursor``:
  no gap, no repeat, each list in ascending order;
- every entry belongs to the stream and its signature verifies (the caller supplies the check, so
  the key comes from a schedule the client trusts, never from the page);
- the filter, evaluated on each entry's headers, does NOT match (nothing matching was withheld),
  and on each page message it DOES match (nothing foreign was slipped in).

Wire form: the answer of ``get_since(..., proof=true)`` carries ``"proof": {"version": 1,
"skipped": [entry, ...]}`` beside ``"messages"``. An entry is `StreamMessage.to_json_dict()`
without ``payload_inline_hex``. The page messages' own signatures are verified by the caller as
for any page (`verify_page_proof` does not repeat that work).

The filter DSL reads only signed header fields (kind, sequence, timestamp_unix_ms, tags.<key>),
never the payload, so a filter is always decidable on an entry. Should the DSL ever gain a field
outside the signed headers, `build_page_proof` refuses such a filter with INVALID_FILTER rather
than produce a proof the client could not check.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from watchtower.protocol.constants import MIN_CIPHERTEXT_ENVELOPE_BYTES
from watchtower.protocol.errors import (
    InvalidFilterError,
    InvalidSignatureError,
    MalformedRecordError,
    WatchtowerError,
)
from watchtower.protocol.signing import message_signing_bytes, verify_signing_bytes_with_schedule_or_raise
from watchtower.protocol.stream.filter_ast import TAG_PREFIX, FilterNode, HeaderField, predicates
from watchtower.protocol.stream.filters import compile_filter, parse_filter
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage

PROOF_VERSION: Final = 1
_PAYLOAD_KEY: Final = "payload_inline_hex"
_SIGNED_HEADER_FIELDS: Final = frozenset(f.value for f in HeaderField)
_PLACEHOLDER_PLAINTEXT: Final = ""
# A CIPHERTEXT message must carry at least nonce+tag bytes; the placeholder only satisfies the
# shape rule, since signing bytes use payload_hash and never the payload.
_PLACEHOLDER_CIPHERTEXT: Final = bytes(MIN_CIPHERTEXT_ENVELOPE_BYTES).hex()


@dataclasses.dataclass(frozen=True, slots=True)
class ProofEntry:
    """A skipped message without its payload: every signed field, the payload hash and the signature.

    `shape` is the message rebuilt with a placeholder payload, so the StreamMessage rules check the
    fields; its payload is NOT the signed one, so never verify `shape` with `verify_message`
    (which re-hashes the payload): use `signing_bytes()`, which takes the carried payload hash.
    """

    shape: StreamMessage

    @property
    def stream_id(self) -> str:
        return self.shape.stream_id

    @property
    def sequence(self) -> int:
        return self.shape.sequence

    @property
    def signing_key_id(self) -> int:
        return self.shape.signing_key_id

    @property
    def publisher_sig(self) -> bytes:
        return self.shape.publisher_sig

    def headers(self) -> dict[str, Any]:
        """The header view the filter DSL evaluates (the same as the full message's)."""
        return self.shape.headers()

    def signing_bytes(self) -> bytes:
        """The canonical signing bytes of the original message (built from the carried payload hash)."""
        return message_signing_bytes(self.shape)

    @classmethod
    def from_message(cls, message: StreamMessage) -> ProofEntry:
        """The entry of a full message (its payload dropped)."""
        return cls.from_json_dict(entry_json(message.to_json_dict()))

    @classmethod
    def from_json_dict(cls, data: object) -> ProofEntry:
        """Parse one wire entry; MALFORMED_RECORD when it is not exactly a message minus its payload."""
        if not isinstance(data, Mapping):
            raise _malformed(f"a proof entry must be an object, got {type(data).__name__}")
        if _PAYLOAD_KEY in data:
            raise _malformed("a proof entry carries no payload_inline_hex; the payload hash stands for it")
        fmt = data.get("payload_format")
        placeholder = _PLACEHOLDER_CIPHERTEXT if fmt == "CIPHERTEXT" else _PLACEHOLDER_PLAINTEXT
        try:
            shape = StreamMessage.from_json_dict({**data, _PAYLOAD_KEY: placeholder})
        except WatchtowerError as err:
            raise _malformed(f"a proof entry is not a valid message header: {err.message}") from None
        return cls(shape)


def entry_json(message_json: Mapping[str, Any]) -> dict[str, Any]:
    """The wire entry of a message given as `StreamMessage.to_json_dict()`: the same minus the payload."""
    return {k: v for k, v in message_json.items() if k != _PAYLOAD_KEY}


def require_provable(node: FilterNode | None) -> None:
    """INVALID_FILTER unless every field `node` reads is a signed header field (so an entry decides it)."""
    if node is None:
        return
    for p in predicates(node):
        if p.field not in _SIGNED_HEADER_FIELDS and not p.field.startswith(TAG_PREFIX):
            raise InvalidFilterError(
                f"the filter reads {p.field!r}, which is not a signed header field, so a page filtered on it "
                "cannot be proven complete without the payloads; filter on kind, sequence, timestamp_unix_ms "
                "or tags.<key>, or ask without proof=true",
                details={"field": p.field},
            )


def build_page_proof(messages_in_range: Iterable[StreamMessage | Mapping[str, Any]],
                     filter: object) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Split the scanned range into the page and its proof: ``(page messages, proof)``.

    `messages_in_range` is every message of ``cursor+1 .. next_cursor`` in order, as StreamMessage
    or its `to_json_dict()` form; `filter` is the JSON filter DSL (None: no filter). Matching
    messages go to the page in full (JSON form), the others to ``proof["skipped"]`` as entries.
    """
    node = parse_filter(filter)
    require_provable(node)
    match = compile_filter(node)
    page: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for item in messages_in_range:
        # The JSON form holds kind, sequence, timestamp_unix_ms and tags under the header names
        # with the same values, so the filter evaluates on it directly.
        data = item.to_json_dict() if isinstance(item, StreamMessage) else item
        if match(data):
            page.append(dict(data))
        else:
            skipped.append(entry_json(data))
    return page, proof_of(skipped)


def proof_of(skipped_entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The wire proof of a page whose skipped messages are `skipped_entries` (`entry_json` forms, in order)."""
    return {"version": PROOF_VERSION, "skipped": skipped_entries}


SignatureCheck = Callable[[ProofEntry], bool]
"""True iff the entry's signature verifies under the key the client trusts for its sequence."""


def schedule_check(schedule: KeySchedule) -> SignatureCheck:
    """A `SignatureCheck` against `schedule`: the key in force at the entry's sequence, its key id too."""

    def check(entry: ProofEntry) -> bool:
        try:
            verify_signing_bytes_with_schedule_or_raise(entry.shape, entry.signing_bytes(), schedule)
        except InvalidSignatureError:
            return False
        return True

    return check


def parse_proof(proof: object) -> list[ProofEntry]:
    """The entries of a wire proof; MALFORMED_RECORD when it is not ``{"version": 1, "skipped": [...]}``."""
    if not isinstance(proof, Mapping):
        raise _malformed("the page has no proof object; ask get_since with proof=true, or drop the proof check")
    version = proof.get("version")
    if type(version) is not int or version != PROOF_VERSION:
        raise _malformed(f"proof version {version!r} is not {PROOF_VERSION}; upgrade the client or the server")
    skipped = proof.get("skipped")
    if not isinstance(skipped, list):
        raise _malformed("the proof has no 'skipped' list")
    return [ProofEntry.from_json_dict(e) for e in skipped]


def verify_page_proof(stream_id: str, cursor: int, next_cursor: int, matched_messages: Sequence[StreamMessage],
                      proof: object, filter: object, verify_sig: SignatureCheck) -> None:
    """Raise unless `proof` shows the page `matched_messages` is the complete, ordered answer.

    MALFORMED_RECORD: a gap, a repeat or a reordering across page and proof, an entry or message of
    another stream, a withheld message that matches `filter`, or a page message that does not.
    INVALID_SIGNATURE: an entry whose signature `verify_sig` refuses. Nothing is delivered on
    either; the page messages' own signatures are the caller's check, as for any page.
    """
    if type(cursor) is not int or type(next_cursor) is not int or next_cursor < cursor:
        raise _bad(stream_id, cursor, f"its next_cursor {next_cursor!r} is before the cursor")
    entries = parse_proof(proof)
    node = parse_filter(filter)
    match = compile_filter(node)
    _check_coverage(stream_id, cursor, next_cursor, matched_messages, entries)
    for msg in matched_messages:
        if not match(msg.headers()):
            raise _bad(stream_id, cursor, f"it carries message #{msg.sequence}, which does not match the filter",
                       sequence=msg.sequence)
    for entry in entries:
        if match(entry.headers()):
            raise _bad(stream_id, cursor, f"the server withheld message #{entry.sequence}, which matches the "
                                          "filter", sequence=entry.sequence)
    for entry in entries:
        if not verify_sig(entry):
            raise InvalidSignatureError(
                f"the proof entry for {stream_id}#{entry.sequence} does not verify under signing key "
                f"{entry.signing_key_id}: the server altered or forged what it skipped. Nothing of the page was "
                "delivered and the cursor did not move; report it to the stream's operator.",
                details={"stream_id": stream_id, "sequence": entry.sequence},
            )


def _check_coverage(stream_id: str, cursor: int, next_cursor: int, matched: Sequence[StreamMessage],
                    entries: Sequence[ProofEntry]) -> None:
    for what, items in (("page", matched), ("proof", entries)):
        previous = cursor
        for item in items:
            if item.stream_id != stream_id:
                raise _bad(stream_id, cursor, f"its {what} carries #{item.sequence} of another stream "
                                              f"{item.stream_id!r}", sequence=item.sequence)
            if item.sequence <= previous or item.sequence > next_cursor:
                raise _bad(stream_id, cursor, f"its {what} carries sequence {item.sequence} after {previous} "
                                              f"(out of order, repeated, or beyond next_cursor {next_cursor})",
                           sequence=item.sequence)
            previous = item.sequence
    # Each list is strictly increasing inside (cursor, next_cursor]; together they cover the range
    # exactly iff no sequence is in both and the counts add up.
    shown = {m.sequence for m in matched}
    for entry in entries:
        if entry.sequence in shown:
            raise _bad(stream_id, cursor, f"sequence {entry.sequence} is both in the page and in the proof",
                       sequence=entry.sequence)
    covered = len(matched) + len(entries)
    if covered != next_cursor - cursor:
        missing = sorted(set(range(cursor + 1, next_cursor + 1)) - shown - {e.sequence for e in entries})
        raise _bad(stream_id, cursor, f"page and proof cover {covered} of the {next_cursor - cursor} sequences up "
                                      f"to {next_cursor}; first missing: {missing[0]}", sequence=missing[0])


def _malformed(why: str) -> MalformedRecordError:
    return MalformedRecordError(f"the page proof is malformed: {why}")


def _bad(stream_id: str, cursor: int, why: str, **details: int) -> MalformedRecordError:
    return MalformedRecordError(
        f"a proven get_since page of stream {stream_id} after cursor {cursor} is not complete: {why}. Nothing of "
        "it was delivered and the cursor did not move; retry, and report it to the stream's operator if it persists",
        details={"stream_id": stream_id, "cursor": cursor, **details},
    )
