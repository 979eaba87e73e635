"""Key chain proofs: a publisher key schedule that anyone can verify from the owner's address.

A stream's identity starts at its owner's signed create_stream command, and every publisher key
rotation is a rotate_publisher_key command the owner signed. A **key chain proof** is the stream's
key schedule with, on each entry, the command that put that key in force (`KeyScheduleEntry.command`):
the create command on key 1, then each rotate command in order. `verify_key_chain` checks it and
returns the schedule it proves, so a reader trusts a key because the owner signed it, not because
a server (or a record on the log) said so.

What `verify_key_chain` checks (docs/key-chain.md):

- every entry carries a command, and every command's ed25519 signature verifies against its
  caller's address (the address *is* the public key), else INVALID_SIGNATURE;
- entry 1's command is create_stream and every later one rotate_publisher_key, each for this
  stream id, with signing key ids 1, 2, 3, ... (MALFORMED_RECORD otherwise);
- the owner is the caller of the create command (a create body naming another owner is refused
  as decide refuses it); every rotation is signed by that owner, and the owner equals
  `expected_owner` when one is given (INVALID_SIGNATURE: a key the owner did not sign);
- each entry's key is the key its command names: the create body's publisher key for key 1, the
  rotation's ``new_key`` after that (INVALID_SIGNATURE naming the unsigned key);
- nonces of the owner's commands strictly increase (decide's replay rule), and effective sequences
  start at 1 and never decrease (MALFORMED_RECORD);
- where a rotation's body also signs ``signing_key_id`` and/or ``effective_sequence`` (optional
  fields decide enforces; the SDK's `Publisher.rotate_key` signs the id), the entry has exactly
  those (INVALID_SIGNATURE): the owner then fixes the key's place in the chain and its cut-over.

What the proof does NOT bind when the owner did not sign those optional fields, and why that is
acceptable:

- **Effective sequences** are then assigned by the writer (head + 1 when the rotation was decided),
  not signed by the owner. A server that lies about them can only move a cut-over between two keys
  the owner signed. Every message signature covers its own ``signing_key_id``, and a reader accepts a
  message only under the entry with that id, so a moved cut-over can make genuine messages fail to
  verify (a visible denial of service), never make a message verify under a key the owner did not
  put in force. The residual risk is an owner's *retired* key that leaked: a dishonest server could
  move the rotation's cut-over later and present messages signed by the old key at sequences it
  should no longer cover. The published sequences themselves are signed, so such a server must
  also withhold the owner's genuine messages at those sequences.
- **Key ids** are then positions in the served list: a server that drops a rotation from the middle
  and renumbers the rest serves a chain that verifies; messages signed under the renumbered keys
  name ids that no longer match and fail to verify (a denial, with the same leaked-retired-key
  caveat). A rotation that signed its ``signing_key_id`` makes such a cut fail verification.
- **Completeness at the tail**: a server can withhold the newest rotations (serve a prefix of the
  chain). A reader then refuses messages signed by the newer keys (their signing_key_id is not in
  the proven schedule) rather than accepting anything forged; `Subscriber.key_schedule` refetches
  once before giving up.
- The create command's other configuration fields are checked by decide when it is written; the
  proof is about keys and ownership only.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from watchtower.protocol.addresses import require_address
from watchtower.protocol.commands import CreateStreamKeys, RotatePublisherKey, given, peek_body
from watchtower.protocol.constants import ED25519_PUBLIC_KEY_BYTES, FIRST_SIGNING_KEY_ID
from watchtower.protocol.errors import (
    InvalidArgumentError,
    InvalidSignatureError,
    MalformedRecordError,
    WatchtowerError,
)
from watchtower.protocol.signed_command import Command, Method, verify_command
from watchtower.protocol.stream.key_schedule import KeySchedule, KeyScheduleEntry, canonical_command_json

__all__ = [
    "KeyChainProof",
    "chain_entries",
    "command_json",
    "created_publisher_key",
    "key_chain_from_json",
    "key_chain_owner",
    "parse_chain_command",
    "verify_creation_command",
    "verify_key_chain",
    "verify_rotation_command",
]

KeyChainProof = Sequence[KeyScheduleEntry]
"""The entries of a key schedule, in id order, each carrying the command that put its key in force."""

_FIX: Final = "refetch the key history; if it persists, do not trust this stream's keys and report it to its owner"


def command_json(cmd: Command) -> str:
    """The canonical JSON text of `cmd` (`Command.to_dict`, keys sorted, no spaces): the form
    events and key schedule entries carry."""
    return canonical_command_json(cmd.to_dict())


def parse_chain_command(text: str | None, what: str) -> Command:
    """The signed command carried as canonical JSON `text`, its signature checked.

    INVALID_SIGNATURE when there is none or its signature does not verify; MALFORMED_RECORD when it
    is not a command at all. `what` names the entry in the messages ("key 2 (0xab…)").
    """
    if text is None:
        raise InvalidSignatureError(
            f"{what} carries no owner-signed command, so nothing proves the owner put it in force; {_FIX}"
        )
    try:
        cmd = Command.from_dict(json.loads(text))
    except (ValueError, TypeError):
        raise MalformedRecordError(f"{what}: its command is not JSON; {_FIX}") from None
    except WatchtowerError as exc:
        raise MalformedRecordError(f"{what}: its command is malformed ({exc.message}); {_FIX}") from None
    try:
        verify_command(cmd)
    except WatchtowerError:
        raise InvalidSignatureError(
            f"{what}: the signature of its {cmd.method} command does not verify against its caller "
            f"{cmd.caller}; it was altered or forged. {_FIX}"
        ) from None
    return cmd


def created_publisher_key(cmd: Command) -> bytes:
    """The first publisher key a create_stream command's body names (MALFORMED_RECORD if none)."""
    body = peek_body(cmd, CreateStreamKeys)
    raw: Any = body.publisher_key
    if raw is None and isinstance(body.publisher_key_hex, str):
        try:
            raw = bytes.fromhex(body.publisher_key_hex)
        except ValueError:
            raw = None
    if not isinstance(raw, bytes) or len(raw) != ED25519_PUBLIC_KEY_BYTES:
        raise MalformedRecordError("the create_stream command names no 32-byte publisher key")
    return raw


