"""The CBY supply as a hosted aggregate: the one ``cby:supply`` instance (`protocol.ledger.supply`)."""

from __future__ import annotations

from watchtower.protocol.ledger.common import SUPPLY_KEY, SUPPLY_METHODS, CbyBurn
from watchtower.protocol.ledger.supply import SUPPLY_EVENTS, SupplyState, decide_supply, evolve_supply
from watchtower.protocol.signed_command import Command
from watchtower.protocol.stream.state import Event
from watchtower.workers.aggregate import Context, Outcome
from watchtower.workers.aggregates.ledger_base import LedgerAggregate, to_outcome


class SupplyAggregate(LedgerAggregate):
    """mint_cby by the genesis minter, and burns forwarded by accounts."""

    name = "supply"
    snapshot_kind = "supply"
    methods = frozenset(SUPPLY_METHODS)
    forwards = (CbyBurn,)
    event_types = SUPPLY_EVENTS

    def key(self, command: Command | CbyBurn) -> str:  # noqa: ARG002 - one instance
        return SUPPLY_KEY

    def initial(self, key: str) -> SupplyState:  # noqa: ARG002 - one instance
        return SupplyState()

    def decide(self, state: SupplyState, command: Command | CbyBurn, ctx: Context) -> Outcome:
        return to_outcome(decide_supply(state, command, block_height=ctx.block_height, deployment=ctx.deployment))

    def evolve(self, state: SupplyState, event: Event) -> SupplyState:
        return evolve_supply(state, event)

    def owns_key(self, key: str) -> bool:
        return key == SUPPLY_KEY
