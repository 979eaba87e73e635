"""The Stream Key Manager's instances run in memory: decide, evolve, deliver forwards (pure).

`LedgerRun` decides a signed command at its instance (``acct:``, ``paid:`` or ``cby:supply``),
folds the events with the same `evolve` the workers use, and delivers every forward once, in
order, as the ``internal`` topic does; the answer to a command is the reply (or error) of the
instance that answers it. The conformance vectors of type ``account_ledger`` run on it
(`conformance`), so anyone can replay a sequence of signed account commands and purchases and
compare the replies, balances, authorizations and allowances with ours.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from watchtower.protocol.deployment import Deployment
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.ledger.account_commands import decide_account
from watchtower.protocol.ledger.account_state import AccountState
from watchtower.protocol.ledger.accounts import evolve_account
from watchtower.protocol.ledger.common import (
    ACCOUNT_PREFIX,
    PAID_PREFIX,
    SUPPLY_KEY,
    KeymgrForward,
    LedgerDecision,
    account_instance,
)
from watchtower.protocol.ledger.paid_stream import PaidState, decide_paid, evolve_paid
from watchtower.protocol.ledger.supply import SupplyState, decide_supply, evolve_supply
from watchtower.protocol.signed_command import Command


class LedgerRun:
    """Every key-manager instance's state, decided and folded in memory at one block height."""

    def __init__(self, deployment: Deployment, block_height: int) -> None:
        self.deployment = deployment
        self.block_height = block_height
        self.accounts: dict[str, AccountState] = {}
        self.paid: dict[str, PaidState] = {}
        self.supply = SupplyState()
        self.event_types: list[str] = []

    def send(self, item: Command | KeymgrForward, instance: str | None = None) -> dict[str, Any]:
        """Decide `item` at `instance` (default: the command's stream_id), deliver every forward, and
        return the caller's answer: ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": err}``."""
        queue: deque[tuple[str, Command | KeymgrForward, bool]] = deque()
        start = instance if instance is not None else getattr(item, "stream_id", None)
        if not isinstance(start, str):
            raise ValueError("name the instance of a forward")
        queue.append((start, item, True))
        answer: dict[str, Any] | None = None
        while queue:
            at, next_item, answers = queue.popleft()
            try:
                decision = self._decide(at, next_item)
            except WatchtowerError as err:
                if answers and answer is None:
                    answer = {"ok": False, "error": err}
                continue
            for event in decision.events:
                self._evolve(at, event)
                self.event_types.append(event.type)
            if answers and answer is None:
                if decision.error is not None:
                    answer = {"ok": False, "error": decision.error}
                elif decision.reply is not None:
                    answer = {"ok": True, "result": dict(decision.reply)}
            for routed in decision.forwards:
                queue.append((routed.key, routed.forward, answers and routed.answers))
        return answer or {"ok": True, "result": None}

    def _decide(self, at: str, item: Any) -> LedgerDecision:
        if at.startswith(ACCOUNT_PREFIX):
            state = self.accounts.get(at) or AccountState.initial(at)
            return decide_account(state, item, block_height=self.block_height)
        if at.startswith(PAID_PREFIX):
            paid = self.paid.get(at) or PaidState.initial(at)
            return decide_paid(paid, item, block_height=self.block_height, deployment=self.deployment)
        if at != SUPPLY_KEY:
            raise ValueError(f"{at!r} is not a key-manager instance")
        return decide_supply(self.supply, item, block_height=self.block_height, deployment=self.deployment)

    def _evolve(self, at: str, event: Any) -> None:
        if at.startswith(ACCOUNT_PREFIX):
            self.accounts[at] = evolve_account(self.accounts.get(at) or AccountState.initial(at), event)
        elif at.startswith(PAID_PREFIX):
            self.paid[at] = evolve_paid(self.paid.get(at) or PaidState.initial(at), event)
        else:
            self.supply = evolve_supply(self.supply, event)

    def account(self, address: str) -> AccountState:
        """The account's state (the initial one if nothing happened to it)."""
        key = account_instance(address)
        return self.accounts.get(key) or AccountState.initial(key)

    def active_until(self, stream_id: str, account: str) -> int | None:
        """The last key epoch `account` is entitled to on `stream_id`."""
        paid = self.paid.get(PAID_PREFIX + stream_id)
        return None if paid is None else paid.entitlements.get(account)