def verify_creation_command(stream_id: str, text: str | None, *, publisher_key: bytes, owner: str) -> Command:
    """Check that `text` is a create_stream for `stream_id`, signed by `owner`, naming `publisher_key`.

    What the fold checks on a StreamCreated event (and `verify_key_chain` on key 1).
    """
    what = f"key {FIRST_SIGNING_KEY_ID} (0x{publisher_key.hex()}) of stream {stream_id!r}"
    cmd = parse_chain_command(text, what)
    _require_method(cmd, Method.CREATE_STREAM, stream_id, what)
    declared = given(peek_body(cmd, CreateStreamKeys).owner, cmd.caller)
    if declared != cmd.caller:
        raise MalformedRecordError(f"{what}: the create_stream command names owner {declared!r}, not its signer")
    if cmd.caller != owner:
        raise InvalidSignatureError(
            f"{what}: the stream's owner is {owner} but its create_stream was signed by {cmd.caller}; {_FIX}"
        )
    if created_publisher_key(cmd) != publisher_key:
        raise InvalidSignatureError(
            f"{what} is not the publisher key the owner's create_stream names "
            f"(0x{created_publisher_key(cmd).hex()}); {_FIX}"
        )
    return cmd


def verify_rotation_command(
    stream_id: str, text: str | None, *, new_key: bytes, owner: str, signing_key_id: int, effective_sequence: int
) -> Command:
    """Check that `text` is a rotate_publisher_key for `stream_id`, signed by `owner`, naming `new_key`,
    and, where the owner signed them, this `signing_key_id` and `effective_sequence`.

    What the fold checks on a PublisherKeyRotated event (and `verify_key_chain` on keys 2, 3, ...).
    """
    what = f"key {signing_key_id} (0x{bytes(new_key).hex()}) of stream {stream_id!r}"
    cmd = parse_chain_command(text, what)
    _require_method(cmd, Method.ROTATE_PUBLISHER_KEY, stream_id, what)
    if cmd.caller != owner:
        raise InvalidSignatureError(
            f"{what} was put in force by a rotation signed by {cmd.caller}, not by the owner {owner}: "
            f"a forged rotation. {_FIX}"
        )
    rotation = peek_body(cmd, RotatePublisherKey)
    if rotation.new_key != new_key:
        raise InvalidSignatureError(f"{what} is not the key the owner's rotation names; a forged key. {_FIX}")
    for field, served, signed in (("signing_key_id", signing_key_id, rotation.signing_key_id),
                                  ("effective_sequence", effective_sequence, rotation.effective_sequence)):
        if signed is not None and (type(signed) is not int or signed != served):
            raise InvalidSignatureError(
                f"{what}: the owner signed {field} {signed!r} for it, but it is served with {served}; "
                f"the chain was reordered, cut or moved. {_FIX}"
            )
    return cmd


def _require_method(cmd: Command, method: Method, stream_id: str, what: str) -> None:
    if cmd.method != method:
        raise MalformedRecordError(f"{what}: its command is {cmd.method}, not {method}; {_FIX}")
    if cmd.stream_id != stream_id:
        raise MalformedRecordError(f"{what}: its command is for stream {cmd.stream_id!r}; {_FIX}")


