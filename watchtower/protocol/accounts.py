"""The account instance (``acct:<address>``): its state and `evolve_account`, the fold of its events.

An account holds a CBY balance, its account keys (CIP-7 AccountKeyRegistration) and the actor
authorizations it granted, plus replay records of its holder's commands. `account_commands`
decides commands and forwards against it (the rules and their order are documented there).

`evolve_account` re-checks what a forged log record could break (a debit below zero, a credit that
overflows, key ids out of order, a ninth active key, a 65th active authorization, revoking what is
not ACTIVE, an event of another account) and raises MALFORMED_RECORD so the host quarantines it.
Only events caused by the holder's own commands move the holder's replay record; credits and
purchase debits descend from commands sent to other instances.

**A credit applies once.** Forwards are exactly once (`ledger`), so a genuine log never holds the
same credit twice; but where anyone can append to ``events`` (a plaintext broker), a verbatim copy
of a genuine CbyCredited would otherwise be counted again. So each credit is numbered: the
account's writer gives the n-th credit it decides the number n (`credit_reply`, in the event's
``reply``: the event's body schema stays as it is), and the fold applies a numbered credit only
when its number is the next one (`AccountState.credits` + 1). A copy repeats a number the fold has
passed and is refused (quarantined) whatever its age, with one integer of state per account, which
snapshots carry like the balance. A credit written before credits were numbered carries no
number: the fold applies it as before, but only ahead of the account's first numbered credit, so
once an account has received a credit from this release, no unnumbered record (a copy of an older
one) applies to it either.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Final

from watchtower.protocol.addresses import require_address
from watchtower.protocol.constants import (
    ACCOUNT_KEY_SCHEME_X25519,
    AUTHORIZATION_SCOPE_STREAM_DECRYPT,
    MAX_ACCOUNT_KEYS_PER_ACCOUNT,
    MAX_ACTOR_AUTHORIZATIONS_PER_STREAM,
    X25519_PUBLIC_KEY_BYTES,
)
from watchtower.protocol.errors import (
    InvalidArgumentError,
    MalformedRecordError,
    WatchtowerError,
)
from watchtower.protocol.events import (
    AccountKeyRegistered,
    AccountKeyRevoked,
    ActorAuthorizationGranted,
    ActorAuthorizationRevoked,
    CbyCredited,
    CbyDebited,
)
from watchtower.protocol.ledger import (
    ACCOUNT_PREFIX,
    CREDIT_REASONS,
    DEBIT_REASONS,
    MAX_CBY,
    account_instance,
    check_event_envelope,
    event_int,
    record_caller,
)
from watchtower.protocol.stream_state import (
    ACCOUNT_KEY_REGISTERED,
    ACCOUNT_KEY_REVOKED,
    ACTOR_AUTHORIZATION_GRANTED,
    ACTOR_AUTHORIZATION_REVOKED,
    CBY_CREDITED,
    CBY_DEBITED,
    CallerRecord,
    Event,
    FrozenMap,
)
from watchtower.protocol.validation import require_text

ACTIVE: Final = "ACTIVE"
REVOKED: Final = "REVOKED"
AUTHORIZATION_SCOPE: Final = AUTHORIZATION_SCOPE_STREAM_DECRYPT
"""CIP-7 ActorAuthorization.scope: what every new grant records."""
LEGACY_AUTHORIZATION_SCOPES: Final = frozenset({"DECRYPT"})
"""What earlier releases recorded for the same scope: still folded, never written."""
ALL_STREAMS: Final = ""
"""The stream_id of an own-actor grant: CIP-7's "the account owner's own actors (actor.creator ==
account) are auto-authorized unless explicitly revoked". In this deployment an account makes an
actor its own once (``authorize_actor`` with ``"all_streams": true``); that actor is then authorized
on every stream of the account without a grant per stream, until it is revoked on one stream
(``revoke_actor`` naming the stream) or everywhere (``revoke_actor`` with ``all_streams``)."""
ACCOUNT_EVENTS: Final = frozenset(
    {ACCOUNT_KEY_REGISTERED, ACCOUNT_KEY_REVOKED, ACTOR_AUTHORIZATION_GRANTED, ACTOR_AUTHORIZATION_REVOKED,
     CBY_CREDITED, CBY_DEBITED}
)
CREDIT_NUMBER: Final = "credit_number"
"""The key of a CbyCredited event's reply holding the credit's number at its account (module docstring)."""
# Debits the holder signed at this instance (a purchase debit's command went to the paid stream).
_HOLDER_DEBITS: Final = frozenset({"transfer", "burn"})
_ACCOUNT_BODIES: Final = (AccountKeyRegistered, AccountKeyRevoked, ActorAuthorizationGranted,
                          ActorAuthorizationRevoked, CbyCredited, CbyDebited)


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

    def own_actor(self, actor: str) -> bool:
        """Whether `actor` is one of the account's own actors (an ACTIVE all-streams grant)."""
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


