"""An account's state (``acct:<address>``) and what the rules ask of it.

`AccountState` holds an account's CBY balance, its account keys (CIP-7 AccountKeyRegistration),
the actor authorizations it granted and its own actors, the spending allowances it gave, the
number of the last credit it folded, and replay records of its holder's commands; the records
are frozen, so a state is a value. Its queries answer the rules' questions: which key, whether
an actor is authorized on a stream (CIP-7 ActorAuthorization, own actors included), which
allowance a spender's purchase spends. `accounts` folds events into it (and states the rules it
keeps), `account_commands` decides commands against it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from watchtower.protocol.addresses import require_address
from watchtower.protocol.constants import AUTHORIZATION_SCOPE_STREAM_DECRYPT
from watchtower.protocol.errors import InsufficientCbyBalanceError, InvalidArgumentError
from watchtower.protocol.ledger.common import ACCOUNT_PREFIX, account_instance
from watchtower.protocol.stream.state import CallerRecord, FrozenMap

ACTIVE: Final = "ACTIVE"
REVOKED: Final = "REVOKED"
AUTHORIZATION_SCOPE: Final = AUTHORIZATION_SCOPE_STREAM_DECRYPT
"""CIP-7 ActorAuthorization.scope: what every new grant records."""
LEGACY_AUTHORIZATION_SCOPES: Final = frozenset({"DECRYPT"})
"""What earlier releases recorded for the same scope: still folded, never written."""
ALL_STREAMS: Final = ""
"""The stream_id of an own actor's record: CIP-7's "the account owner's own actors (actor.creator ==
account) are auto-authorized unless explicitly revoked". An actor becomes its account's own when
the account records its creation (``create_actor``, event ActorCreated; module docstring); earlier
releases did the same with ``authorize_actor`` and ``"all_streams": true``, which still works. It is
then authorized on every stream of the account without a grant per stream, until it is revoked on
one stream (``revoke_actor`` naming the stream) or everywhere (``revoke_actor`` with ``all_streams``)."""
ANY_STREAM: Final = ""
"""The stream_id of a spending allowance good on every stream."""
MAX_SPENDING_ALLOWANCES: Final = 64
"""The most ACTIVE spending allowances one account holds (a bound on its state)."""


@dataclasses.dataclass(frozen=True, slots=True)
class AccountKeyRecord:
    """A CIP-7 AccountKeyRegistration."""

    account_key_id: int
    scheme: str
    public_key: bytes
    status: str
    registered_at_block: int
    revoked_at_block: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class AuthorizationRecord:
    """A CIP-7 ActorAuthorization of `actor` to decrypt `stream_id` for the account."""

    actor: str
    stream_id: str
    status: str
    granted_at_block: int
    revoked_at_block: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class AllowanceRecord:
    """A spending allowance: `spender` may pay up to `cap_cby` from the account on `stream_id`
    (ANY_STREAM: every stream); `spent_cby` is what it has spent under this grant."""

    spender: str
    stream_id: str
    cap_cby: int
    spent_cby: int
    status: str
    granted_at_block: int
    revoked_at_block: int | None = None

    @property
    def remaining_cby(self) -> int:
        """What the spender may still spend under this grant."""
        return self.cap_cby - self.spent_cby

    def to_dict(self) -> dict[str, Any]:
        """The allowance as JSON (amounts as text: they may pass 2**53)."""
        return {"spender": self.spender, "stream_id": self.stream_id, "cap_cby": str(self.cap_cby),
                "spent_cby": str(self.spent_cby), "remaining_cby": str(self.remaining_cby), "status": self.status,
                "granted_at_block": self.granted_at_block, "revoked_at_block": self.revoked_at_block}


def authorization_key(actor: str, stream_id: str) -> str:
    """The map key of an authorization (an address has a fixed length, so the join is unambiguous)."""
    return actor + stream_id


@dataclasses.dataclass(frozen=True, slots=True)
class AccountState:
    """One account. `keys` is in id order; `active_per_stream` counts ACTIVE authorizations;
    `credits` is the number of the last numbered credit folded (module docstring: a credit applies once)."""

    account: str
    balance_cby: int = 0
    keys: tuple[AccountKeyRecord, ...] = ()
    next_key_id: int = 1
    authorizations: FrozenMap[AuthorizationRecord] = dataclasses.field(default_factory=FrozenMap)
    active_per_stream: FrozenMap[int] = dataclasses.field(default_factory=FrozenMap)
    callers: FrozenMap[CallerRecord] = dataclasses.field(default_factory=FrozenMap)
    credits: int = 0
    allowances: FrozenMap[AllowanceRecord] = dataclasses.field(default_factory=FrozenMap)

    @classmethod
    def initial(cls, instance: str) -> AccountState:
        """The state of an account nothing has happened to, from its instance key."""
        if not instance.startswith(ACCOUNT_PREFIX):
            raise InvalidArgumentError(f"an account instance key starts with {ACCOUNT_PREFIX!r}, got {instance!r}")
        return cls(require_address(instance[len(ACCOUNT_PREFIX):], "account"))

    @property
    def instance(self) -> str:
        """The instance key (``acct:<address>``)."""
        return account_instance(self.account)

    @property
    def active_keys(self) -> int:
        """How many keys are ACTIVE."""
        return sum(1 for k in self.keys if k.status == ACTIVE)

    def key(self, account_key_id: int) -> AccountKeyRecord | None:
        """The key with this id, if any."""
        return next((k for k in self.keys if k.account_key_id == account_key_id), None)

    def authorization(self, actor: str, stream_id: str) -> AuthorizationRecord | None:
        """The authorization of `actor` on `stream_id`, if any."""
        return self.authorizations.get(authorization_key(actor, stream_id))

    def allowance(self, spender: str, stream_id: str) -> AllowanceRecord | None:
        """The allowance of `spender` on `stream_id` (ANY_STREAM: the every-stream one), if any."""
        return self.allowances.get(authorization_key(spender, stream_id))

    def spending_allowance(self, spender: str, stream_id: str) -> AllowanceRecord | None:
        """The ACTIVE allowance a purchase by `spender` on `stream_id` spends: the stream's own, else
        the any-stream one."""
        for where in (stream_id, ANY_STREAM):
            found = self.allowance(spender, where)
            if found is not None and found.status == ACTIVE:
                return found
        return None

    @property
    def active_allowances(self) -> int:
        """How many allowances are ACTIVE."""
        return sum(1 for a in self.allowances.values() if a.status == ACTIVE)

    def own_actor(self, actor: str) -> bool:
        """Whether `actor` is one of the account's own actors (created by it, not revoked everywhere)."""
        grant = self.authorization(actor, ALL_STREAMS)
        return grant is not None and grant.status == ACTIVE

    def actor_authorized(self, actor: str, stream_id: str) -> bool:
        """CIP-7 ActorAuthorization: the account itself; an actor with an ACTIVE grant on the stream;
        or one of the account's own actors, unless revoked on that stream (a grant or revocation on
        the stream decides before the own-actor rule)."""
        if actor == self.account:
            return True
        grant = self.authorization(actor, stream_id)
        if grant is not None:
            return grant.status == ACTIVE
        return self.own_actor(actor)


def insufficient(state: AccountState, amount: int, what: str) -> InsufficientCbyBalanceError:
    """INSUFFICIENT_CBY_BALANCE for `amount` against the account's balance, with details."""
    return InsufficientCbyBalanceError(
        f"account {state.account} holds {state.balance_cby} CBY wei but {what} needs {amount}; fund it with at "
        f"least {amount - state.balance_cby} more and retry",
        details={"account": state.account, "balance_cby": str(state.balance_cby), "required_cby": str(amount)},
    )


__all__ = [
    "ACTIVE",
    "ALL_STREAMS",
    "ANY_STREAM",
    "AUTHORIZATION_SCOPE",
    "LEGACY_AUTHORIZATION_SCOPES",
    "MAX_SPENDING_ALLOWANCES",
    "REVOKED",
    "AccountKeyRecord",
    "AccountState",
    "AllowanceRecord",
    "AuthorizationRecord",
    "authorization_key",
    "insufficient",
]
