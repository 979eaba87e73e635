"""Block heights, key epochs, and the acquire_epoch_access decision (DESIGN §5, §7.6).

Time is an argument, never read from a clock: workers stamp the block height on the events they
write, so projections rebuild deterministically.

`acquire_epoch_access` follows DESIGN §7.6 step by step:
1. mode not PLATFORM_MANAGED → NOT_PLATFORM_MANAGED_STREAM;
2. entitlement exists and target ≤ active_until → idempotent receipt (zero charge);
3. target < current_key_epoch → INVALID_TARGET_KEY_EPOCH;
4. E = active_until if an entitlement exists, else current − 1 (a lapsed one pays for the gap);
5. target − E < min_purchase_epochs → MIN_PURCHASE_NOT_MET;
6. publisher = charged × fee, protocol = floor(publisher × bps / 10000), total = their sum;
7. balance < total → INSUFFICIENT_CBY_BALANCE;
8. otherwise a purchase from E+1 to target, and active_until becomes target.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from watchtower.protocol.constants import BLOCK_INTERVAL_MS, BPS_DENOMINATOR, GENESIS_UNIX_MS, MAX_UINT32
from watchtower.protocol.enums import AccessMode, parse_access_mode
from watchtower.protocol.errors import (
    EntitlementRequiredError,
    InsufficientCbyBalanceError,
    InvalidArgumentError,
    InvalidTargetKeyEpochError,
    MinPurchaseNotMetError,
    NotPlatformManagedStreamError,
)
from watchtower.protocol.ledger.paid import EpochPricing
from watchtower.protocol.validation import require_int

# --- Time ----------------------------------------------------------------------------------------


def block_height_at(
    unix_ms: int, *, genesis_unix_ms: int = GENESIS_UNIX_MS, block_interval_ms: int = BLOCK_INTERVAL_MS
) -> int:
    """floor((unix_ms − genesis) / block_interval); instants before genesis are INVALID_ARGUMENT."""
    ms = require_int(unix_ms, "unix_ms")
    genesis = require_int(genesis_unix_ms, "genesis_unix_ms")
    interval = require_int(block_interval_ms, "block_interval_ms", minimum=1)
    if ms < genesis:
        raise InvalidArgumentError(f"unix_ms {ms} is before genesis {genesis}; block heights start at genesis")
    return (ms - genesis) // interval


def key_epoch_of_height(block_height: int, key_epoch_blocks: int) -> int:
    """floor(block_height / key_epoch_blocks)."""
    height = require_int(block_height, "block_height")
    blocks = require_int(key_epoch_blocks, "key_epoch_blocks", minimum=1, maximum=MAX_UINT32)
    return height // blocks


def key_epoch_at(
    unix_ms: int,
    key_epoch_blocks: int,
    *,
    genesis_unix_ms: int = GENESIS_UNIX_MS,
    block_interval_ms: int = BLOCK_INTERVAL_MS,
) -> int:
    """The key epoch in force at `unix_ms`."""
    height = block_height_at(unix_ms, genesis_unix_ms=genesis_unix_ms, block_interval_ms=block_interval_ms)
    return key_epoch_of_height(height, key_epoch_blocks)


def first_height_of_epoch(key_epoch: int, key_epoch_blocks: int) -> int:
    """The first block height of `key_epoch` (the effective height a KeyEpochRotated announces)."""
    epoch = require_int(key_epoch, "key_epoch")
    blocks = require_int(key_epoch_blocks, "key_epoch_blocks", minimum=1, maximum=MAX_UINT32)
    return epoch * blocks


# --- Pricing and the purchase decision -----------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Price:
    """What `epochs_charged` epochs cost: publisher amount, protocol fee on top, and their total."""

    publisher_amount_cby: int
    protocol_fee_cby: int
    total_amount_cby: int


def price_epochs(epochs_charged: int, pricing: EpochPricing) -> Price:
    """publisher = charged × fee; protocol = floor(publisher × bps / 10000); total = sum."""
    charged = require_int(epochs_charged, "epochs_charged")
    publisher = charged * pricing.fee_per_key_epoch_cby
    protocol = publisher * pricing.protocol_fee_bps // BPS_DENOMINATOR
    return Price(publisher, protocol, publisher + protocol)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KeyAccessReceipt:
    """CIP-7 KeyAccessReceipt.

    For a purchase, from_key_epoch..to_key_epoch is E+1..target. For an idempotent call nothing
    is charged and the range is empty: from = active_until + 1, to = active_until, so
    `epochs_charged == to_key_epoch - from_key_epoch + 1` holds for every receipt.

    A purchase of key epochs is a receipt with its id (`events.EpochAccessRequested` and
    `events.EpochAccessPurchased`).
    """

    stream_id: str
    beneficiary_account: str
    payer_account: str
    from_key_epoch: int
    to_key_epoch: int
    epochs_charged: int
    publisher_amount_cby: int
    protocol_fee_cby: int
    total_amount_cby: int

    def to_dict(self) -> dict[str, Any]:
        """The receipt's fields as a plain dict (a purchase's receipt alone, without its id)."""
        return {name: getattr(self, name) for name in RECEIPT_FIELDS}


RECEIPT_FIELDS: Final = tuple(f.name for f in dataclasses.fields(KeyAccessReceipt))
"""The CIP-7 KeyAccessReceipt's field names, in order."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EpochAccessDecision:
    """The outcome of `acquire_epoch_access` that did not fail.

    `idempotent` is True when nothing was charged (emit EpochAccessIdempotent), False for a
    purchase (debit the payer, credit both treasuries, emit EpochAccessPurchased).
    `active_until_key_epoch` is the beneficiary's entitlement after the call.
    """

    receipt: KeyAccessReceipt
    idempotent: bool
    target_key_epoch: int
    active_until_key_epoch: int

    @property
    def event_name(self) -> str:
        """The CIP-7 event this outcome emits."""
        return "EpochAccessIdempotent" if self.idempotent else "EpochAccessPurchased"


