"""The account instance (``acct:<address>``): `evolve_account`, the fold of its events into its state
(`account_state`).

An account holds a CBY balance, its account keys (CIP-7 AccountKeyRegistration), the actor
authorizations it granted, its own actors (CIP-7 actor.creator) and the spending allowances it gave
(CIP-7 "delegated spending authority"), plus replay records of its holder's commands.

**Own actors.** An actor is the account's own when the account recorded its creation with its own
signed ``create_actor`` (event ActorCreated; `watchtower account new-actor` sends it). No grant is
made and no per-stream grant slot is taken: an own actor is authorized on every stream of the
account until a revocation takes it back, on one stream (``revoke_actor`` naming it) or everywhere
(``revoke_actor`` with ``all_streams``). Records of earlier releases that made an actor its
account's own with an all-streams grant fold to the same standing.

**Spending allowances.** ``approve_spending`` lets a named spender sign purchases that the account
pays (``payer_account``), up to ``cap_cby`` CBY wei in all, on one stream or on any; a new approval
for the same (spender, stream) replaces the old one and starts from nothing spent;
``revoke_spending`` withdraws it. Each purchase debit a spender causes names it in the debit's
reply (``spent_by``, ``allowance_stream_id``), and the fold adds the amount to that allowance's
``spent_cby``, so the allowance is folded from the log like the balance. `account_commands`
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
    MAX_ACCOUNT_KEYS_PER_ACCOUNT,
    MAX_ACTOR_AUTHORIZATIONS_PER_STREAM,
    X25519_PUBLIC_KEY_BYTES,
)
from watchtower.protocol.errors import (
    InvalidArgumentError,
    MalformedRecordError,
    WatchtowerError,
)
from watchtower.protocol.event_names import (
    ACCOUNT_KEY_REGISTERED,
    ACCOUNT_KEY_REVOKED,
    ACTOR_AUTHORIZATION_GRANTED,
    ACTOR_AUTHORIZATION_REVOKED,
    ACTOR_CREATED,
    CBY_CREDITED,
    CBY_DEBITED,
    SPENDING_ALLOWANCE_GRANTED,
    SPENDING_ALLOWANCE_REVOKED,
)
from watchtower.protocol.ledger.account_state import (
    ACTIVE,
    ALL_STREAMS,
    ANY_STREAM,
    AUTHORIZATION_SCOPE,
    LEGACY_AUTHORIZATION_SCOPES,
    MAX_SPENDING_ALLOWANCES,
    REVOKED,
    AccountKeyRecord,
    AccountState,
    AllowanceRecord,
    AuthorizationRecord,
    authorization_key,
)
from watchtower.protocol.ledger.common import (
    CREDIT_REASONS,
    DEBIT_REASONS,
    MAX_CBY,
    check_event_envelope,
    event_int,
    record_caller,
)
from watchtower.protocol.ledger.events import (
    AccountKeyRegistered,
    AccountKeyRevoked,
    ActorAuthorizationGranted,
    ActorAuthorizationRevoked,
    ActorCreated,
    CbyCredited,
    CbyDebited,
    SpendingAllowanceGranted,
    SpendingAllowanceRevoked,
)
from watchtower.protocol.stream.state import Event
from watchtower.protocol.validation import require_text

ACCOUNT_EVENTS: Final = frozenset(
    {ACCOUNT_KEY_REGISTERED, ACCOUNT_KEY_REVOKED, ACTOR_AUTHORIZATION_GRANTED, ACTOR_AUTHORIZATION_REVOKED,
     ACTOR_CREATED, SPENDING_ALLOWANCE_GRANTED, SPENDING_ALLOWANCE_REVOKED, CBY_CREDITED, CBY_DEBITED}
)
SPENT_BY: Final = "spent_by"
ALLOWANCE_STREAM: Final = "allowance_stream_id"
"""The keys of a purchase debit's reply naming the spender and the allowance it spent (module docstring)."""
CREDIT_NUMBER: Final = "credit_number"
"""The key of a CbyCredited event's reply holding the credit's number at its account (module docstring)."""
# Debits the holder signed at this instance (a purchase debit's command went to the paid stream).
_HOLDER_DEBITS: Final = frozenset({"transfer", "burn"})
_ACCOUNT_BODIES: Final = (AccountKeyRegistered, AccountKeyRevoked, ActorAuthorizationGranted,
                          ActorAuthorizationRevoked, ActorCreated, SpendingAllowanceGranted,
                          SpendingAllowanceRevoked, CbyCredited, CbyDebited)

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


