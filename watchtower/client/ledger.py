"""`Ledger`: an account's paid-feed commands (keys, actors, CBY, epoch access) and their reads.

Each method signs one CIP-7 command with the account and sends it through the ordinary command
path (``POST /v1/commands``), addressed as the key manager's aggregates expect
(docs/paid-feeds.md): account commands to ``acct:<caller>``, a mint to ``cby:supply``, a purchase
to ``paid:<stream_id>``, a renewal to the stream itself. The worker's committed reply comes back
(a retry of the same command is idempotent and answers ``"duplicate": true``); every refusal is a
`WatchtowerError` with the spec's code (INSUFFICIENT_CBY_BALANCE, MIN_PURCHASE_NOT_MET, …).

Reads come from the projections (``GET /v1/accounts/{a}``, ``/v1/streams/{s}/entitlements/{a}``,
``/v1/cby/supply``), which trail acknowledged writes by a moment: `wait_for_balance` and
`wait_for_entitlement` poll until they show one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol

from watchtower.client.account import Account
from watchtower.client.account_keys import commit_pending_key, new_pending_key
from watchtower.protocol.addresses import require_address
from watchtower.protocol.errors import (
    InvalidArgumentError,
    MalformedRecordError,
    NotReadyError,
    RequestTimeoutError,
    WatchtowerError,
)
from watchtower.protocol.json_ints import as_int
from watchtower.protocol.ledger.billing import RECEIPT_FIELDS, KeyAccessReceipt
from watchtower.protocol.ledger.common import SUPPLY_KEY, account_instance, paid_instance
from watchtower.protocol.signed_command import Command
from watchtower.protocol.validation import require_amount

X25519: Final = "X25519"
_RECEIPT_FIELDS: Final = frozenset(RECEIPT_FIELDS)


class LedgerApi(Protocol):
    """The part of `ApiClient` the ledger uses."""

    def command(self, cmd: Command, *, timeout_s: float = ...) -> dict[str, Any]: ...

    def account_info(self, address: str) -> dict[str, Any]: ...

    def entitlement(self, stream_id: str, account: str) -> dict[str, Any]: ...

    def cby_supply(self) -> dict[str, Any]: ...


def receipt_of(reply: dict[str, Any]) -> KeyAccessReceipt:
    """The KeyAccessReceipt in a purchase or renewal reply (MALFORMED_RECORD if it is not one)."""
    try:
        return KeyAccessReceipt(**{k: as_int(v) for k, v in reply.items() if k in _RECEIPT_FIELDS})
    except TypeError:
        raise MalformedRecordError(f"the reply is not a KeyAccessReceipt; it has {sorted(reply)}") from None


def _actor_body(actor: str, stream_id: str | None, all_streams: bool) -> dict[str, Any]:
    if (stream_id is None) != all_streams:
        raise InvalidArgumentError("name one stream, or all_streams=True for the account's own actor")
    body: dict[str, Any] = {"actor": require_address(actor, "actor")}
    body.update({"all_streams": True} if all_streams else {"stream_id": stream_id})
    return body


class Ledger:
    """The paid-feed commands of one `account` over `api` (not thread-safe only in its `last_command`)."""

    def __init__(self, api: LedgerApi, account: Account, *, timeout_s: float = 30.0) -> None:
        self.api = api
        self.account = account
        self.timeout_s = timeout_s
        # The last command sent; after a TIMEOUT resend it with `api.command` (it is idempotent).
        self.last_command: Command | None = None

    def send(self, method: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
        """Sign `method` for aggregate `key` with this account and return the committed reply."""
        self.last_command = self.account.sign(method, key, body)
        return self.api.command(self.last_command, timeout_s=self.timeout_s)

    # --- Account keys and actors -----------------------------------------------------------------

    def register_account_key(self, public_key: bytes, scheme: str = X25519) -> dict[str, Any]:
        """Register an X25519 public key; the reply names its ``account_key_id``."""
        return self.send("register_account_key", account_instance(self.account.address),
                         {"scheme": scheme, "public_key": public_key})

    def add_account_key(self) -> tuple[dict[str, Any], Path]:
        """Generate an X25519 key pair, register its public half and keep the private half 0600
        under ``$WATCHTOWER_HOME/account-keys/``; returns (reply, private key path)."""
        key, pending = new_pending_key(self.account)
        try:
            reply = self.register_account_key(bytes(key.public_key))
        except RequestTimeoutError:
            raise  # it may still be registered: the pending key stays, so it is not lost
        except WatchtowerError:
            pending.unlink(missing_ok=True)
            raise
        key_id = reply.get("account_key_id")
        if type(key_id) is not int:
            raise MalformedRecordError(f"register_account_key answered without an account_key_id: {sorted(reply)}")
        return reply, commit_pending_key(self.account, key_id)

    def revoke_account_key(self, account_key_id: int) -> dict[str, Any]:
        """Revoke one of this account's keys; epoch keys are never sealed to it again."""
        return self.send("revoke_account_key", account_instance(self.account.address),
                         {"account_key_id": account_key_id})

    def authorize_actor(self, actor: str, stream_id: str | None = None, *,
                        all_streams: bool = False) -> dict[str, Any]:
        """Let `actor` decrypt `stream_id` on this account's entitlement; with `all_streams`, make it one
        of the account's own actors (CIP-7: authorized on every stream until revoked there)."""
        body = _actor_body(actor, stream_id, all_streams)
        return self.send("authorize_actor", account_instance(self.account.address), body)

    def revoke_actor(self, actor: str, stream_id: str | None = None, *,
                     all_streams: bool = False) -> dict[str, Any]:
        """Withdraw `actor`'s authorization for `stream_id` (an own actor too), or with `all_streams` its
        own-actor standing (effective from the next block)."""
        body = _actor_body(actor, stream_id, all_streams)
        return self.send("revoke_actor", account_instance(self.account.address), body)

    def create_actor(self, actor: str) -> dict[str, Any]:
        """Record that this account created `actor` (CIP-7 actor.creator): the actor is then one of the
        account's own, authorized on every stream of the account until revoked (`revoke_actor`)."""
        return self.send("create_actor", account_instance(self.account.address),
                         {"actor": require_address(actor, "actor")})

    # --- Delegated spending ------------------------------------------------------------------------

    def approve_spending(self, spender: str, cap_cby: int, stream_id: str | None = None) -> dict[str, Any]:
        """Let `spender` sign purchases this account pays (``payer_account``), up to `cap_cby` CBY wei in
        all, on `stream_id` (None: any stream); replaces an earlier allowance for the same pair."""
        body: dict[str, Any] = {"spender": require_address(spender, "spender"),
                                "cap_cby": require_amount(cap_cby, "cap_cby")}
        if stream_id is not None:
            body["stream_id"] = stream_id
        return self.send("approve_spending", account_instance(self.account.address), body)

    def revoke_spending(self, spender: str, stream_id: str | None = None) -> dict[str, Any]:
        """Withdraw `spender`'s allowance on `stream_id` (None: the any-stream one)."""
        body: dict[str, Any] = {"spender": require_address(spender, "spender")}
        if stream_id is not None:
            body["stream_id"] = stream_id
        return self.send("revoke_spending", account_instance(self.account.address), body)

    # --- CBY -------------------------------------------------------------------------------------

    def transfer_cby(self, to: str, amount_cby: int, memo: str | None = None) -> dict[str, Any]:
        """Move `amount_cby` from this account to `to`."""
        body: dict[str, Any] = {"to": require_address(to, "to"), "amount_cby": require_amount(amount_cby)}
        if memo:
            body["memo"] = memo
        return self.send("transfer_cby", account_instance(self.account.address), body)

    def burn_cby(self, amount_cby: int) -> dict[str, Any]:
        """Destroy `amount_cby` of this account's balance (the supply shrinks by as much)."""
        return self.send("burn_cby", account_instance(self.account.address), {"amount_cby": require_amount(amount_cby)})

    def mint_cby(self, to: str, amount_cby: int) -> dict[str, Any]:
        """Create `amount_cby` for `to`; only the deployment's genesis minter may (UNAUTHORIZED otherwise)."""
        return self.send("mint_cby", SUPPLY_KEY,
                         {"to": require_address(to, "to"), "amount_cby": require_amount(amount_cby)})

    # --- Epoch access ----------------------------------------------------------------------------

    def acquire_epoch_access(self, stream_id: str, target_key_epoch: int, *, beneficiary_account: str | None = None,
                             payer_account: str | None = None) -> KeyAccessReceipt:
        """Pay (as this account) for access to `stream_id` up to `target_key_epoch`; the receipt.

        The entitlement accrues to `beneficiary_account` (default: this account); a sponsor paying for
        someone else gets no access itself. A repeat within the entitlement charges nothing.
        """
        body: dict[str, Any] = {"stream_id": stream_id, "target_key_epoch": target_key_epoch}
        if beneficiary_account is not None:
            body["beneficiary_account"] = require_address(beneficiary_account, "beneficiary_account")
        if payer_account is not None:
            body["payer_account"] = require_address(payer_account, "payer_account")
        return receipt_of(self.send("acquire_epoch_access", paid_instance(stream_id), body))

    def renew_subscription(self, stream_id: str, target_key_epoch: int, *, beneficiary_account: str | None = None,
                           payer_account: str | None = None, account_key_id: int | None = None) -> KeyAccessReceipt:
        """Extend this account's subscription to `stream_id` up to `target_key_epoch` (PAYMENT_REQUIRED
        without an active subscription); the receipt of the purchase it makes."""
        body: dict[str, Any] = {"target_key_epoch": target_key_epoch}
        for name, value in (("beneficiary_account", beneficiary_account), ("payer_account", payer_account)):
            if value is not None:
                body[name] = require_address(value, name)
        if account_key_id is not None:
            body["account_key_id"] = account_key_id
        return receipt_of(self.send("renew_subscription", stream_id, body))

    # --- Reads -----------------------------------------------------------------------------------

    def balance(self, address: str | None = None) -> int:
        """The CBY balance of `address` (default: this account) as the projections show it."""
        info = self.api.account_info(address or self.account.address)
        value = as_int(info.get("balance_cby"))  # a number, or its decimal string past 2**53 - 1
        if type(value) is not int:
            raise MalformedRecordError(f"the account answer has no integer balance_cby: {sorted(info)}")
        return value

    def active_until(self, stream_id: str, address: str | None = None) -> int | None:
        """The last key epoch `address` (default: this account) may decrypt on `stream_id`, or None."""
        value = self.api.entitlement(stream_id, address or self.account.address).get("active_until_key_epoch")
        return value if type(value) is int else None

    def wait_for_balance(self, address: str, expected: int, *, timeout_s: float = 15.0) -> int:
        """Poll until the read side shows `address` holding `expected`; TIMEOUT otherwise."""
        return _poll(lambda: self.balance(address), lambda got: got == expected, timeout_s,
                     f"the balance of {address} to read {expected}")

    def wait_for_entitlement(self, stream_id: str, address: str, key_epoch: int, *, timeout_s: float = 15.0) -> int:
        """Poll until the read side shows `address` entitled to `stream_id` through `key_epoch`."""
        got: int = _poll(lambda: self.active_until(stream_id, address), lambda v: v is not None and v >= key_epoch,
                         timeout_s, f"{address}'s entitlement to {stream_id} to reach epoch {key_epoch}")
        return got


def _poll(read: Callable[[], Any], done: Callable[[Any], bool], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = read()
            if done(got):
                return got
        except NotReadyError:
            pass
        if time.monotonic() >= deadline:
            raise RequestTimeoutError(f"waited {timeout_s:g}s for {what}; the projections have not caught up "
                                      f"(check the workers with `watchtower status`)")
        time.sleep(0.1)
