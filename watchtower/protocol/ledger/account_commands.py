"""Deciding an account's commands and forwards (`accounts` holds the state and its fold).

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

Forwards: a CbyCredit always applies (the supply bound keeps every balance ≤ 2**63-1), as the
account's next numbered credit (`accounts.credit_reply`); a
PurchaseDebit debits the payer and forwards both treasury credits and "settled" to the paid
stream, or forwards "settled" with INSUFFICIENT_CBY_BALANCE and changes nothing (docs/ledger.md).
A ReplayCharge (a priced ICRC-77 replay) likewise debits the requester (reason "replay", ref the
replay id), credits the stream owner and forwards ReplaySettled to the stream, or forwards
ReplaySettled with INSUFFICIENT_CBY_BALANCE and changes nothing; a balance never goes below zero.
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
    InsufficientCbyBalanceError,
    InvalidArgumentError,
    KeyRevokedError,
    UnauthorizedError,
    WatchtowerError,
)
from watchtower.protocol.ledger.account_state import (
    ACTIVE,
    ALL_STREAMS,
    ANY_STREAM,
    AUTHORIZATION_SCOPE,
    MAX_SPENDING_ALLOWANCES,
    REVOKED,
    AccountState,
    AllowanceRecord,
)
from watchtower.protocol.ledger.accounts import ALLOWANCE_STREAM, SPENT_BY, credit_reply
from watchtower.protocol.ledger.common import (
    ACCOUNT_METHODS,
    MAX_CBY,
    SUPPLY_KEY,
    CbyBurn,
    CbyCredit,
    LedgerDecision,
    Origin,
    PurchaseDebit,
    PurchaseSettled,
    ReplayCharge,
    ReplaySettled,
    Routed,
    account_instance,
    make_event,
    paid_instance,
    replay_record,
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
from watchtower.protocol.signed_command import Command, Method, verify_command


def decide_account(state: AccountState, item: Command | CbyCredit | PurchaseDebit | ReplayCharge, *,
                   block_height: int) -> LedgerDecision:
    """Decide a signed command or a forward against one account (module docstring for the rules)."""
    if isinstance(item, CbyCredit):
        return _credit(state, item, block_height)
    if isinstance(item, PurchaseDebit):
        return _purchase_debit(state, item, block_height)
    if isinstance(item, ReplayCharge):
        return _replay_charge(state, item, block_height)
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


def insufficient(state: AccountState, amount: int, what: str) -> InsufficientCbyBalanceError:
    """INSUFFICIENT_CBY_BALANCE for `amount` against the account's balance, with details."""
    return InsufficientCbyBalanceError(
        f"account {state.account} holds {state.balance_cby} CBY wei but {what} needs {amount}; fund it with at "
        f"least {amount - state.balance_cby} more and retry",
        details={"account": state.account, "balance_cby": str(state.balance_cby), "required_cby": str(amount)},
    )


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


def _credit(state: AccountState, credit: CbyCredit, height: int) -> LedgerDecision:
    if credit.account != state.account:
        raise InvalidArgumentError(f"a credit for {credit.account} reached {state.instance!r}")
    if state.balance_cby + credit.amount_cby > MAX_CBY:  # impossible while the supply bound holds
        raise InvalidArgumentError(f"crediting {credit.amount_cby} would take {state.account} above {MAX_CBY}")
    body = CbyCredited(account=state.account, amount_cby=credit.amount_cby, reason=credit.reason, ref=credit.ref,
                       counterparty=credit.counterparty)
    # Numbered, so the fold applies it once even if its record is copied (`accounts`).
    event = make_event(state.instance, height, credit.origin, credit_reply(state), body)
    return LedgerDecision((event,), None)


