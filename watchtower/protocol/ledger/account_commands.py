"""Deciding an account's commands (`account_state` holds the state, `accounts` its fold).

`decide_account(state, input, block_height)` decides a signed command of the account holder or a
forward from another instance. Commands are checked in this order: the envelope names
``acct:<caller>`` (UNAUTHORIZED otherwise: CIP-7 "verify the transaction is signed by account"),
the signature (INVALID_SIGNATURE), replay protection (an exact retry gets the original reply with
``"duplicate": true``; otherwise the nonce must grow), then the method's own rules:

- register_account_key: scheme X25519 and a 32-byte, not all-zero key (INVALID_ACCOUNT_KEY), fewer
  than 8 ACTIVE keys (ACCOUNT_KEY_LIMIT_REACHED); ids count up from 1 per account;
- revoke_account_key: an id the account never registered is UNAUTHORIZED (not a key of the
  signer's to revoke), a revoked one KEY_REVOKED: the two codes CIP-7 lists for the method;
- authorize_actor: at most 64 ACTIVE authorizations per (account, stream)
  (AUTHORIZATION_LIMIT_REACHED); revoke_actor needs an ACTIVE one or an own actor standing on the
  stream (UNAUTHORIZED otherwise, CIP-7's one code for the method);
- create_actor: records that the account created ``actor`` (CIP-7 actor.creator): the actor must
  exist (UNAUTHORIZED, as for authorize_actor) and the account holds at most 64 own actors
  (AUTHORIZATION_LIMIT_REACHED); repeating it for an own actor changes nothing;
- approve_spending: ``spender`` (an address some key pair holds, not the account) may pay the
  account's purchases up to ``cap_cby`` on ``stream_id`` (absent: any stream); at most 64 ACTIVE
  allowances (AUTHORIZATION_LIMIT_REACHED); revoke_spending needs an ACTIVE one (UNAUTHORIZED);
- transfer_cby / burn_cby: amounts in 1..2**63-1 (INVALID_ARGUMENT), at most the balance
  (INSUFFICIENT_CBY_BALANCE with the balance and amount in details); a transfer's ``to`` is an
  address some key pair holds (`holds_a_key_pair`), never the zero address or another point no one
  can sign for, where the CBY would be stranded for good (INVALID_ARGUMENT).

Forwards from other instances (credits, purchase debits, replay charges) are decided in
`account_forwards`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from nacl.bindings import crypto_core_ed25519_is_valid_point

from watchtower.protocol.commands import (
    ABSENT,
    ActorAuthorization,
    ApproveSpending,
    BurnCby,
    CreateActor,
    RegisterAccountKey,
    RevokeAccountKey,
    RevokeSpending,
    TransferCby,
    given,
    read_body,
)
from watchtower.protocol.confidential.envelope import validate_x25519_public_key
from watchtower.protocol.constants import (
    ACCOUNT_KEY_SCHEME_X25519,
    MAX_ACCOUNT_KEYS_PER_ACCOUNT,
    MAX_ACTOR_AUTHORIZATIONS_PER_STREAM,
)
from watchtower.protocol.errors import (
    AccountKeyLimitReachedError,
    AuthorizationLimitReachedError,
    InvalidArgumentError,
    KeyRevokedError,
    UnauthorizedError,
)
from watchtower.protocol.ledger.account_forwards import decide_forward
from watchtower.protocol.ledger.account_state import (
    ACTIVE,
    ALL_STREAMS,
    ANY_STREAM,
    AUTHORIZATION_SCOPE,
    MAX_SPENDING_ALLOWANCES,
    REVOKED,
    AccountState,
    insufficient,
)
from watchtower.protocol.ledger.common import (
    ACCOUNT_METHODS,
    SUPPLY_KEY,
    CbyBurn,
    CbyCredit,
    LedgerDecision,
    Origin,
    PurchaseDebit,
    ReplayCharge,
    Routed,
    account_instance,
    make_event,
    replay_record,
)
from watchtower.protocol.ledger.events import (
    AccountKeyRegistered,
    AccountKeyRevoked,
    ActorAuthorizationGranted,
    ActorAuthorizationRevoked,
    ActorCreated,
    CbyDebited,
    SpendingAllowanceGranted,
    SpendingAllowanceRevoked,
)
from watchtower.protocol.signed_command import Command, Method, verify_command


def decide_account(state: AccountState, item: Command | CbyCredit | PurchaseDebit | ReplayCharge, *,
                   block_height: int) -> LedgerDecision:
    """Decide a signed command or a forward against one account (module docstring for the rules)."""
    if isinstance(item, CbyCredit | PurchaseDebit | ReplayCharge):
        return decide_forward(state, item, block_height=block_height)
    cmd = item
    if cmd.method not in ACCOUNT_METHODS:
        raise InvalidArgumentError(f"{cmd.method} is not an account method")
    if cmd.stream_id != account_instance(cmd.caller):
        raise UnauthorizedError(
            f"{cmd.method} changes the signer's own account only: {cmd.caller} may send it to "
            f"{account_instance(cmd.caller)!r}, not to {cmd.stream_id!r}"
        )
    if cmd.stream_id != state.instance:
        raise InvalidArgumentError(f"a command for {cmd.stream_id!r} reached {state.instance!r}; "
                                   "key it by its stream_id")
    verify_command(cmd)
    record = replay_record(state.callers, cmd, block_height)
    if record is not None:
        return LedgerDecision((), {**record.last_reply, "duplicate": True})
    origin = Origin.of(cmd)
    return _HANDLERS[cmd.method](state, cmd, origin, block_height)


def _register_key(state: AccountState, cmd: Command, origin: Origin, height: int) -> LedgerDecision:
    key = read_body(cmd, RegisterAccountKey).public_key
    # Refuses the all-zero key and every other small-order point: a sealed box to one is readable by anyone.
    validate_x25519_public_key(key)
    if state.active_keys >= MAX_ACCOUNT_KEYS_PER_ACCOUNT:
        raise AccountKeyLimitReachedError(
            f"account {state.account} already has {MAX_ACCOUNT_KEYS_PER_ACCOUNT} ACTIVE keys; revoke one "
            "(revoke_account_key) before registering another",
            details={"active_keys": state.active_keys},
        )
    key_id = state.next_key_id
    reply = {"account": state.account, "account_key_id": key_id, "scheme": ACCOUNT_KEY_SCHEME_X25519,
             "public_key_hex": key.hex(), "status": ACTIVE, "registered_at_block": height}
    body_out = AccountKeyRegistered(account=state.account, account_key_id=key_id, scheme=ACCOUNT_KEY_SCHEME_X25519,
                                    public_key=key)
    return LedgerDecision((make_event(state.instance, height, origin, reply, body_out),), reply)


def _revoke_key(state: AccountState, cmd: Command, origin: Origin, height: int) -> LedgerDecision:
    key_id = read_body(cmd, RevokeAccountKey).account_key_id
    key = state.key(key_id)
    if key is None:
        raise UnauthorizedError(f"account {state.account} has no key {key_id}, so it is not the signer's to revoke; "
                                "list the account's keys (`watchtower account keys list`) and name one of them",
                                details={"account_key_id": key_id})
    if key.status != ACTIVE:
        raise KeyRevokedError(f"key {key_id} of account {state.account} is already revoked (block "
                              f"{key.revoked_at_block})", details={"account_key_id": key_id})
    reply = {"account": state.account, "account_key_id": key_id, "status": REVOKED, "revoked_at_block": height}
    body = AccountKeyRevoked(account=state.account, account_key_id=key_id)
    return LedgerDecision((make_event(state.instance, height, origin, reply, body),), reply)


def _actor_and_stream(state: AccountState, cmd: Command) -> tuple[str, str]:
    """(actor, stream id); the stream id is ALL_STREAMS for ``"all_streams": true`` (an own actor)."""
    body = read_body(cmd, ActorAuthorization)
    actor, stream_id = body.actor, body.stream_id
    if body.all_streams == (stream_id is not ABSENT):
        raise InvalidArgumentError('name one stream ("stream_id") or every stream of the account '
                                   '("all_streams": true: the account\'s own actor), not both or neither')
    stream_id = given(stream_id, ALL_STREAMS)
    if actor == state.account:
        raise InvalidArgumentError("an account is always authorized for itself; name another actor")
    return actor, stream_id


def holds_a_key_pair(address: str) -> bool:
    """Whether `address` (a well-formed address) is an ed25519 public key some key pair holds: a
    point of the curve's prime-order subgroup, which every key pair's public key is. The zero
    address, the other small-order points and 32 bytes off the curve are not: no one can ever sign
    as them."""
    return bool(crypto_core_ed25519_is_valid_point(bytes.fromhex(address[2:])))


def require_actor_exists(actor: str) -> None:
    """CIP-7 authorize_actor step 2, "validate actor address exists": UNAUTHORIZED unless `actor` is an
    ed25519 public key some key pair holds (a valid curve point of prime order).

    In this deployment an address exists exactly when a key pair can sign for it: only such an
    address can ever sign a command, register an account key or ask the key manager for anything.
    Any other 32 bytes (a typo, a hash, a made-up or small-order point) can never act, so
    authorizing it is refused. (The account's writer sees only its own account, one aggregate per
    account, so it cannot look up another address's history; this check needs none.)
    """
    if not holds_a_key_pair(actor):
        raise UnauthorizedError(
            f"actor {actor} does not exist: it is not an ed25519 public key any key pair holds, so it can never "
            "sign a request; check the address (`watchtower account show` prints an account's own)",
            details={"actor": actor})


def _authorize(state: AccountState, cmd: Command, origin: Origin, height: int) -> LedgerDecision:
    actor, stream_id = _actor_and_stream(state, cmd)
    require_actor_exists(actor)
    existing = state.authorization(actor, stream_id)
    already = existing is not None and existing.status == ACTIVE
    count = state.active_per_stream.get(stream_id, 0)
    if not already and count >= MAX_ACTOR_AUTHORIZATIONS_PER_STREAM:
        raise AuthorizationLimitReachedError(
            f"account {state.account} already authorizes {MAX_ACTOR_AUTHORIZATIONS_PER_STREAM} actors on stream "
            f"{stream_id!r}; revoke one (revoke_actor) first",
            details={"active_authorizations": count},
        )
    reply = {"account": state.account, "actor": actor, "stream_id": stream_id, "scope": AUTHORIZATION_SCOPE,
             "status": ACTIVE, "granted_at_block": height}
    body = ActorAuthorizationGranted(account=state.account, actor=actor, stream_id=stream_id,
                                     scope=AUTHORIZATION_SCOPE)
    return LedgerDecision((make_event(state.instance, height, origin, reply, body),), reply)


def _revoke_actor(state: AccountState, cmd: Command, origin: Origin, height: int) -> LedgerDecision:
    actor, stream_id = _actor_and_stream(state, cmd)
    existing = state.authorization(actor, stream_id)
    own_here = existing is None and stream_id != ALL_STREAMS and state.own_actor(actor)
    if not own_here and (existing is None or existing.status != ACTIVE):
        raise UnauthorizedError(f"actor {actor} holds no ACTIVE authorization on stream {stream_id!r} of "
                                f"account {state.account}, so there is nothing of the signer's to revoke; "
                                "`watchtower account info` lists the account's authorizations",
                                details={"actor": actor, "stream_id": stream_id})
    reply = {"account": state.account, "actor": actor, "stream_id": stream_id, "status": REVOKED,
             "revoked_at_block": height}
    body = ActorAuthorizationRevoked(account=state.account, actor=actor, stream_id=stream_id)
    return LedgerDecision((make_event(state.instance, height, origin, reply, body),), reply)


def _create_actor(state: AccountState, cmd: Command, origin: Origin, height: int) -> LedgerDecision:
    actor = read_body(cmd, CreateActor).actor
    if actor == state.account:
        raise InvalidArgumentError("an account is always authorized for itself; name the actor it created")
    require_actor_exists(actor)
    count = state.active_per_stream.get(ALL_STREAMS, 0)
    if not state.own_actor(actor) and count >= MAX_ACTOR_AUTHORIZATIONS_PER_STREAM:
        raise AuthorizationLimitReachedError(
            f"account {state.account} already has {count} own actors; revoke one (revoke_actor with all_streams) "
            "first", details={"own_actors": count})
    reply = {"account": state.account, "actor": actor, "own_actor": True, "status": ACTIVE, "created_at_block": height}
    body = ActorCreated(account=state.account, actor=actor)
    return LedgerDecision((make_event(state.instance, height, origin, reply, body),), reply)


def _spender_and_stream(state: AccountState, body: ApproveSpending | RevokeSpending) -> tuple[str, str]:
    if body.spender == state.account:
        raise InvalidArgumentError("an account spends its own balance without an allowance; name another spender")
    return body.spender, given(body.stream_id, ANY_STREAM)


def _approve_spending(state: AccountState, cmd: Command, origin: Origin, height: int) -> LedgerDecision:
    body = read_body(cmd, ApproveSpending)
    spender, stream_id = _spender_and_stream(state, body)
    cap = body.cap_cby
    if not holds_a_key_pair(spender):
        raise InvalidArgumentError(
            f"spender {spender} is not an address any key pair holds, so it could never sign a purchase; check the "
            "address", details={"spender": spender})
    existing = state.allowance(spender, stream_id)
    if (existing is None or existing.status != ACTIVE) and state.active_allowances >= MAX_SPENDING_ALLOWANCES:
        raise AuthorizationLimitReachedError(
            f"account {state.account} already gives {MAX_SPENDING_ALLOWANCES} ACTIVE spending allowances; revoke one "
            "(revoke_spending) first", details={"active_allowances": state.active_allowances})
    reply = {"account": state.account, "spender": spender, "stream_id": stream_id, "cap_cby": str(cap),
             "spent_cby": "0", "remaining_cby": str(cap), "status": ACTIVE, "granted_at_block": height}
    event_body = SpendingAllowanceGranted(account=state.account, spender=spender, stream_id=stream_id, cap_cby=cap)
    return LedgerDecision((make_event(state.instance, height, origin, reply, event_body),), reply)


def _revoke_spending(state: AccountState, cmd: Command, origin: Origin, height: int) -> LedgerDecision:
    spender, stream_id = _spender_and_stream(state, read_body(cmd, RevokeSpending))
    existing = state.allowance(spender, stream_id)
    if existing is None or existing.status != ACTIVE:
        raise UnauthorizedError(
            f"{spender} holds no ACTIVE spending allowance of account {state.account} on "
            f"{'any stream' if stream_id == ANY_STREAM else repr(stream_id)}, so there is nothing to revoke; "
            "approve one first (`watchtower account allowance approve`)",
            details={"spender": spender, "stream_id": stream_id})
    reply = {"account": state.account, "spender": spender, "stream_id": stream_id, "status": REVOKED,
             "spent_cby": str(existing.spent_cby), "revoked_at_block": height}
    event_body = SpendingAllowanceRevoked(account=state.account, spender=spender, stream_id=stream_id)
    return LedgerDecision((make_event(state.instance, height, origin, reply, event_body),), reply)


def _transfer(state: AccountState, cmd: Command, origin: Origin, height: int) -> LedgerDecision:
    body = read_body(cmd, TransferCby)
    to, amount = body.to, body.amount_cby
    if not holds_a_key_pair(to):
        raise InvalidArgumentError(
            f"to {to} is not an address any key pair holds (the zero address, or not an ed25519 public key of "
            "prime order), so CBY sent there could never be spent; check the address (`watchtower account show` "
            "prints an account's own)", details={"to": to})
    if to == state.account:
        raise InvalidArgumentError("a transfer to the sender's own account moves nothing; name another account")
    if amount > state.balance_cby:
        raise insufficient(state, amount, "this transfer")
    ref = origin.digest.hex()
    reply = {"from": state.account, "to": to, "amount_cby": amount, "balance_cby": state.balance_cby - amount,
             "ref": ref}
    event = make_event(state.instance, height, origin, reply,
                       CbyDebited(account=state.account, amount_cby=amount, reason="transfer", ref=ref,
                                  counterparty=to))
    credit = CbyCredit(to, amount, "transfer", ref, state.account, origin)
    return LedgerDecision((event,), reply, (Routed(account_instance(to), credit, False),))


def _burn(state: AccountState, cmd: Command, origin: Origin, height: int) -> LedgerDecision:
    amount = read_body(cmd, BurnCby).amount_cby
    if amount > state.balance_cby:
        raise insufficient(state, amount, "this burn")
    ref = origin.digest.hex()
    reply = {"account": state.account, "amount_cby": amount, "balance_cby": state.balance_cby - amount, "ref": ref}
    event = make_event(state.instance, height, origin, reply,
                       CbyDebited(account=state.account, amount_cby=amount, reason="burn", ref=ref,
                                  counterparty=""))
    return LedgerDecision((event,), reply, (Routed(SUPPLY_KEY, CbyBurn(state.account, amount, origin), False),))


_HANDLERS: Final[Mapping[str, Any]] = {
    Method.REGISTER_ACCOUNT_KEY: _register_key,
    Method.REVOKE_ACCOUNT_KEY: _revoke_key,
    Method.AUTHORIZE_ACTOR: _authorize,
    Method.REVOKE_ACTOR: _revoke_actor,
    Method.CREATE_ACTOR: _create_actor,
    Method.APPROVE_SPENDING: _approve_spending,
    Method.REVOKE_SPENDING: _revoke_spending,
    Method.TRANSFER_CBY: _transfer,
    Method.BURN_CBY: _burn,
}
