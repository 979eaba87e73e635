"""The supply instance (``cby:supply``): the total CBY supply, minted by the genesis minter only.

mint_cby (envelope ``cby:supply``) is checked in this order: the signature (INVALID_SIGNATURE);
the caller is the deployment's minter (UNAUTHORIZED; a deployment without one refuses every mint
and says which setting to change); replay protection; the body (``to``, ``amount_cby`` in
1..2**63-1); the total supply stays ≤ 2**63-1 (INVALID_ARGUMENT). It emits CbyMinted and forwards a
"mint" credit to ``acct:<to>``. A CbyBurn forward (from an account that already debited the
amount) emits CbyBurned. So at quiescence Σ balances == total supply == Σ minted − Σ burned.

`evolve_supply` refuses a CbyMinted / CbyBurned whose total does not follow from the state's,
which also keeps the total within 0..2**63-1.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from watchtower.protocol.addresses import require_address
from watchtower.protocol.commands import MintCby, read_body
from watchtower.protocol.deployment import Deployment
from watchtower.protocol.errors import (
    InvalidArgumentError,
    MalformedRecordError,
    UnauthorizedError,
    WatchtowerError,
)
from watchtower.protocol.event_names import CBY_BURNED, CBY_MINTED
from watchtower.protocol.ledger.common import (
    MAX_CBY,
    SUPPLY_KEY,
    CbyBurn,
    CbyCredit,
    LedgerDecision,
    Origin,
    Routed,
    account_instance,
    check_event_envelope,
    event_int,
    make_event,
    record_caller,
    replay_record,
)
from watchtower.protocol.ledger.events import CbyBurned, CbyMinted
from watchtower.protocol.signed_command import Command, Method, verify_command
from watchtower.protocol.stream.state import CallerRecord, Event, FrozenMap

ENV_CBY_MINTER: Final = "WATCHTOWER_CBY_MINTER"
SUPPLY_EVENTS: Final = frozenset({CBY_MINTED, CBY_BURNED})


@dataclasses.dataclass(frozen=True, slots=True)
class SupplyState:
    """The total supply (minted − burned) and the minter's replay protection."""

    total_supply_cby: int = 0
    callers: FrozenMap[CallerRecord] = dataclasses.field(default_factory=FrozenMap)


def decide_supply(state: SupplyState, item: Command | CbyBurn, *, block_height: int,
                  deployment: Deployment) -> LedgerDecision:
    """Decide a mint_cby command or a burn forward (module docstring for the order)."""
    if isinstance(item, CbyBurn):
        if item.amount_cby > state.total_supply_cby:  # impossible: the account held it
            raise InvalidArgumentError(f"burning {item.amount_cby} exceeds the supply {state.total_supply_cby}")
        total = state.total_supply_cby - item.amount_cby
        body = CbyBurned(account=item.account, amount_cby=item.amount_cby, total_supply_cby=total)
        return LedgerDecision((make_event(SUPPLY_KEY, block_height, item.origin, {}, body),), None)
    cmd = item
    if cmd.method != Method.MINT_CBY:
        raise InvalidArgumentError(f"{cmd.method} is not a supply method")
    if cmd.stream_id != SUPPLY_KEY:
        raise InvalidArgumentError(f"mint_cby is sent with stream_id {SUPPLY_KEY!r}, not {cmd.stream_id!r}")
    verify_command(cmd)
    minter = deployment.cby_minter
    if minter is None:
        raise UnauthorizedError(
            f"this deployment has no CBY minter, so nobody can mint; its operator sets {ENV_CBY_MINTER} "
            "for the workers (watchtower up does it from the genesis minter key)"
        )
    if cmd.caller != minter:
        raise UnauthorizedError(f"only the genesis minter ({minter}) may mint CBY; {cmd.caller} is not it")
    record = replay_record(state.callers, cmd, block_height)
    if record is not None:
        return LedgerDecision((), {**record.last_reply, "duplicate": True})
    mint = read_body(cmd, MintCby)
    to, amount = mint.to, mint.amount_cby
    if amount > MAX_CBY - state.total_supply_cby:
        raise InvalidArgumentError(
            f"minting {amount} would take the total supply above {MAX_CBY} (it is {state.total_supply_cby}); "
            f"mint at most {MAX_CBY - state.total_supply_cby}",
            details={"total_supply_cby": str(state.total_supply_cby)},
        )
    origin = Origin.of(cmd)
    total = state.total_supply_cby + amount
    reply = {"to": to, "amount_cby": amount, "total_supply_cby": total, "ref": origin.digest.hex()}
    event = make_event(SUPPLY_KEY, block_height, origin, reply,
                       CbyMinted(to=to, amount_cby=amount, total_supply_cby=total))
    credit = CbyCredit(to, amount, "mint", origin.digest.hex(), "", origin)
    return LedgerDecision((event,), reply, (Routed(account_instance(to), credit, False),))


def evolve_supply(state: SupplyState, event: Event) -> SupplyState:
    """The supply after `event`; MALFORMED_RECORD when the total does not follow (quarantine)."""
    check_event_envelope(event, SUPPLY_KEY)
    body = event.body
    try:
        if not isinstance(body, CbyMinted | CbyBurned):
            raise InvalidArgumentError(f"the supply does not fold {event.type} events")
        amount = event_int(body.amount_cby, "amount_cby", minimum=1)
        total = event_int(body.total_supply_cby, "total_supply_cby")
        if isinstance(body, CbyMinted):
            require_address(body.to, "to")
            expected = state.total_supply_cby + amount
        else:
            require_address(body.account, "account")
            expected = state.total_supply_cby - amount
        if total != expected:
            raise InvalidArgumentError(f"total_supply_cby {total} does not follow {state.total_supply_cby} "
                                       f"and {event.type} of {amount}")
    except WatchtowerError as exc:
        raise MalformedRecordError(f"{event.type} breaks a rule ({exc.code}): {exc.message}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedRecordError(f"{event.type} body is malformed: {exc!r}") from None
    callers = record_caller(state.callers, event) if event.type == CBY_MINTED else state.callers
    return SupplyState(total, callers)