# --- evolve --------------------------------------------------------------------------------------


def evolve_account(state: AccountState, event: Event) -> AccountState:
    """The account after `event`; MALFORMED_RECORD for an event that cannot apply (quarantine)."""
    check_event_envelope(event, state.instance)
    body = event.body
    if not isinstance(body, _ACCOUNT_BODIES):
        raise MalformedRecordError(f"an account does not fold {event.type} events")
    try:
        if body.account != state.account:
            raise InvalidArgumentError(f"the event names account {body.account!r}")
        changed, holder_command = _APPLY[event.type](state, event, body)
    except WatchtowerError as exc:
        raise MalformedRecordError(f"{event.type} breaks a rule ({exc.code}): {exc.message}") from None
    except (TypeError, ValueError) as exc:
        raise MalformedRecordError(f"{event.type} body is malformed: {exc!r}") from None
    if holder_command:
        changed = dataclasses.replace(changed, callers=record_caller(changed.callers, event))
    return changed


def _key_registered(state: AccountState, event: Event, body: AccountKeyRegistered) -> tuple[AccountState, bool]:
    key_id = event_int(body.account_key_id, "account_key_id", minimum=1)
    if key_id != state.next_key_id:
        raise InvalidArgumentError(f"account key id {key_id} does not follow {state.next_key_id - 1}")
    if body.scheme != ACCOUNT_KEY_SCHEME_X25519:
        raise InvalidArgumentError(f"scheme {body.scheme!r} is not X25519")
    key = body.public_key
    if not isinstance(key, bytes) or len(key) != X25519_PUBLIC_KEY_BYTES or key == bytes(X25519_PUBLIC_KEY_BYTES):
        raise InvalidArgumentError("public_key is not a 32-byte, non-zero X25519 key")
    if state.active_keys >= MAX_ACCOUNT_KEYS_PER_ACCOUNT:
        raise InvalidArgumentError(f"the account already has {MAX_ACCOUNT_KEYS_PER_ACCOUNT} ACTIVE keys")
    record = AccountKeyRecord(key_id, ACCOUNT_KEY_SCHEME_X25519, key, ACTIVE, event.block_height)
    return dataclasses.replace(state, keys=(*state.keys, record), next_key_id=key_id + 1), True


def _key_revoked(state: AccountState, event: Event, body: AccountKeyRevoked) -> tuple[AccountState, bool]:
    key_id = event_int(body.account_key_id, "account_key_id", minimum=1)
    key = state.key(key_id)
    if key is None or key.status != ACTIVE:
        raise InvalidArgumentError(f"key {key_id} is not an ACTIVE key of the account")
    revoked = dataclasses.replace(key, status=REVOKED, revoked_at_block=event.block_height)
    return dataclasses.replace(state, keys=tuple(revoked if k is key else k for k in state.keys)), True


def _granted(state: AccountState, event: Event, body: ActorAuthorizationGranted) -> tuple[AccountState, bool]:
    actor = require_address(body.actor, "actor")
    stream_id = body.stream_id if body.stream_id == ALL_STREAMS else require_text(body.stream_id, "stream_id")
    if (body.scope != AUTHORIZATION_SCOPE and body.scope not in LEGACY_AUTHORIZATION_SCOPES) \
            or actor == state.account:
        raise InvalidArgumentError(f"an authorization has scope {AUTHORIZATION_SCOPE} and names another account")
    existing = state.authorization(actor, stream_id)
    if existing is not None and existing.status == ACTIVE:
        return state, True  # a repeated grant: recorded, nothing changes
    count = state.active_per_stream.get(stream_id, 0)
    if count >= MAX_ACTOR_AUTHORIZATIONS_PER_STREAM:
        raise InvalidArgumentError(f"stream {stream_id!r} already has {count} ACTIVE authorizations")
    record = AuthorizationRecord(actor, stream_id, ACTIVE, event.block_height)
    return dataclasses.replace(
        state,
        authorizations=state.authorizations.set(authorization_key(actor, stream_id), record),
        active_per_stream=state.active_per_stream.set(stream_id, count + 1),
    ), True