def _created(state: AccountState, event: Event, body: ActorCreated) -> tuple[AccountState, bool]:
    actor = require_address(body.actor, "actor")
    if actor == state.account:
        raise InvalidArgumentError("an account does not create itself")
    if state.own_actor(actor):
        return state, True  # created again: recorded, nothing changes
    count = state.active_per_stream.get(ALL_STREAMS, 0)
    if count >= MAX_ACTOR_AUTHORIZATIONS_PER_STREAM:
        raise InvalidArgumentError(f"the account already has {count} own actors")
    record = AuthorizationRecord(actor, ALL_STREAMS, ACTIVE, event.block_height)
    return dataclasses.replace(
        state,
        authorizations=state.authorizations.set(authorization_key(actor, ALL_STREAMS), record),
        active_per_stream=state.active_per_stream.set(ALL_STREAMS, count + 1),
    ), True


def _allowance_granted(state: AccountState, event: Event,
                       body: SpendingAllowanceGranted) -> tuple[AccountState, bool]:
    spender = require_address(body.spender, "spender")
    stream_id = body.stream_id if body.stream_id == ANY_STREAM else require_text(body.stream_id, "stream_id")
    cap = event_int(body.cap_cby, "cap_cby", minimum=1)
    if spender == state.account:
        raise InvalidArgumentError("an account does not give itself an allowance")
    existing = state.allowance(spender, stream_id)
    replacing = existing is not None and existing.status == ACTIVE
    if not replacing and state.active_allowances >= MAX_SPENDING_ALLOWANCES:
        raise InvalidArgumentError(f"the account already has {MAX_SPENDING_ALLOWANCES} ACTIVE allowances")
    record = AllowanceRecord(spender, stream_id, cap, 0, ACTIVE, event.block_height)
    return dataclasses.replace(
        state, allowances=state.allowances.set(authorization_key(spender, stream_id), record)), True


def _allowance_revoked(state: AccountState, event: Event,
                       body: SpendingAllowanceRevoked) -> tuple[AccountState, bool]:
    spender, stream_id = str(body.spender), str(body.stream_id)
    existing = state.allowance(spender, stream_id)
    if existing is None or existing.status != ACTIVE:
        raise InvalidArgumentError(f"{spender} holds no ACTIVE allowance on {stream_id!r}")
    record = dataclasses.replace(existing, status=REVOKED, revoked_at_block=event.block_height)
    return dataclasses.replace(
        state, allowances=state.allowances.set(authorization_key(spender, stream_id), record)), True


def _spend_allowance(state: AccountState, event: Event, amount: int) -> AccountState:
    """The account after a spender's purchase debit of `amount` (its reply names the allowance)."""
    spender = require_address(event.reply.get(SPENT_BY), SPENT_BY)
    stream_id = event.reply.get(ALLOWANCE_STREAM)
    if not isinstance(stream_id, str):
        raise InvalidArgumentError(f"a spender's debit names the allowance's stream ({ALLOWANCE_STREAM})")
    allowance = state.allowance(spender, stream_id)
    if allowance is None or allowance.status != ACTIVE or allowance.remaining_cby < amount:
        raise InvalidArgumentError(f"{spender} holds no ACTIVE allowance on {stream_id!r} with {amount} left")
    spent = dataclasses.replace(allowance, spent_cby=allowance.spent_cby + amount)
    return dataclasses.replace(state, allowances=state.allowances.set(authorization_key(spender, stream_id), spent))


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


def _debited(state: AccountState, event: Event, body: CbyDebited) -> tuple[AccountState, bool]:
    amount, reason = _movement(body, DEBIT_REASONS)
    if amount > state.balance_cby:
        raise InvalidArgumentError(f"a debit of {amount} exceeds the balance {state.balance_cby}")
    if reason == "purchase" and SPENT_BY in event.reply:
        state = _spend_allowance(state, event, amount)
    return dataclasses.replace(state, balance_cby=state.balance_cby - amount), reason in _HOLDER_DEBITS


_APPLY: Final[Mapping[str, Callable[[AccountState, Event, Any], tuple[AccountState, bool]]]] = {
    ACCOUNT_KEY_REGISTERED: _key_registered,
    ACCOUNT_KEY_REVOKED: _key_revoked,
    ACTOR_AUTHORIZATION_GRANTED: _granted,
    ACTOR_AUTHORIZATION_REVOKED: _actor_revoked,
    ACTOR_CREATED: _created,
    SPENDING_ALLOWANCE_GRANTED: _allowance_granted,
    SPENDING_ALLOWANCE_REVOKED: _allowance_revoked,
    CBY_CREDITED: _credited,
    CBY_DEBITED: _debited,
}
