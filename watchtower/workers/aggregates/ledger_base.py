"""What the key manager's three aggregates share on the host: routing, codecs, snapshots.

Each adapter maps one pure instance kind (`protocol.ledger.accounts`, `protocol.ledger.paid_stream`,
`protocol.ledger.supply`) onto the host contract (`watchtower.workers.aggregate`). A signed command is
accepted from ``commands`` only and a forward from ``internal`` only: the same forward bytes on
the public topic are UNAUTHORIZED (only workers can write ``internal``), and a record that is not
this aggregate's is MALFORMED_RECORD so the host's router tries the next aggregate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from watchtower.protocol.command_auth import check_event_clock
from watchtower.protocol.errors import MalformedRecordError, UnauthorizedError
from watchtower.protocol.ledger.common import KeymgrForward, LedgerDecision
from watchtower.protocol.signed_command import Command
from watchtower.protocol.stream.snapshots import decode_ledger, encode_ledger
from watchtower.protocol.stream.state import Event
from watchtower.schemas.wire import decode_command, decode_event, encode_event, encode_keymgr_forward
from watchtower.workers.aggregate import BrokenRuleError, Context, Forward, Outcome

KEYMGR_FORWARDS_ONLY = ("key-manager forwards are written by workers only; send the signed command "
                        "(e.g. acquire_epoch_access or transfer_cby) to the commands topic instead")


def to_outcome(decision: LedgerDecision) -> Outcome:
    """The host's outcome of a pure key-manager decision (forwards encoded for ``internal``)."""
    forwards = tuple(Forward(r.key, encode_keymgr_forward(r.forward), r.answers) for r in decision.forwards)
    return Outcome(decision.events, decision.reply, (), forwards, decision.error)


class LedgerAggregate:
    """Base of the account, paid-stream and supply adapters."""

    name: str
    snapshot_kind: ClassVar[str]
    methods: ClassVar[frozenset[str]]
    forwards: ClassVar[tuple[type, ...]]
    event_types: ClassVar[frozenset[str]]

    command_decoder = staticmethod(decode_command)
    event_decoder = staticmethod(decode_event)

    def accept_command(self, record: object, *, internal: bool) -> Command | KeymgrForward:
        if isinstance(record, Command):
            if record.method in self.methods and not internal:
                return record
        elif isinstance(record, self.forwards):
            if not internal:
                raise UnauthorizedError(KEYMGR_FORWARDS_ONLY)
            return record  # type: ignore[return-value]
        raise MalformedRecordError(f"not a {self.name} command or forward")

    def evolve(self, state: Any, event: Event) -> Any:
        raise NotImplementedError

    def encode_event(self, event: Event) -> bytes:
        return encode_event(event)

    def owns_event(self, event: Event) -> bool:
        return event.type in self.event_types

    def event_key(self, event: Event) -> str:
        return event.stream_id

    def check_event(self, event: Event, now_block_height: int | None) -> None:
        if not self.owns_key(event.stream_id):
            raise BrokenRuleError(f"a {event.type} event belongs to a {self.name} instance, not to {event.stream_id!r}")
        if now_block_height is not None:
            check_event_clock(event.block_height, now_block_height)

    def owns_key(self, key: str) -> bool:
        raise NotImplementedError

    def encode_snapshot(self, states: Mapping[str, Any]) -> bytes:
        return encode_ledger(self.snapshot_kind, states)

    def decode_snapshot(self, data: bytes) -> dict[str, Any]:
        return decode_ledger(self.snapshot_kind, data)

    def decide(self, state: Any, command: Any, ctx: Context) -> Outcome:
        raise NotImplementedError