def _actor_revoked(state: AccountState, event: Event, body: ActorAuthorizationRevoked) -> tuple[AccountState, bool]:
    actor, stream_id = str(body.actor), str(body.stream_id)
    existing = state.authorization(actor, stream_id)
    if existing is None and stream_id != ALL_STREAMS and state.own_actor(actor):
        # An own actor revoked on one stream: the revocation is recorded there; no grant slot was taken.
        record = AuthorizationRecord(actor, stream_id, REVOKED, event.block_height, event.block_height)
        return dataclasses.replace(
            state, authorizations=state.authorizations.set(authorization_key(actor, stream_id), record)), True
    if existing is None or existing.status != ACTIVE:
        raise InvalidArgumentError(f"actor {actor} holds no ACTIVE authorization on {stream_id!r}")
    record = dataclasses.replace(existing, status=REVOKED, revoked_at_block=event.block_height)
    return dataclasses.replace(
        state,
        authorizations=state.authorizations.set(authorization_key(actor, stream_id), record),
        active_per_stream=state.active_per_stream.set(stream_id, state.active_per_stream.get(stream_id, 1) - 1),
    ), True


def _movement(body: CbyCredited | CbyDebited, reasons: frozenset[str]) -> tuple[int, str]:
    amount = event_int(body.amount_cby, "amount_cby", minimum=1)
    if body.reason not in reasons:
        raise InvalidArgumentError(f"reason {body.reason!r} is not one of {sorted(reasons)}")
    if not isinstance(body.ref, str) or not isinstance(body.counterparty, str):
        raise InvalidArgumentError("ref and counterparty are text")
    return amount, str(body.reason)


def credit_reply(state: AccountState) -> dict[str, int]:
    """The reply of the next credit the account's writer decides: its number (module docstring)."""
    return {CREDIT_NUMBER: state.credits + 1}


def _credited(state: AccountState, event: Event, body: CbyCredited) -> tuple[AccountState, bool]:
    amount, reason = _movement(body, CREDIT_REASONS)
    if state.balance_cby + amount > MAX_CBY:
        raise InvalidArgumentError(f"the credit takes the balance above {MAX_CBY}")
    balance = state.balance_cby + amount
    number = event.reply.get(CREDIT_NUMBER)
    if number is not None:
        number = event_int(number, CREDIT_NUMBER, minimum=1)
        if number <= state.credits:
            raise InvalidArgumentError(f"credit {number} ({reason}, ref {body.ref}) was already applied to the "
                                       "account: this record is a copy")
        if number != state.credits + 1:
            raise InvalidArgumentError(f"credit number {number} does not follow {state.credits}, the account's last")
        return dataclasses.replace(state, balance_cby=balance, credits=number), False
    if state.credits:
        raise InvalidArgumentError(f"a credit without a number ({reason}, ref {body.ref}) follows numbered credit "
                                   f"{state.credits}; every credit since the first numbered one carries its number")
    return dataclasses.replace(state, balance_cby=balance), False


def _debited(state: AccountState, _event: Event, body: CbyDebited) -> tuple[AccountState, bool]:
    amount, reason = _movement(body, DEBIT_REASONS)
    if amount > state.balance_cby:
        raise InvalidArgumentError(f"a debit of {amount} exceeds the balance {state.balance_cby}")
    return dataclasses.replace(state, balance_cby=state.balance_cby - amount), reason in _HOLDER_DEBITS


_APPLY: Final[Mapping[str, Callable[[AccountState, Event, Any], tuple[AccountState, bool]]]] = {
    ACCOUNT_KEY_REGISTERED: _key_registered,
    ACCOUNT_KEY_REVOKED: _key_revoked,
    ACTOR_AUTHORIZATION_GRANTED: _granted,
    ACTOR_AUTHORIZATION_REVOKED: _actor_revoked,
    CBY_CREDITED: _credited,
    CBY_DEBITED: _debited,
}