def _purchase_debit(state: AccountState, debit: PurchaseDebit, height: int) -> LedgerDecision:
    if debit.payer != state.account:
        raise InvalidArgumentError(f"a purchase debit for {debit.payer} reached {state.instance!r}")
    back = paid_instance(debit.stream_id)
    spent_by: dict[str, str] = {}
    err: WatchtowerError | None = None
    spender = debit.origin.caller
    if spender != state.account:
        allowance, err = _spender_allowance(state, spender, debit)
        if allowance is not None:
            spent_by = {SPENT_BY: spender, ALLOWANCE_STREAM: allowance.stream_id}
    if err is None and debit.total_amount_cby > state.balance_cby:
        err = insufficient(state, debit.total_amount_cby, f"purchase {debit.purchase_id[:16]}…")
    if err is not None:
        settled = PurchaseSettled(debit.purchase_id, debit.stream_id, debit.beneficiary, err.to_dict(),
                                  debit.origin)
        return LedgerDecision((), None, (Routed(back, settled, True),))
    body = CbyDebited(account=state.account, amount_cby=debit.total_amount_cby, reason="purchase",
                      ref=debit.purchase_id, counterparty=debit.publisher_treasury)
    event = make_event(state.instance, height, debit.origin, spent_by, body)
    forwards = []
    for treasury, amount, reason in ((debit.publisher_treasury, debit.publisher_amount_cby, "publisher_revenue"),
                                     (debit.protocol_treasury, debit.protocol_fee_cby, "protocol_fee")):
        if amount > 0:
            credit = CbyCredit(treasury, amount, reason, debit.purchase_id, state.account, debit.origin)
            forwards.append(Routed(account_instance(treasury), credit, False))
    paid = PurchaseSettled(debit.purchase_id, debit.stream_id, debit.beneficiary, None, debit.origin)
    forwards.append(Routed(back, paid, True))
    return LedgerDecision((event,), None, tuple(forwards))


def _spender_allowance(state: AccountState, spender: str,
                       debit: PurchaseDebit) -> tuple[AllowanceRecord | None, WatchtowerError | None]:
    """The allowance `spender` pays `debit` under, or why it may not make the account pay it."""
    allowance = state.spending_allowance(spender, debit.stream_id)
    if allowance is None:
        return None, UnauthorizedError(
            f"{spender} signed a purchase paid by {state.account}, which gives it no spending allowance on stream "
            f"{debit.stream_id!r}; the payer signs its own purchase, or approves the spender first "
            "(`watchtower account allowance approve`)", details={"payer_account": state.account, "spender": spender})
    if allowance.remaining_cby < debit.total_amount_cby:
        return None, UnauthorizedError(
            f"{spender} may spend {allowance.remaining_cby} more CBY wei of {state.account}'s balance (allowance of "
            f"{allowance.cap_cby}, {allowance.spent_cby} spent) but this purchase costs {debit.total_amount_cby}; "
            "the payer raises the allowance (approve again) or pays itself",
            details={"payer_account": state.account, "spender": spender, "remaining_cby": str(allowance.remaining_cby),
                     "required_cby": str(debit.total_amount_cby)})
    return allowance, None


def _replay_charge(state: AccountState, charge: ReplayCharge, height: int) -> LedgerDecision:
    if charge.requester != state.account:
        raise InvalidArgumentError(f"a replay charge for {charge.requester} reached {state.instance!r}")
    ref = str(charge.replay_id)
    if charge.price_cby > state.balance_cby:
        err = insufficient(state, charge.price_cby, f"replay {ref}")
        refused = ReplaySettled(charge.replay_id, charge.stream_id, charge.requester, err.to_dict(), charge.origin,
                                charge.command)
        return LedgerDecision((), None, (Routed(charge.stream_id, refused, True),))
    body = CbyDebited(account=state.account, amount_cby=charge.price_cby, reason="replay", ref=ref,
                      counterparty=charge.owner)
    event = make_event(state.instance, height, charge.origin, {}, body)
    credit = CbyCredit(charge.owner, charge.price_cby, "replay", ref, state.account, charge.origin)
    paid = ReplaySettled(charge.replay_id, charge.stream_id, charge.requester, None, charge.origin, charge.command)
    return LedgerDecision((event,), None, (Routed(account_instance(charge.owner), credit, False),
                                           Routed(charge.stream_id, paid, True)))
