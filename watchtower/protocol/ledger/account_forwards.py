"""Deciding the forwards an account receives from other instances (`account_commands.decide_account`
routes them here): credits, purchase debits and replay charges.

A CbyCredit always applies (the supply bound keeps every balance ≤ 2**63-1), as the account's
next numbered credit (`accounts.credit_reply`). A PurchaseDebit debits the payer and forwards
both treasury credits and "settled" to the paid stream, or forwards "settled" with
INSUFFICIENT_CBY_BALANCE and changes nothing (docs/ledger.md); a purchase signed by someone
other than the payer spends the payer's spending allowance to that spender (UNAUTHORIZED, and
nothing changes, without one that covers it). A ReplayCharge (a priced ICRC-77 replay) likewise
debits the requester (reason "replay", ref the replay id), credits the stream owner and forwards
ReplaySettled to the stream, or forwards ReplaySettled with INSUFFICIENT_CBY_BALANCE and changes
nothing; a balance never goes below zero.
"""

from __future__ import annotations

from watchtower.protocol.errors import InvalidArgumentError, UnauthorizedError, WatchtowerError
from watchtower.protocol.ledger.account_state import AccountState, AllowanceRecord, insufficient
from watchtower.protocol.ledger.accounts import ALLOWANCE_STREAM, SPENT_BY, credit_reply
from watchtower.protocol.ledger.common import (
    MAX_CBY,
    CbyCredit,
    LedgerDecision,
    PurchaseDebit,
    PurchaseSettled,
    ReplayCharge,
    ReplaySettled,
    Routed,
    account_instance,
    make_event,
    paid_instance,
)
from watchtower.protocol.ledger.events import CbyCredited, CbyDebited


def decide_forward(state: AccountState, item: CbyCredit | PurchaseDebit | ReplayCharge, *,
                   block_height: int) -> LedgerDecision:
    """Decide a forward against one account (module docstring for the rules)."""
    if isinstance(item, CbyCredit):
        return _credit(state, item, block_height)
    if isinstance(item, PurchaseDebit):
        return _purchase_debit(state, item, block_height)
    return _replay_charge(state, item, block_height)


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