def acquire_epoch_access(
    *,
    access_mode: AccessMode | str,
    pricing: EpochPricing | None,
    current_key_epoch: int,
    target_key_epoch: int,
    active_until_key_epoch: int | None,
    payer_balance_cby: int | None,
    stream_id: str = "",
    beneficiary_account: str = "",
    payer_account: str = "",
) -> EpochAccessDecision:
    """Decide an `acquire_epoch_access` call in exactly the DESIGN §7.6 order.

    `active_until_key_epoch` is None when the beneficiary has no entitlement on this stream;
    `payer_balance_cby` is None when the balance is checked elsewhere (the paid-stream saga: the
    payer's account checks it, and only it knows it), so no error ever states a balance it guessed.
    Raises the spec errors named in the module docstring, or `InvalidArgumentError` for malformed
    inputs (negative numbers, a PLATFORM_MANAGED stream without pricing).
    """
    if parse_access_mode(access_mode) is not AccessMode.PLATFORM_MANAGED:
        raise NotPlatformManagedStreamError(
            f"stream {stream_id!r} is OPEN: its messages are plaintext and there is nothing to buy."
        )
    if pricing is None:
        raise InvalidArgumentError("a PLATFORM_MANAGED stream needs its pricing (paid_stream_config)")
    current = require_int(current_key_epoch, "current_key_epoch")
    target = require_int(target_key_epoch, "target_key_epoch")
    balance = None if payer_balance_cby is None else require_int(payer_balance_cby, "payer_balance_cby")
    active_until = (
        None if active_until_key_epoch is None else require_int(active_until_key_epoch, "active_until_key_epoch")
    )

    def receipt(first: int, last: int, price: Price) -> KeyAccessReceipt:
        return KeyAccessReceipt(
            stream_id=stream_id,
            beneficiary_account=beneficiary_account,
            payer_account=payer_account,
            from_key_epoch=first,
            to_key_epoch=last,
            epochs_charged=last - first + 1,
            publisher_amount_cby=price.publisher_amount_cby,
            protocol_fee_cby=price.protocol_fee_cby,
            total_amount_cby=price.total_amount_cby,
        )

    if active_until is not None and target <= active_until:
        return EpochAccessDecision(
            receipt=receipt(active_until + 1, active_until, Price(0, 0, 0)),
            idempotent=True,
            target_key_epoch=target,
            active_until_key_epoch=active_until,
        )
    if target < current:
        raise InvalidTargetKeyEpochError(
            f"target key epoch {target} is before the current key epoch {current}; purely "
            f"historical epochs cannot be bought. Target epoch {current} or later."
        )
    covered_until = active_until if active_until is not None else current - 1
    charged = target - covered_until
    if charged < pricing.min_purchase_epochs:
        raise MinPurchaseNotMetError(
            f"this purchase covers {charged} new epoch(s) ({covered_until + 1}..{target}), below the "
            f"stream's minimum of {pricing.min_purchase_epochs}; target epoch "
            f"{covered_until + pricing.min_purchase_epochs} or later."
        )
    price = price_epochs(charged, pricing)
    if balance is not None and balance < price.total_amount_cby:
        raise InsufficientCbyBalanceError(
            f"the payer holds {balance} CBY wei but epochs {covered_until + 1}..{target} cost "
            f"{price.total_amount_cby} ({price.publisher_amount_cby} + {price.protocol_fee_cby} protocol "
            f"fee); fund the payer with at least {price.total_amount_cby - balance} more and retry.",
            details={"balance_cby": str(balance), "total_amount_cby": str(price.total_amount_cby)},
        )
    return EpochAccessDecision(
        receipt=receipt(covered_until + 1, target, price),
        idempotent=False,
        target_key_epoch=target,
        active_until_key_epoch=target,
    )


def require_entitlement(*, active_until_key_epoch: int | None, key_epoch: int) -> None:
    """ENTITLEMENT_REQUIRED unless the entitlement covers `key_epoch` (k ≤ active_until)."""
    if active_until_key_epoch is None or key_epoch > active_until_key_epoch:
        covered = "no entitlement" if active_until_key_epoch is None else f"access up to {active_until_key_epoch}"
        raise EntitlementRequiredError(
            f"key epoch {key_epoch} is not covered ({covered}); call acquire_epoch_access with "
            f"target_key_epoch ≥ {key_epoch} first."
        )
