"""Whether a ``registered`` replay record is backed by its requester's signed register_replay.

The stream's writer decides a register_replay and writes the ``registered`` record in the same
transaction, with the signed command in it (`schemas.wire.replay_record_for`). Anyone who can
produce to the ``replay`` topic (a plaintext broker) could write a ``registered`` record of their
own, naming any requester, range and filter; the replay worker would then re-emit the stream's
messages for it. So before fulfilling one, the replay worker checks the record against the command
it carries, as a key rotation is checked against the owner's signed command:

1. the record carries a command, which decodes and whose signature is its caller's;
2. the command is a ``register_replay`` of the record's stream, signed by the record's requester
   (and caller), with the record's nonce and digest; the replay id is the one derived from that
   digest (`replay_rules.replay_id_for`), so a command registers exactly one replay;
3. what the command asked for is what the record plans: namespace, ``from``/``to``, memo, the
   filter (canonical) and skip of its config; and the plan lies inside the request: it starts at
   ``from``, ends at or before ``to`` (an open-ended request: its ``end_id`` is the plan's last
   sequence), and no stream holds a sequence below 1.

The writer's other checks (the requester may read the stream, the plan fits the head, the price
was paid) are decided against the stream's state, which a replay worker does not hold; a forger
can therefore only have a replay delivered to an account whose key signed the request.

A record without a command (written before commands were carried) still decodes everywhere, but
is not fulfilled. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from watchtower.protocol.commands import RegisterReplay, peek_body
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.replay.records import ReplayRegistration
from watchtower.protocol.replay.rules import canonical_filter, parse_replay_filter, parse_skip, replay_id_for
from watchtower.protocol.replay.status import ReplayRuleError
from watchtower.protocol.signed_command import Command, Method, command_digest, verify_command


def check_registration_command(record: ReplayRegistration) -> Command:
    """The signed command behind `record` (rules 1-3 of the module docstring); ReplayRuleError
    naming the first rule broken."""
    if record.command is None:
        raise ReplayRuleError(f"replay {record.replay_id} carries no signed register_replay command, so nothing "
                              "shows its requester asked for it; it is not fulfilled")
    try:
        cmd = Command.from_dict(record.command)
        verify_command(cmd)
    except WatchtowerError as exc:
        raise ReplayRuleError(f"replay {record.replay_id}: its register_replay command is refused "
                              f"({exc.code}: {exc.message})") from None
    digest = command_digest(cmd)
    mismatches = [
        name for name, ok in (
            ("method", cmd.method == Method.REGISTER_REPLAY),
            ("stream_id", cmd.stream_id == record.stream_id),
            ("requester", cmd.caller == record.requester),
            ("caller", cmd.caller == record.caller),
            ("nonce", cmd.nonce == record.nonce),
            ("digest_hex", digest.hex() == record.digest_hex),
            ("replay_id", replay_id_for(digest) == record.replay_id),
        ) if not ok
    ]
    if not mismatches:
        mismatches = _request_mismatches(peek_body(cmd, RegisterReplay), record)
    if mismatches:
        raise ReplayRuleError(f"replay {record.replay_id} does not match the register_replay command it carries "
                              f"(differs in: {', '.join(mismatches)})")
    return cmd


def _request_mismatches(body: RegisterReplay, record: ReplayRegistration) -> list[str]:
    """The requested fields (rule 3) in which the record differs from the command's body."""
    config = body.config or {}
    if not isinstance(config, Mapping):
        return ["config"]
    memo = body.memo_hex
    try:
        flt = canonical_filter(parse_replay_filter(config.get("filter")))
        skip = parse_skip(config.get("skip"))
    except WatchtowerError:
        return ["config"]
    return [*_plan_mismatches(record), *(name for name, ok in (
        ("namespace", body.namespace == record.namespace),
        ("from", body.from_ == record.from_sequence),
        ("to", body.to == record.to_sequence),
        ("memo_hex", (memo.lower() if isinstance(memo, str) else memo) == record.memo_hex),
        ("filter", flt == record.filter),
        ("skip", (None if skip is None else list(skip)) == record.skip),
    ) if not ok)]


def _plan_mismatches(record: ReplayRegistration) -> list[str]:
    """Whether the record's plan ``[first, end_exclusive)`` (and ``end_id``) fits the range it asked for."""
    first, end, to, end_id = record.first, record.end_exclusive, record.to_sequence, record.end_id
    if record.from_sequence < 1 or first != record.from_sequence or end < first:
        return ["plan"]
    if to is None:
        return [] if end_id is not None and end_id >= 0 and (end == first or end_id == end - 1) else ["end_id"]
    return [] if end <= to and end_id is None else ["plan"]
