"""An in-memory host for the key manager's pure aggregates: decide, evolve, deliver forwards.

It runs the same decide/evolve functions the workers run and delivers each forward once, in
order, like the ``internal`` topic does; the answer of a command is the reply (or error) of the
instance that answers it. Tests use it to check the saga's rules without a broker.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import nacl.signing

from watchtower.protocol.deployment import Deployment
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.ledger.account_commands import decide_account
from watchtower.protocol.ledger.account_state import AccountState
from watchtower.protocol.ledger.accounts import evolve_account
from watchtower.protocol.ledger.billing import first_height_of_epoch
from watchtower.protocol.ledger.common import ACCOUNT_PREFIX, PAID_PREFIX, SUPPLY_KEY, KeymgrForward, LedgerDecision
from watchtower.protocol.ledger.keymgr_access import KeymgrState
from watchtower.protocol.ledger.paid_stream import PaidState, decide_paid, evolve_paid
from watchtower.protocol.ledger.supply import SupplyState, decide_supply, evolve_supply
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.stream.state import Event


def key(n: int) -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey(bytes([n]) * 32)


def addr(k: nacl.signing.SigningKey) -> str:
    return "0x" + bytes(k.verify_key).hex()


MINTER = key(1)
TREASURY = key(2)
PUBLISHER = key(3)
ALICE = key(4)
BOB = key(5)
CAROL = key(6)
DEPLOYMENT = Deployment(protocol_treasury=addr(TREASURY), cby_minter=addr(MINTER))
KEY_EPOCH_BLOCKS = 600
HEIGHT = first_height_of_epoch(10, KEY_EPOCH_BLOCKS)  # key epoch 10
SID = "paid-feed"
PAID_CONFIG = {"fee_per_key_epoch_cby": 1_000, "protocol_fee_bps": 250, "publisher_treasury": addr(PUBLISHER),
               "key_epoch_blocks": KEY_EPOCH_BLOCKS, "min_purchase_epochs": 1}


class World:
    """Every instance's state, the events written so far, and a nonce clock per signer."""

    def __init__(self, deployment: Deployment = DEPLOYMENT, height: int = HEIGHT) -> None:
        self.deployment = deployment
        self.height = height
        self.accounts: dict[str, AccountState] = {}
        self.paid: dict[str, PaidState] = {}
        self.supply = SupplyState()
        self.events: list[Event] = []
        self._nonce = 1_000

    def sign(self, signer: nacl.signing.SigningKey, method: str, stream_id: str, body: dict[str, Any]) -> Command:
        self._nonce += 1
        return sign_command(signer, method, stream_id, self._nonce, body)

    def send(self, item: Command | KeymgrForward, instance: str | None = None) -> dict[str, Any]:
        """Decide `item` at its instance, deliver every forward, and return the caller's answer:
        ``{"ok": True, "result": ...}`` or ``{"ok": False, "error": WatchtowerError}``."""
        queue: deque[tuple[str, Command | KeymgrForward, bool]] = deque()
        queue.append((instance or item.stream_id, item, True))  # type: ignore[union-attr]
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
                self.events.append(event)
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
            return decide_account(state, item, block_height=self.height)
        if at.startswith(PAID_PREFIX):
            paid = self.paid.get(at) or PaidState.initial(at)
            return decide_paid(paid, item, block_height=self.height, deployment=self.deployment)
        assert at == SUPPLY_KEY
        return decide_supply(self.supply, item, block_height=self.height, deployment=self.deployment)

    def _evolve(self, at: str, event: Event) -> None:
        if at.startswith(ACCOUNT_PREFIX):
            self.accounts[at] = evolve_account(self.accounts.get(at) or AccountState.initial(at), event)
        elif at.startswith(PAID_PREFIX):
            self.paid[at] = evolve_paid(self.paid.get(at) or PaidState.initial(at), event)
        else:
            self.supply = evolve_supply(self.supply, event)

    # --- conveniences ---

    def balance(self, k: nacl.signing.SigningKey | str) -> int:
        address = k if isinstance(k, str) else addr(k)
        state = self.accounts.get(ACCOUNT_PREFIX + address)
        return 0 if state is None else state.balance_cby

    def mint(self, to: nacl.signing.SigningKey, amount: int) -> dict[str, Any]:
        return self.send(self.sign(MINTER, "mint_cby", SUPPLY_KEY, {"to": addr(to), "amount_cby": amount}))

    def register_paid_stream(self, stream_id: str = SID, config: dict[str, Any] | None = None) -> None:
        from watchtower.protocol.ledger.common import PaidCommand

        create = self.sign(PUBLISHER, "create_stream", stream_id, {
            "publisher_key": bytes(PUBLISHER.verify_key), "access_mode": "PLATFORM_MANAGED",
            "paid_stream_config": config or PAID_CONFIG})
        self.send(PaidCommand(create), PAID_PREFIX + stream_id)

    def acquire(self, payer: nacl.signing.SigningKey, target: int, stream_id: str = SID,
                **extra: Any) -> dict[str, Any]:
        body = {"stream_id": stream_id, "target_key_epoch": target, **extra}
        return self.send(self.sign(payer, "acquire_epoch_access", PAID_PREFIX + stream_id, body))

    def view(self) -> KeymgrState:
        """The key manager's view folded from every event written."""
        state = KeymgrState()
        for event in self.events:
            state.apply(event)
        return state
