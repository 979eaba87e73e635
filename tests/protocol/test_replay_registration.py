"""A `registered` replay record is fulfilled only when its requester's signed command backs it."""

from __future__ import annotations

import msgspec
import nacl.signing
import pytest

from watchtower.protocol.replay.records import ReplayRegistration
from watchtower.protocol.replay.registration import check_registration_command
from watchtower.protocol.replay.rules import canonical_filter, parse_replay_filter, replay_id_for
from watchtower.protocol.replay.status import ReplayRuleError
from watchtower.protocol.signed_command import command_digest, sign_command
from watchtower.schemas.replay_records import decode_replay_record, encode_replay_record

SID = "s1"
FLT = {"field": "kind", "op": "eq", "value": "trade"}


def registration(**body_overrides: object) -> ReplayRegistration:
    key = nacl.signing.SigningKey(b"\x01" * 32)
    body = {"namespace": SID, "from": 3, "to": 9, "config": {"filter": FLT, "skip": [2, 1]}, "memo_hex": "AB"}
    body.update(body_overrides)
    cmd = sign_command(key, "register_replay", SID, 7, body)
    digest = command_digest(cmd)
    return ReplayRegistration(v=1, replay_id=replay_id_for(digest), stream_id=SID, namespace=SID, requester=cmd.caller,
                            from_sequence=3, to_sequence=9, first=3, end_exclusive=9, end_id=None,
                            filter=canonical_filter(parse_replay_filter(FLT)), skip=[2, 1], memo_hex="ab",
                            price_cby=0, block_height=1, caller=cmd.caller, nonce=7, digest_hex=digest.hex(),
                            command=cmd.to_dict())


def test_a_registration_its_requester_signed_passes_and_survives_the_wire() -> None:
    rec = registration()
    assert check_registration_command(rec).caller == rec.requester
    again = decode_replay_record(encode_replay_record(rec))
    assert again == rec
    check_registration_command(again)  # type: ignore[arg-type]


def test_a_record_written_before_commands_were_carried_still_decodes_but_is_refused() -> None:
    rec = msgspec.structs.replace(registration(), command=None)
    raw = msgspec.json.decode(encode_replay_record(rec))
    raw.pop("command", None)
    old = decode_replay_record(msgspec.json.encode(raw))
    assert isinstance(old, ReplayRegistration)
    assert old.command is None
    with pytest.raises(ReplayRuleError, match="carries no signed register_replay"):
        check_registration_command(old)


@pytest.mark.parametrize(("field", "value"), [
    ("requester", "0x" + "ab" * 32), ("caller", "0x" + "ab" * 32), ("stream_id", "s2"), ("nonce", 8),
    ("replay_id", 1), ("digest_hex", "00" * 32), ("namespace", "feed:1"), ("from_sequence", 1), ("to_sequence", 10),
    ("memo_hex", ""), ("filter", None), ("skip", None),
])
def test_a_record_that_differs_from_its_command_is_refused_naming_the_field(field: str, value: object) -> None:
    rec = msgspec.structs.replace(registration(), **{field: value})
    with pytest.raises(ReplayRuleError, match="does not match the register_replay command"):
        check_registration_command(rec)


def test_a_command_whose_signature_does_not_verify_is_refused() -> None:
    rec = registration()
    forged = dict(rec.command or {})
    forged["body"] = {**forged["body"], "to": 99}
    with pytest.raises(ReplayRuleError, match="INVALID_SIGNATURE"):
        check_registration_command(msgspec.structs.replace(rec, command=forged))


@pytest.mark.parametrize(("changes", "named"), [
    ({"first": 1, "end_exclusive": 1_000_000}, "plan"),  # the plan starts before what was asked
    ({"end_exclusive": 10}, "plan"),  # past `to`
    ({"end_exclusive": 2}, "plan"),  # ends before it starts
    ({"end_id": 8}, "plan"),  # a closed range has no end_id
])
def test_a_plan_outside_the_signed_range_is_refused(changes: dict[str, int], named: str) -> None:
    """A forger who copies a genuine command cannot widen the plan it backs."""
    rec = msgspec.structs.replace(registration(), **changes)
    with pytest.raises(ReplayRuleError, match=f"differs in: .*{named}"):
        check_registration_command(rec)


def test_an_open_ended_plan_must_end_at_its_end_id() -> None:
    key = nacl.signing.SigningKey(b"\x01" * 32)
    body = {"namespace": SID, "from": 3, "to": None, "config": {"filter": FLT, "skip": [2, 1]}, "memo_hex": "AB"}
    cmd = sign_command(key, "register_replay", SID, 7, body)
    digest = command_digest(cmd)
    rec = msgspec.structs.replace(registration(), to_sequence=None, end_exclusive=9, end_id=8, nonce=7,
                                  replay_id=replay_id_for(digest), digest_hex=digest.hex(), command=cmd.to_dict())
    assert check_registration_command(rec).caller == rec.requester
    with pytest.raises(ReplayRuleError, match="end_id"):
        check_registration_command(msgspec.structs.replace(rec, end_id=1_000))
