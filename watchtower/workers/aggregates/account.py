"""Accounts as a hosted aggregate: one instance per ``acct:<address>`` (`protocol.ledger.accounts`)."""

from __future__ import annotations

from watchtower.protocol.ledger.account_commands import decide_account
from watchtower.protocol.ledger.accounts import ACCOUNT_EVENTS, AccountState, evolve_account
from watchtower.protocol.ledger.common import (
    ACCOUNT_METHODS,
    ACCOUNT_PREFIX,
    CbyCredit,
    PurchaseDebit,
    ReplayCharge,
    account_instance,
)
from watchtower.protocol.signed_command import Command
from watchtower.protocol.stream.state import Event
from watchtower.workers.aggregate import Context, Outcome
from watchtower.workers.aggregates.ledger_base import LedgerAggregate, to_outcome


class AccountAggregate(LedgerAggregate):
    """Balances, account keys and actor authorizations; credits, purchase debits and replay
    charges arrive as forwards."""

    name = "account"
    snapshot_kind = "accounts"
    methods = frozenset(ACCOUNT_METHODS)
    forwards = (CbyCredit, PurchaseDebit, ReplayCharge)
    event_types = ACCOUNT_EVENTS

    def key(self, command: Command | CbyCredit | PurchaseDebit | ReplayCharge) -> str:
        # A command always addresses its signer's account; decide refuses one whose envelope
        # names another (UNAUTHORIZED), which is how a stranger is told so.
        if isinstance(command, CbyCredit):
            return account_instance(command.account)
        if isinstance(command, PurchaseDebit):
            return account_instance(command.payer)
        if isinstance(command, ReplayCharge):
            return account_instance(command.requester)
        return account_instance(command.caller)

    def initial(self, key: str) -> AccountState:
        return AccountState.initial(key)

    def decide(self, state: AccountState, command: Command | CbyCredit | PurchaseDebit | ReplayCharge,
               ctx: Context) -> Outcome:
        return to_outcome(decide_account(state, command, block_height=ctx.block_height))

    def evolve(self, state: AccountState, event: Event) -> AccountState:
        return evolve_account(state, event)

    def owns_key(self, key: str) -> bool:
        return key.startswith(ACCOUNT_PREFIX)
