"""Key chain proofs: a key schedule verified from the owner's address (protocol/stream/key_chain.py)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import nacl.signing
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.errors import InvalidSignatureError, MalformedRecordError, WatchtowerError
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.stream.actor import Event, StreamState, decide, evolve
from watchtower.protocol.stream.key_chain import (
    chain_entries,
    command_json,
    key_chain_from_json,
    key_chain_owner,
    verify_key_chain,
)
from watchtower.protocol.stream.key_schedule import KeySchedule, KeyScheduleEntry

SID = "chain-1"
OWNER = nacl.signing.SigningKey(b"\x01" * 32)
ATTACKER = nacl.signing.SigningKey(b"\x66" * 32)
KEYS = [nacl.signing.SigningKey(bytes([10 + i]) * 32) for i in range(6)]


def pub(key: nacl.signing.SigningKey) -> bytes:
    return bytes(key.verify_key)


def create(signer: nacl.signing.SigningKey = OWNER, stream_id: str = SID, nonce: int = 1) -> Command:
    return sign_command(signer, "create_stream", stream_id, nonce, {"publisher_key_hex": pub(KEYS[0]).hex()})


def rotate(new: nacl.signing.SigningKey, nonce: int, signer: nacl.signing.SigningKey = OWNER,
           stream_id: str = SID) -> Command:
    return sign_command(signer, "rotate_publisher_key", stream_id, nonce, {"new_key": pub(new)})


def valid_chain(rotations: int = 3) -> tuple[KeyScheduleEntry, ...]:
    pairs = [(create(), 1)] + [(rotate(KEYS[i + 1], nonce=i + 2), 1 + 2 * i) for i in range(rotations)]
    return chain_entries(pairs)


def test_a_valid_chain_verifies_to_its_schedule_and_names_its_owner() -> None:
    schedule = verify_key_chain(SID, valid_chain(3), address_from_public_key(pub(OWNER)))
    assert [e.public_key for e in schedule.entries] == [pub(k) for k in KEYS[:4]]
    assert [e.effective_sequence for e in schedule.entries] == [1, 1, 3, 5]
    assert key_chain_owner(schedule) == address_from_public_key(pub(OWNER))


def test_the_schedule_the_stream_actor_folds_is_a_valid_chain() -> None:
    state = StreamState.initial(SID)
    for cmd in (create(), rotate(KEYS[1], 2), rotate(KEYS[2], 3)):
        for event in decide(state, cmd, block_height=5).events:
            state = evolve(state, event)
    assert state.key_schedule is not None
    assert verify_key_chain(SID, state.key_schedule) == state.key_schedule
    served = key_chain_from_json(json.loads(json.dumps(state.key_schedule.to_dict())))
    assert verify_key_chain(SID, served) == state.key_schedule


def test_a_rotation_signed_by_another_key_is_refused_naming_the_forged_key() -> None:
    chain = valid_chain(1) + chain_entries([(create(), 1), (rotate(ATTACKER, 9, signer=ATTACKER), 4)])[1:]
    forged = (*chain[:2], dataclasses.replace(chain[2], signing_key_id=3))
    with pytest.raises(InvalidSignatureError, match=f"key 3 \\(0x{pub(ATTACKER).hex()}\\).*not by the owner"):
        verify_key_chain(SID, forged)


def test_a_key_without_a_command_is_refused() -> None:
    chain = valid_chain(2)
    bare = (*chain[:2], KeyScheduleEntry(3, pub(ATTACKER), 5))
    with pytest.raises(InvalidSignatureError, match="carries no owner-signed command"):
        verify_key_chain(SID, bare)


def test_a_genuine_rotation_command_under_another_key_is_refused() -> None:
    chain = valid_chain(2)
    swapped = (*chain[:2], dataclasses.replace(chain[2], public_key=pub(ATTACKER)))
    with pytest.raises(InvalidSignatureError, match="not the key the owner's rotation names"):
        verify_key_chain(SID, swapped)


def test_another_owner_than_the_expected_one_is_refused() -> None:
    theirs = chain_entries([(create(signer=ATTACKER), 1)])
    with pytest.raises(InvalidSignatureError, match="not by the expected owner"):
        verify_key_chain(SID, theirs, address_from_public_key(pub(OWNER)))


@pytest.mark.parametrize(("proof", "code"), [
    (chain_entries([(create(stream_id="other"), 1)]), "MALFORMED_RECORD"),
    ((KeyScheduleEntry(1, pub(KEYS[1]), 1, command_json(rotate(KEYS[1], 1))),), "MALFORMED_RECORD"),
    ((), "MALFORMED_RECORD"),
    (chain_entries([(create(), 1), (rotate(KEYS[1], 2), 5), (rotate(KEYS[2], 3), 4)]), "MALFORMED_RECORD"),
    (chain_entries([(create(), 1), (rotate(KEYS[1], 3), 2), (rotate(KEYS[2], 2), 3)]), "MALFORMED_RECORD"),
])
def test_chains_of_the_wrong_shape_are_malformed(proof: tuple[KeyScheduleEntry, ...], code: str) -> None:
    with pytest.raises(WatchtowerError) as info:
        verify_key_chain(SID, proof)
    assert info.value.code == code


def test_verify_raises_only_spec_errors_on_junk_json() -> None:
    for junk in ([{"signing_key_id": 1}], [1], {"entries": "x"}, [{"signing_key_id": 1, "publisher_key": "00" * 32,
                                                                    "effective_sequence": 1, "command": {"x": 1}}]):
        with pytest.raises(WatchtowerError) as info:
            verify_key_chain(SID, key_chain_from_json(junk))
        assert info.value.code in {"MALFORMED_RECORD", "INVALID_SIGNATURE"}


# --- Properties ----------------------------------------------------------------------------------

FIELDS = ("signature", "caller_public_key", "key", "nonce", "stream_id")


def _mutated(cmd: Command, field: str, position: int, delta: int) -> Command:
    data = cmd.to_dict()
    if field == "signature":
        raw = bytearray(cmd.signature)
        raw[position % len(raw)] ^= delta
        data["signature_hex"] = raw.hex()
    elif field == "caller_public_key":
        raw = bytearray(cmd.caller_public_key)
        raw[position % len(raw)] ^= delta
        data["caller_public_key_hex"] = raw.hex()
    elif field == "key":
        name = "new_key" if "new_key" in cmd.body else "publisher_key_hex"
        raw = bytearray(cmd.body["new_key"] if name == "new_key" else bytes.fromhex(cmd.body[name]))
        raw[position % len(raw)] ^= delta
        data["body"] = {**data["body"], name: {"$bytes": raw.hex()} if name == "new_key" else raw.hex()}
    elif field == "nonce":
        data["nonce"] = cmd.nonce ^ delta or cmd.nonce + delta
    else:
        text = bytearray(cmd.stream_id.encode())
        text[position % len(text)] = (text[position % len(text)] - 32 + delta % 95) % 95 + 32 or 33
        data["stream_id"] = text.decode()
    return Command.from_dict(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, 3), field=st.sampled_from(FIELDS), position=st.integers(0, 63),
       delta=st.integers(1, 255))
def test_any_single_byte_change_to_any_command_fails(index: int, field: str, position: int, delta: int) -> None:
    chain = valid_chain(3)
    original = Command.from_dict(json.loads(chain[index].command or ""))
    changed = _mutated(original, field, position, delta)
    if changed == original:
        return  # the change was undone by the field's own normalisation; nothing to check
    entry = chain[index]
    if field == "key":  # a server changing a key changes the entry and the command alike
        key = changed.body["new_key"] if "new_key" in changed.body else bytes.fromhex(changed.body["publisher_key_hex"])
        entry = dataclasses.replace(entry, public_key=key)
    tampered = (*chain[:index], dataclasses.replace(entry, command=command_json(changed)), *chain[index + 1:])
    with pytest.raises(WatchtowerError) as info:
        verify_key_chain(SID, tampered)
    assert info.value.code in {"INVALID_SIGNATURE", "MALFORMED_RECORD"}


@settings(max_examples=200, deadline=None)
@given(index=st.integers(0, 3), position=st.integers(0, 10_000), byte=st.integers(0, 127))
def test_a_byte_changed_in_the_served_text_fails_or_names_the_very_same_command(
        index: int, position: int, byte: int) -> None:
    chain = valid_chain(3)
    text = chain[index].command or ""
    at = position % len(text)
    if ord(text[at]) == byte:
        return
    edited = text[:at] + chr(byte) + text[at + 1:]
    tampered = (*chain[:index], dataclasses.replace(chain[index], command=edited), *chain[index + 1:])
    try:
        verify_key_chain(SID, tampered)
    except (InvalidSignatureError, MalformedRecordError):
        return
    # Accepted only when the text is another spelling of the same signed command (hex case).
    assert Command.from_dict(json.loads(edited)) == Command.from_dict(json.loads(text))


@settings(max_examples=100, deadline=None)
@given(order=st.permutations(range(4)))
def test_any_reordering_of_the_commands_fails(order: list[int]) -> None:
    chain = valid_chain(3)
    commands = [Command.from_dict(json.loads(e.command or "")) for e in chain]
    if order == sorted(order):
        return
    with pytest.raises(MalformedRecordError):
        verify_key_chain(SID, chain_entries([(commands[i], chain[pos].effective_sequence)
                                             for pos, i in enumerate(order)]))
    with pytest.raises(MalformedRecordError):  # the entries moved as they were served, ids and all
        verify_key_chain(SID, tuple(chain[i] for i in order))


@settings(max_examples=50, deadline=None)
@given(dropped=st.integers(1, 3))
def test_a_dropped_rotation_fails_as_served(dropped: int) -> None:
    chain = valid_chain(3)
    remaining = chain[:dropped] + chain[dropped + 1:]
    if dropped == len(chain) - 1:
        # The newest rotation withheld: the rest is a valid, shorter schedule (docs/key-chain.md,
        # "what the proof does not bind"); messages signed by the withheld key then fail to verify.
        assert verify_key_chain(SID, remaining).current.signing_key_id == dropped
        return
    with pytest.raises(MalformedRecordError):
        verify_key_chain(SID, remaining)


@settings(max_examples=50, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32))
def test_a_different_owner_fails(seed: bytes) -> None:
    other = nacl.signing.SigningKey(seed)
    if pub(other) == pub(OWNER):
        return
    chain = valid_chain(2)
    with pytest.raises(InvalidSignatureError):
        verify_key_chain(SID, chain, address_from_public_key(pub(other)))
    # The other key re-signing the creation alone breaks the owner's rotations.
    theirs = chain_entries([(create(signer=other), 1)]) + chain[1:]
    with pytest.raises(InvalidSignatureError):
        verify_key_chain(SID, theirs)


def test_a_schedule_equals_its_chain_whatever_the_commands() -> None:
    chain = valid_chain(1)
    assert KeySchedule(chain) == KeySchedule(tuple(dataclasses.replace(e, command=None) for e in chain))


# --- The fold refuses keys the owner did not sign ------------------------------------------------


def _created_state() -> tuple[StreamState, list[Event]]:
    state, events = StreamState.initial(SID), []  # type: ignore[var-annotated]
    for cmd in (create(), rotate(KEYS[1], 2)):
        for event in decide(state, cmd, block_height=5).events:
            state = evolve(state, event)
            events.append(event)
    return state, events


def _refused(state: StreamState, event: Event, reason: str) -> None:
    with pytest.raises(MalformedRecordError, match=reason):
        evolve(state, event)


def test_the_fold_refuses_a_rotation_signed_by_an_attacker() -> None:
    state, _ = _created_state()
    # What an attacker able to write the log can build: its own signed rotation, as the owner's event.
    forged_cmd = rotate(ATTACKER, 3, signer=ATTACKER)
    attacker_state = dataclasses.replace(state, owner=address_from_public_key(pub(ATTACKER)),
                                         config=dataclasses.replace(state.config,  # type: ignore[arg-type]
                                                                    owner=address_from_public_key(pub(ATTACKER))))
    (event,) = decide(attacker_state, forged_cmd, block_height=6).events
    _refused(state, event, "INVALID_SIGNATURE.*not by the owner")


def test_the_fold_refuses_a_rotation_without_a_command_or_with_an_altered_one() -> None:
    state, _ = _created_state()
    (event,) = decide(state, rotate(KEYS[2], 3), block_height=6).events
    _refused(state, rebody(event, command=None), "carries no owner-signed")
    _refused(state, rebody(event, new_key=pub(ATTACKER)),
             "not the key the owner's rotation names")
    text = json.loads(event.body.command)
    text["signature_hex"] = ("0" if text["signature_hex"][0] != "0" else "1") + text["signature_hex"][1:]
    _refused(state, rebody(event, command=json.dumps(text)), "does not verify")
    assert evolve(state, event).key_schedule.current.public_key == pub(KEYS[2])  # type: ignore[union-attr]


def test_the_fold_refuses_a_genuine_command_pasted_into_an_event_of_another_origin() -> None:
    state, _ = _created_state()
    (event,) = decide(state, rotate(KEYS[2], 3), block_height=6).events
    _refused(state, dataclasses.replace(event, nonce=4), "is not the command that caused this event")


def test_the_fold_refuses_a_creation_whose_command_names_another_owner_or_key() -> None:
    (event,) = decide(StreamState.initial(SID), create(), block_height=5).events
    theirs = command_json(create(signer=ATTACKER))
    _refused(StreamState.initial(SID), rebody(event, command=theirs),
             "not the command that caused|signed by")
    other_key = dataclasses.replace(event.body.config, publisher_key=pub(ATTACKER))
    _refused(StreamState.initial(SID), rebody(event, config=other_key),
             "not the publisher key the owner's create_stream names")


# --- Rotations that sign their place in the chain -------------------------------------------------


def signed_chain(rotations: int = 3) -> tuple[KeyScheduleEntry, ...]:
    """Rotations that sign their key id and cut-over (each after two publishes)."""
    pairs: list[tuple[Command, int]] = [(create(), 1)]
    for i in range(rotations):
        key_id, effective = i + 2, 3 + 2 * i
        pairs.append((sign_command(OWNER, "rotate_publisher_key", SID, i + 2, {
            "new_key": pub(KEYS[i + 1]), "signing_key_id": key_id, "effective_sequence": effective}), effective))
    return chain_entries(pairs)


def test_decide_takes_a_rotation_signed_for_its_id_and_cut_over_and_refuses_a_wrong_one() -> None:
    state, _ = _created_state()  # key 2 in force from sequence 1
    right = sign_command(OWNER, "rotate_publisher_key", SID, 3,
                         {"new_key": pub(KEYS[2]), "signing_key_id": 3, "effective_sequence": 1})
    (event,) = decide(state, right, block_height=6).events
    assert evolve(state, event).key_schedule.current.signing_key_id == 3  # type: ignore[union-attr]
    for body, code in (({"signing_key_id": 2}, "INVALID_ARGUMENT"), ({"effective_sequence": 2}, "STALE_SEQUENCE"),
                       ({"signing_key_id": True}, "INVALID_ARGUMENT")):
        wrong = sign_command(OWNER, "rotate_publisher_key", SID, 3, {"new_key": pub(KEYS[2]), **body})
        with pytest.raises(WatchtowerError) as info:
            decide(state, wrong, block_height=6)
        assert info.value.code == code


def test_a_signed_chain_verifies() -> None:
    assert [e.effective_sequence for e in verify_key_chain(SID, signed_chain()).entries] == [1, 3, 5, 7]


@settings(max_examples=50, deadline=None)
@given(dropped=st.integers(1, 3))
def test_a_dropped_signed_rotation_fails_even_renumbered(dropped: int) -> None:
    chain = signed_chain(3)
    commands = [(Command.from_dict(json.loads(e.command or "")), e.effective_sequence) for e in chain]
    remaining = commands[:dropped] + commands[dropped + 1:]
    if dropped == len(chain) - 1:
        assert verify_key_chain(SID, chain_entries(remaining)).current.signing_key_id == dropped  # the tail
        return
    with pytest.raises(InvalidSignatureError, match="owner signed signing_key_id"):
        verify_key_chain(SID, chain_entries(remaining))


@settings(max_examples=50, deadline=None)
@given(index=st.integers(1, 3), shift=st.integers(-2, 5).filter(bool))
def test_a_moved_signed_cut_over_fails(index: int, shift: int) -> None:
    chain = list(signed_chain(3))
    chain[index] = dataclasses.replace(chain[index], effective_sequence=max(1, chain[index].effective_sequence + shift))
    if chain[index].effective_sequence == signed_chain(3)[index].effective_sequence:
        return
    with pytest.raises(WatchtowerError) as info:
        verify_key_chain(SID, chain)
    assert info.value.code in {"INVALID_SIGNATURE", "MALFORMED_RECORD"}


def rebody(event: Event, **changes: Any) -> Event:
    """`event` with some of its body's fields changed (a forged record, for the rules to refuse)."""
    return dataclasses.replace(event, body=dataclasses.replace(event.body, **changes))