def verify_key_chain(
    stream_id: str, proof: KeyChainProof | KeySchedule, expected_owner: str | None = None
) -> KeySchedule:
    """The key schedule `proof` proves for `stream_id`, or the spec error saying why not.

    See the module docstring for every check and for what the proof does not bind. Raises
    INVALID_SIGNATURE (a key the owner did not sign, or another owner than `expected_owner`) or
    MALFORMED_RECORD (a proof of the wrong shape); never anything else.
    """
    entries = tuple(proof.entries if isinstance(proof, KeySchedule) else proof)
    if not entries:
        raise MalformedRecordError(f"the key chain of stream {stream_id!r} is empty; {_FIX}")
    if expected_owner is not None:
        try:
            require_address(expected_owner, "expected_owner")
        except InvalidArgumentError as exc:
            raise MalformedRecordError(exc.message) from None
    try:
        # The schedule's own shape rules (entry types, ids 1, 2, 3, ..., key 1 from sequence 1,
        # cut-overs never moving back) are the chain's too; the signatures are checked below.
        KeySchedule(entries)
    except InvalidArgumentError as exc:
        raise MalformedRecordError(f"the key chain of stream {stream_id!r} is not a key schedule: "
                                   f"{exc.message}; {_FIX}") from None
    first = entries[0]
    create = parse_chain_command(first.command, f"key 1 (0x{first.public_key.hex()}) of stream {stream_id!r}")
    owner = create.caller
    if expected_owner is not None and owner != expected_owner:
        raise InvalidSignatureError(
            f"stream {stream_id!r} was created by {owner}, not by the expected owner {expected_owner}; "
            f"check the stream id, or that you expect the right owner"
        )
    verify_creation_command(stream_id, first.command, publisher_key=first.public_key, owner=owner)
    last_nonce = create.nonce
    for before, entry in itertools.pairwise(entries):
        cmd = verify_rotation_command(
            stream_id,
            entry.command,
            new_key=entry.public_key,
            owner=owner,
            signing_key_id=entry.signing_key_id,
            effective_sequence=entry.effective_sequence,
        )
        if cmd.nonce <= last_nonce:
            raise MalformedRecordError(
                f"the rotation to key {entry.signing_key_id} of stream {stream_id!r} has nonce {cmd.nonce}, "
                f"not above the owner's previous command's {last_nonce}: the chain is out of order. {_FIX}"
            )
        last_nonce = cmd.nonce
        if entry.effective_sequence < before.effective_sequence:
            raise MalformedRecordError(
                f"key {entry.signing_key_id} of stream {stream_id!r} becomes effective at "
                f"{entry.effective_sequence}, before key {before.signing_key_id} ({before.effective_sequence}); {_FIX}"
            )
    try:
        return KeySchedule(entries)
    except InvalidArgumentError as exc:  # unreachable after the checks above; kept as a spec error
        raise MalformedRecordError(exc.message) from None


def key_chain_owner(proof: KeyChainProof | KeySchedule) -> str:
    """The owner a key chain names: the signer of its create command (call after `verify_key_chain`)."""
    entries = proof.entries if isinstance(proof, KeySchedule) else proof
    if not entries:
        raise MalformedRecordError("an empty key chain names no owner")
    return parse_chain_command(entries[0].command, "key 1").caller


def key_chain_from_json(data: object) -> tuple[KeyScheduleEntry, ...]:
    """A proof from its JSON form: ``{"entries": [...]}`` or the list of entries (`KeyScheduleEntry.to_dict`).

    MALFORMED_RECORD for anything that is not a list of entries; the commands are checked by
    `verify_key_chain`, not here.
    """
    raw = data.get("entries") if isinstance(data, Mapping) else data
    if not isinstance(raw, list):
        raise MalformedRecordError("a key chain is a list of key schedule entries (or {\"entries\": [...]})")
    return tuple(_entry(item, index) for index, item in enumerate(raw))


def _entry(item: object, index: int) -> KeyScheduleEntry:
    if not isinstance(item, Mapping):
        raise MalformedRecordError(f"key chain entry {index + 1} is not an object")
    try:
        return KeyScheduleEntry.from_dict(item)
    except WatchtowerError as exc:
        raise MalformedRecordError(f"key chain entry {index + 1}: {exc.message}") from None


def chain_entries(commands: Iterable[tuple[Command, int]]) -> tuple[KeyScheduleEntry, ...]:
    """Entries from (command, effective_sequence) pairs in order: the create first, then rotations.

    Builds a proof without a stream (tests and vectors); the keys come from the commands.
    """
    out: list[KeyScheduleEntry] = []
    for index, (cmd, effective) in enumerate(commands):
        key = created_publisher_key(cmd) if index == 0 else peek_body(cmd, RotatePublisherKey).new_key
        if not isinstance(key, bytes):
            raise MalformedRecordError(f"command {index + 1} names no publisher key")
        out.append(KeyScheduleEntry(FIRST_SIGNING_KEY_ID + index, key, effective, command_json(cmd)))
    return tuple(out)
