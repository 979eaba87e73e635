"""The paid-stream instance (``paid:<stream_id>``): config, entitlements, purchases in flight.

A PLATFORM_MANAGED stream's writer forwards the signed create_stream here in the transaction that
creates the stream; this instance re-verifies it, applies the deployment's protocol treasury
(`Deployment.govern_paid_config`, never the creator's choice) and emits PaidStreamRegistered. It
never answers the caller (the stream's writer did).

acquire_epoch_access (envelope ``paid:<stream_id>``, signed by the payer) and a forwarded
renew_subscription are decided in this order: signature; replay protection (an exact retry gets
the original receipt with ``"duplicate": true``, the original error again for a failed purchase,
NOT_READY while it is still settling); NOT_PLATFORM_MANAGED_STREAM for a stream never registered
here; the body; a purchase already in flight for the beneficiary is NOT_READY (retry); then DESIGN §7.6 steps 1–6
(`billing.acquire_epoch_access`, with the payer balance step left to the payer's account) at the
key epoch of the deciding block. An idempotent call emits EpochAccessIdempotent and answers; a
purchase emits EpochAccessRequested (in flight) and forwards a PurchaseDebit to ``acct:<payer>``.
CIP-7: "signed by payer_account or the payer must have delegated spending authority": a payer
other than the signer is decided by the payer's account, which pays only under an allowance it
gave the signer (`account_commands`) and otherwise settles with UNAUTHORIZED.
The payer's account answers with PurchaseSettled: paid → EpochAccessPurchased (active_until =
to_key_epoch) and the KeyAccessReceipt; refused → EpochAccessFailed and the caller gets the error.

`purchase_id` is the hex SHA-256 of the acquire (or renew) command's signing bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Final

from watchtower.protocol.addresses import require_address
from watchtower.protocol.commands import AcquireEpochAccess, RenewSubscription, given, read_body
from watchtower.protocol.config import StreamConfig
from watchtower.protocol.deployment import Deployment
from watchtower.protocol.errors import (
    InsufficientCbyBalanceError,
    InvalidArgumentError,
    MalformedRecordError,
    NotPlatformManagedStreamError,
    NotReadyError,
    WatchtowerError,
)
from watchtower.protocol.event_names import (
    EPOCH_ACCESS_FAILED,
    EPOCH_ACCESS_IDEMPOTENT,
    EPOCH_ACCESS_PURCHASED,
    EPOCH_ACCESS_REQUESTED,
    PAID_STREAM_REGISTERED,
)
from watchtower.protocol.events import event_fields
from watchtower.protocol.ledger.billing import acquire_epoch_access, key_epoch_of_height, price_epochs
from watchtower.protocol.ledger.common import (
    MAX_CBY,
    PAID_PREFIX,
    LedgerDecision,
    Origin,
    PaidCommand,
    PurchaseDebit,
    PurchaseSettled,
    Routed,
    account_instance,
    check_event_envelope,
    event_int,
    make_event,
    paid_instance,
    record_caller,
    replay_record,
)
from watchtower.protocol.ledger.events import (
    EpochAccessFailed,
    EpochAccessIdempotent,
    EpochAccessPurchased,
    EpochAccessRequested,
    PaidStreamRegistered,
)
from watchtower.protocol.ledger.paid import PaidStreamConfig
from watchtower.protocol.signed_command import Command, Method, verify_command
from watchtower.protocol.stream.state import CallerRecord, Event, FrozenMap

PAID_EVENTS: Final = frozenset(
    {PAID_STREAM_REGISTERED, EPOCH_ACCESS_REQUESTED, EPOCH_ACCESS_PURCHASED, EPOCH_ACCESS_IDEMPOTENT,
     EPOCH_ACCESS_FAILED}
)
_ERROR_KEY: Final = "error"  # a failed purchase's caller record holds {"error": {code, message, ...}}
_PAID_BODIES: Final = (PaidStreamRegistered, EpochAccessRequested, EpochAccessPurchased, EpochAccessIdempotent,
                       EpochAccessFailed)


@dataclasses.dataclass(frozen=True, slots=True)
class PaidState:
    """One paid stream. `config` None: not (yet) registered. `in_flight`: beneficiary → the
    EpochAccessRequested of its unsettled purchase (at most one per beneficiary)."""

    stream_id: str
    owner: str | None = None
    config: PaidStreamConfig | None = None
    entitlements: FrozenMap[int] = dataclasses.field(default_factory=FrozenMap)
    in_flight: FrozenMap[EpochAccessRequested] = dataclasses.field(default_factory=FrozenMap)
    callers: FrozenMap[CallerRecord] = dataclasses.field(default_factory=FrozenMap)

    @classmethod
    def initial(cls, instance: str) -> PaidState:
        """The state of a paid stream nothing has happened to, from its instance key."""
        if not instance.startswith(PAID_PREFIX) or len(instance) == len(PAID_PREFIX):
            raise InvalidArgumentError(f"a paid-stream instance key is {PAID_PREFIX}<stream_id>, got {instance!r}")
        return cls(instance[len(PAID_PREFIX):])

    @property
    def instance(self) -> str:
        """The instance key (``paid:<stream_id>``)."""
        return paid_instance(self.stream_id)


def decide_paid(state: PaidState, item: Command | PaidCommand | PurchaseSettled, *, block_height: int,
                deployment: Deployment) -> LedgerDecision:
    """Decide an acquire command, a forwarded create/renew, or a settlement (module docstring)."""
    if isinstance(item, PurchaseSettled):
        return _settle(state, item, block_height)
    if isinstance(item, PaidCommand):
        cmd = item.command
        if cmd.method == Method.CREATE_STREAM:
            return _register(state, cmd, block_height, deployment)
        if cmd.method != Method.RENEW_SUBSCRIPTION:
            raise InvalidArgumentError(f"a paid stream is forwarded create_stream or renew_subscription, "
                                       f"not {cmd.method}")
        if cmd.stream_id != state.stream_id:
            raise InvalidArgumentError(f"a renew for {cmd.stream_id!r} reached {state.instance!r}")
        return _purchase(state, cmd, block_height, RenewSubscription)
    cmd = item
    if cmd.method != Method.ACQUIRE_EPOCH_ACCESS:
        raise InvalidArgumentError(f"{cmd.method} is not a paid-stream method")
    if cmd.stream_id != state.instance:
        raise InvalidArgumentError(f"acquire_epoch_access for stream S is sent with stream_id 'paid:S'; this one "
                                   f"went to {cmd.stream_id!r}, which is not {state.instance!r}")
    return _purchase(state, cmd, block_height, AcquireEpochAccess)


def _register(state: PaidState, create: Command, height: int, deployment: Deployment) -> LedgerDecision:
    verify_command(create)
    if create.stream_id != state.stream_id:
        raise InvalidArgumentError(f"the create_stream of {create.stream_id!r} reached {state.instance!r}")
    if state.config is not None:
        return LedgerDecision((), None)  # a re-forwarded creation: already registered
    fields = {k: v for k, v in create.body.items() if k != "feed"}
    paid = fields.get("paid_stream_config")
    if not isinstance(paid, Mapping):
        raise NotPlatformManagedStreamError(f"stream {create.stream_id!r} is created without paid_stream_config")
    fields["paid_stream_config"] = deployment.govern_paid_config(paid)
    fields.setdefault("stream_id", create.stream_id)
    fields.setdefault("owner", create.caller)
    config = StreamConfig.from_dict(fields)
    if not config.is_paid or config.paid_stream_config is None or config.owner != create.caller:
        raise NotPlatformManagedStreamError(f"stream {create.stream_id!r} is not a PLATFORM_MANAGED stream of "
                                            f"{create.caller}")
    body = PaidStreamRegistered(stream_id=state.stream_id, owner=create.caller,
                                paid_stream_config=config.paid_stream_config)
    reply = {"stream_id": state.stream_id, "owner": create.caller}
    return LedgerDecision((make_event(state.instance, height, Origin.of(create), reply, body),), None)


def _purchase(state: PaidState, cmd: Command, height: int,
              shape: type[RenewSubscription] | type[AcquireEpochAccess]) -> LedgerDecision:
    verify_command(cmd)
    record = replay_record(state.callers, cmd, height)
    origin = Origin.of(cmd)
    purchase_id = origin.digest.hex()
    if record is not None:
        if any(p.purchase_id == purchase_id for p in state.in_flight.values()):
            raise NotReadyError("this purchase is still settling with the payer's account; retry the same command "
                                "in a moment to get its receipt")
        error = record.last_reply.get(_ERROR_KEY)
        if isinstance(error, Mapping):
            return LedgerDecision((), None, error=WatchtowerError.from_dict(error))
        return LedgerDecision((), {**record.last_reply, "duplicate": True})
    config = state.config
    if config is None:
        raise NotPlatformManagedStreamError(
            f"stream {state.stream_id!r} is not a PLATFORM_MANAGED stream (or its creation is still being "
            "registered: retry in a moment); OPEN streams are plaintext and there is nothing to buy"
        )
    body = read_body(cmd, shape)
    if isinstance(body, AcquireEpochAccess) and body.stream_id != state.stream_id:
        raise InvalidArgumentError(f"body stream_id must be {state.stream_id!r}, the stream of {cmd.stream_id!r}")
    target = body.target_key_epoch
    beneficiary = require_address(given(body.beneficiary_account, cmd.caller), "beneficiary_account")
    payer = require_address(given(body.payer_account, cmd.caller), "payer_account")
    if beneficiary in state.in_flight:
        raise NotReadyError(f"a purchase for {beneficiary} on {state.stream_id!r} is still settling; retry in a "
                            "moment (it will then be idempotent if it already covers your target)")
    current = key_epoch_of_height(height, config.key_epoch_blocks)
    decision = acquire_epoch_access(
        access_mode="PLATFORM_MANAGED", pricing=config.pricing, current_key_epoch=current,
        target_key_epoch=target, active_until_key_epoch=state.entitlements.get(beneficiary),
        payer_balance_cby=None,  # the payer's account checks its balance (saga step 2)
        stream_id=state.stream_id, beneficiary_account=beneficiary, payer_account=payer,
    )
    receipt = decision.receipt
    reply = receipt.to_dict()
    if decision.idempotent:
        event_body = EpochAccessIdempotent(stream_id=state.stream_id, beneficiary_account=beneficiary,
                                           target_key_epoch=target,
                                           active_until_key_epoch=decision.active_until_key_epoch)
        return LedgerDecision((make_event(state.instance, height, origin, reply, event_body),), reply)
    if receipt.total_amount_cby > MAX_CBY:
        # No account can hold that much (the supply bound), so no balance can pay it: refused here,
        # without sending the debit, and without stating a balance this instance does not know.
        raise InsufficientCbyBalanceError(
            f"epochs {receipt.from_key_epoch}..{target} cost {receipt.total_amount_cby} CBY wei, more than "
            f"any account can hold ({MAX_CBY}); target an earlier key epoch",
            details={"account": payer, "required_cby": str(receipt.total_amount_cby),
                     "max_balance_cby": str(MAX_CBY)},
        )
    requested = EpochAccessRequested.of(purchase_id, receipt)
    debit = PurchaseDebit(purchase_id, state.stream_id, payer, beneficiary, config.publisher_treasury,
                          config.protocol_treasury, receipt.publisher_amount_cby, receipt.protocol_fee_cby,
                          receipt.total_amount_cby, origin)
    event = make_event(state.instance, height, origin, {}, requested)
    return LedgerDecision((event,), None, (Routed(account_instance(payer), debit, True),))


def _settle(state: PaidState, settled: PurchaseSettled, height: int) -> LedgerDecision:
    pending = state.in_flight.get(settled.beneficiary)
    if pending is None or pending.purchase_id != settled.purchase_id:
        raise InvalidArgumentError(f"purchase {settled.purchase_id} is not in flight on {state.instance!r}")
    if settled.error is None:
        purchased = EpochAccessPurchased.of(pending.purchase_id, pending)
        reply = pending.to_dict()
        event = make_event(state.instance, height, settled.origin, reply, purchased)
        return LedgerDecision((event,), reply)
    error = WatchtowerError.from_dict(settled.error)
    body = EpochAccessFailed(purchase_id=settled.purchase_id, stream_id=state.stream_id,
                             beneficiary_account=settled.beneficiary, code=error.code, message=error.message)
    event = make_event(state.instance, height, settled.origin, {_ERROR_KEY: error.to_dict()}, body)
    return LedgerDecision((event,), None, error=error)


# --- evolve --------------------------------------------------------------------------------------


def evolve_paid(state: PaidState, event: Event) -> PaidState:
    """The paid stream after `event`; MALFORMED_RECORD for one that cannot apply (quarantine)."""
    check_event_envelope(event, state.instance)
    body = event.body
    try:
        if not isinstance(body, _PAID_BODIES):
            raise KeyError(event.type)  # reported below as before: "<type> cannot apply to a paid stream"
        if body.stream_id != state.stream_id:
            raise InvalidArgumentError(f"the event names stream {body.stream_id!r}")
        if isinstance(body, PaidStreamRegistered):
            if state.config is not None:
                raise InvalidArgumentError("the stream is already registered")
            config = body.paid_stream_config
            if not isinstance(config, PaidStreamConfig):
                raise InvalidArgumentError("paid_stream_config must be a paid stream configuration")
            return dataclasses.replace(state, owner=require_address(body.owner, "owner"), config=config)
        if state.config is None:
            raise InvalidArgumentError("the stream is not registered as a paid stream")
        changed = _APPLY[event.type](state, state.config, body)
    except WatchtowerError as exc:
        raise MalformedRecordError(f"{event.type} breaks a rule ({exc.code}): {exc.message}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedRecordError(f"{event.type} cannot apply to a paid stream: {exc!r}") from None
    return dataclasses.replace(changed, callers=record_caller(changed.callers, event))


def _check_purchase(config: PaidStreamConfig, body: EpochAccessRequested) -> str:
    require_address(body.payer_account, "payer_account")
    first = event_int(body.from_key_epoch, "from_key_epoch")
    last = event_int(body.to_key_epoch, "to_key_epoch")
    charged = event_int(body.epochs_charged, "epochs_charged", minimum=1)
    if last - first + 1 != charged:
        raise InvalidArgumentError(f"epochs_charged {charged} is not {first}..{last}")
    price = price_epochs(charged, config.pricing)
    amounts = (body.publisher_amount_cby, body.protocol_fee_cby, body.total_amount_cby)
    if amounts != (price.publisher_amount_cby, price.protocol_fee_cby, price.total_amount_cby):
        raise InvalidArgumentError(f"the amounts {amounts} are not the price of {charged} epoch(s)")
    return require_address(body.beneficiary_account, "beneficiary_account")


def _requested(state: PaidState, config: PaidStreamConfig, body: EpochAccessRequested) -> PaidState:
    beneficiary = _check_purchase(config, body)
    if beneficiary in state.in_flight:
        raise InvalidArgumentError(f"a purchase for {beneficiary} is already in flight")
    active = state.entitlements.get(beneficiary)
    if active is not None and body.from_key_epoch != active + 1:
        raise InvalidArgumentError(f"the purchase starts at {body.from_key_epoch}, not after {active}")
    return dataclasses.replace(state, in_flight=state.in_flight.set(beneficiary, body))


def _purchased(state: PaidState, _config: PaidStreamConfig, body: EpochAccessPurchased) -> PaidState:
    beneficiary = str(body.beneficiary_account)
    pending = state.in_flight.get(beneficiary)
    if pending is None or event_fields(pending) != event_fields(body):
        raise InvalidArgumentError(f"purchase {body.purchase_id} is not the one in flight for {beneficiary}")
    return dataclasses.replace(state, in_flight=state.in_flight.without(beneficiary),
                               entitlements=state.entitlements.set(beneficiary, int(body.to_key_epoch)))


def _failed(state: PaidState, _config: PaidStreamConfig, body: EpochAccessFailed) -> PaidState:
    beneficiary = str(body.beneficiary_account)
    pending = state.in_flight.get(beneficiary)
    if pending is None or pending.purchase_id != body.purchase_id:
        raise InvalidArgumentError(f"purchase {body.purchase_id} is not the one in flight for {beneficiary}")
    return dataclasses.replace(state, in_flight=state.in_flight.without(beneficiary))


def _idempotent(state: PaidState, _config: PaidStreamConfig, body: EpochAccessIdempotent) -> PaidState:
    beneficiary = require_address(body.beneficiary_account, "beneficiary_account")
    active = state.entitlements.get(beneficiary)
    target = event_int(body.target_key_epoch, "target_key_epoch")
    if active is None or body.active_until_key_epoch != active or target > active:
        raise InvalidArgumentError(f"{beneficiary} holds no entitlement covering epoch {target}")
    return state


_APPLY: Final[Mapping[str, Callable[[PaidState, PaidStreamConfig, Any], PaidState]]] = {
    EPOCH_ACCESS_REQUESTED: _requested,
    EPOCH_ACCESS_PURCHASED: _purchased,
    EPOCH_ACCESS_FAILED: _failed,
    EPOCH_ACCESS_IDEMPOTENT: _idempotent,
}
