"""Paid streams as a hosted aggregate: one instance per ``paid:<stream_id>`` (`protocol.ledger.paid_stream`)."""

from __future__ import annotations

from watchtower.protocol.ledger.common import PAID_METHODS, PAID_PREFIX, PaidCommand, PurchaseSettled, paid_instance
from watchtower.protocol.ledger.paid_stream import PAID_EVENTS, PaidState, decide_paid, evolve_paid
from watchtower.protocol.signed_command import Command
from watchtower.protocol.stream.state import Event
from watchtower.workers.aggregate import Context, Outcome
from watchtower.workers.aggregates.ledger_base import LedgerAggregate, to_outcome


class PaidStreamAggregate(LedgerAggregate):
    """acquire_epoch_access, and the forwarded creations, renewals and settlements of purchases."""

    name = "paid_stream"
    snapshot_kind = "paid_streams"
    methods = frozenset(PAID_METHODS)
    forwards = (PaidCommand, PurchaseSettled)
    event_types = PAID_EVENTS

    def key(self, command: Command | PaidCommand | PurchaseSettled) -> str:
        if isinstance(command, PaidCommand):
            return paid_instance(command.command.stream_id)
        if isinstance(command, PurchaseSettled):
            return paid_instance(command.stream_id)
        return command.stream_id  # initial() refuses one that is not paid:<stream_id>

    def initial(self, key: str) -> PaidState:
        return PaidState.initial(key)

    def decide(self, state: PaidState, command: Command | PaidCommand | PurchaseSettled, ctx: Context) -> Outcome:
        return to_outcome(decide_paid(state, command, block_height=ctx.block_height, deployment=ctx.deployment))

    def evolve(self, state: PaidState, event: Event) -> PaidState:
        return evolve_paid(state, event)

    def owns_key(self, key: str) -> bool:
        return key.startswith(PAID_PREFIX)
