"""Who may get an epoch key: the pure access rules the key-manager service and the projection share.

`KeymgrView` is what both fold from the events topic; `KeymgrState` is an in-memory one built
with the aggregates' own evolve functions (`accounts`, `paid_stream`, `supply`), so a reader and
the writers apply exactly the same rules and refuse exactly the same forged records (`apply`
raises MALFORMED_RECORD; the caller logs, counts and skips the record).

- `check_decrypt_access`: NOT_PLATFORM_MANAGED_STREAM, then ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT (an
  actor other than the account without an ACTIVE grant on the stream), then ENTITLEMENT_REQUIRED
  (`billing.require_entitlement`), in that CIP-7 order. An account is always authorized for itself.
- `sealing_key`: the ACTIVE X25519 key to seal epoch keys to: the named one (KEY_REVOKED if it was
  revoked, INVALID_ACCOUNT_KEY if it does not exist), else the newest ACTIVE one
  (INVALID_ACCOUNT_KEY when the account has none).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from watchtower.protocol.errors import (
    ActorNotAuthorizedForAccountError,
    InvalidAccountKeyError,
    KeyRevokedError,
    NotPlatformManagedStreamError,
)
from watchtower.protocol.ledger.account_state import ACTIVE, AccountState
from watchtower.protocol.ledger.accounts import ACCOUNT_EVENTS, evolve_account
from watchtower.protocol.ledger.billing import require_entitlement
from watchtower.protocol.ledger.common import ACCOUNT_PREFIX, PAID_PREFIX
from watchtower.protocol.ledger.paid import PaidStreamConfig
from watchtower.protocol.ledger.paid_stream import PAID_EVENTS, PaidState, evolve_paid
from watchtower.protocol.ledger.supply import SUPPLY_EVENTS, SupplyState, evolve_supply
from watchtower.protocol.stream.state import Event

KEYMGR_EVENTS = ACCOUNT_EVENTS | PAID_EVENTS | SUPPLY_EVENTS
"""Every event type the key manager's instances write."""


@dataclasses.dataclass(frozen=True)
class AccountKey:
    """An account's registered key as the access rules see it."""

    account_key_id: int
    scheme: str
    public_key: bytes
    active: bool


@dataclasses.dataclass(frozen=True)
class PaidStream:
    """A registered PLATFORM_MANAGED stream."""

    stream_id: str
    owner: str
    config: PaidStreamConfig


class KeymgrView(Protocol):
    """What the key-manager service (K) and the projection (P) both fold."""

    def paid_stream(self, stream_id: str) -> PaidStream | None:
        """The paid stream, or None when `stream_id` is not a registered PLATFORM_MANAGED stream."""

    def active_until(self, stream_id: str, account: str) -> int | None:
        """The last key epoch `account` is entitled to on `stream_id` (None: no entitlement)."""

    def actor_authorized(self, account: str, actor: str, stream_id: str) -> bool:
        """Whether `account` holds an ACTIVE grant letting `actor` decrypt `stream_id`."""

    def account_keys(self, account: str) -> list[AccountKey]:
        """The account's registered keys, in id order."""


def check_decrypt_access(view: KeymgrView, *, stream_id: str, beneficiary_account: str, actor: str,
                         key_epoch: int) -> None:
    """Raise the CIP-7 error that refuses `actor` the key of `key_epoch` for `beneficiary_account`."""
    if view.paid_stream(stream_id) is None:
        raise NotPlatformManagedStreamError(
            f"stream {stream_id!r} is not a PLATFORM_MANAGED stream; its messages are plaintext, read them as they are"
        )
    if actor != beneficiary_account and not view.actor_authorized(beneficiary_account, actor, stream_id):
        raise ActorNotAuthorizedForAccountError(
            f"{actor} is not authorized to decrypt stream {stream_id!r} for {beneficiary_account}; the account "
            "grants it with authorize_actor",
            details={"actor": actor, "account": beneficiary_account},
        )
    require_entitlement(active_until_key_epoch=view.active_until(stream_id, beneficiary_account), key_epoch=key_epoch)


def sealing_key(view: KeymgrView, account: str, account_key_id: int | None) -> AccountKey:
    """The ACTIVE key epoch keys are sealed to (module docstring for the errors)."""
    keys = view.account_keys(account)
    if account_key_id is not None:
        named = next((k for k in keys if k.account_key_id == account_key_id), None)
        if named is None:
            raise InvalidAccountKeyError(f"account {account} has no key {account_key_id}; list its keys",
                                         details={"account_key_id": account_key_id})
        if not named.active:
            raise KeyRevokedError(f"key {account_key_id} of account {account} is revoked; name an ACTIVE key or "
                                  "register a new one", details={"account_key_id": account_key_id})
        return named
    active = [k for k in keys if k.active]
    if not active:
        raise InvalidAccountKeyError(f"account {account} has no ACTIVE X25519 key; register one with "
                                     "register_account_key first")
    return max(active, key=lambda k: k.account_key_id)


class KeymgrState:
    """An in-memory `KeymgrView`: the key manager's instances folded with their own evolve."""

    def __init__(self) -> None:
        self.accounts: dict[str, AccountState] = {}
        self.paid: dict[str, PaidState] = {}
        self.supply = SupplyState()

    def apply(self, event: Event) -> None:
        """Fold one event; other aggregates' events are ignored, a broken one raises
        MALFORMED_RECORD and leaves the state as it was."""
        if event.type not in KEYMGR_EVENTS:
            return
        key = event.stream_id
        if key.startswith(ACCOUNT_PREFIX) and event.type in ACCOUNT_EVENTS:
            account = self.accounts.get(key) or AccountState.initial(key)
            self.accounts[key] = evolve_account(account, event)
        elif key.startswith(PAID_PREFIX) and event.type in PAID_EVENTS:
            paid = self.paid.get(key) or PaidState.initial(key)
            self.paid[key] = evolve_paid(paid, event)
        else:
            self.supply = evolve_supply(self.supply, event)  # refuses anything not on cby:supply

    def account(self, account: str) -> AccountState | None:
        """The account's state, if anything happened to it."""
        return self.accounts.get(ACCOUNT_PREFIX + account)

    def paid_stream(self, stream_id: str) -> PaidStream | None:
        state = self.paid.get(PAID_PREFIX + stream_id)
        if state is None or state.config is None or state.owner is None:
            return None
        return PaidStream(state.stream_id, state.owner, state.config)

    def active_until(self, stream_id: str, account: str) -> int | None:
        state = self.paid.get(PAID_PREFIX + stream_id)
        return None if state is None else state.entitlements.get(account)

    def actor_authorized(self, account: str, actor: str, stream_id: str) -> bool:
        if actor == account:
            return True
        state = self.account(account)
        return state is not None and state.actor_authorized(actor, stream_id)

    def account_keys(self, account: str) -> list[AccountKey]:
        state = self.account(account)
        if state is None:
            return []
        return [AccountKey(k.account_key_id, k.scheme, k.public_key, k.status == ACTIVE) for k in state.keys]

    def balances(self) -> dict[str, int]:
        """Every account's balance (for the conservation check)."""
        return {s.account: s.balance_cby for s in self.accounts.values()}
