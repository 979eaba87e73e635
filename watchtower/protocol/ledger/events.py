"""The ledger's events: accounts and their keys, actors and allowances, CBY, paid streams and purchases.

One frozen, typed class per event type, as every event (`protocol.events`, which lists them all
and maps each type name to its class): each has exactly the body fields of its latest
``<Type>.v<N>.avsc``, in the schema's order. They are folded by the key manager's ledger
instances (`ledger.accounts`, `ledger.supply`, `ledger.paid_stream`) on the ``acct:``, ``cby:``
and ``paid:`` logs.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Self

from watchtower.protocol.ledger.billing import RECEIPT_FIELDS, KeyAccessReceipt
from watchtower.protocol.ledger.paid import PaidStreamConfig


@dataclasses.dataclass(frozen=True, slots=True)
class AccountKeyRegistered:
    """CIP-7 AccountKeyRegistered: an account registered an X25519 key (on ``acct:<account>``)."""

    TYPE: ClassVar[str] = "AccountKeyRegistered"
    account: str
    account_key_id: int
    scheme: str
    public_key: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class AccountKeyRevoked:
    """CIP-7 AccountKeyRevoked."""

    TYPE: ClassVar[str] = "AccountKeyRevoked"
    account: str
    account_key_id: int


@dataclasses.dataclass(frozen=True, slots=True)
class ActorAuthorizationGranted:
    """CIP-7 ActorAuthorizationGranted (scope STREAM_DECRYPT; DECRYPT in records of earlier releases)."""

    TYPE: ClassVar[str] = "ActorAuthorizationGranted"
    account: str
    actor: str
    stream_id: str
    scope: str


@dataclasses.dataclass(frozen=True, slots=True)
class ActorAuthorizationRevoked:
    """CIP-7 ActorAuthorizationRevoked."""

    TYPE: ClassVar[str] = "ActorAuthorizationRevoked"
    account: str
    actor: str
    stream_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class ActorCreated:
    """CIP-7 actor.creator: the account created `actor` (its own signed create_actor); the actor is
    one of the account's own actors, authorized on every stream of the account until revoked."""

    TYPE: ClassVar[str] = "ActorCreated"
    account: str
    actor: str


@dataclasses.dataclass(frozen=True, slots=True)
class SpendingAllowanceGranted:
    """CIP-7 delegated spending authority: `spender` may pay purchases from the account's balance,
    up to `cap_cby` in all, on `stream_id` (empty: any stream)."""

    TYPE: ClassVar[str] = "SpendingAllowanceGranted"
    account: str
    spender: str
    stream_id: str
    cap_cby: int


@dataclasses.dataclass(frozen=True, slots=True)
class SpendingAllowanceRevoked:
    """The account withdrew `spender`'s allowance on `stream_id` (empty: the any-stream one)."""

    TYPE: ClassVar[str] = "SpendingAllowanceRevoked"
    account: str
    spender: str
    stream_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class _CbyMovement:
    """The fields of a CBY movement on an account: which account, how much, why, and against what."""

    account: str
    amount_cby: int
    reason: str
    ref: str
    counterparty: str


@dataclasses.dataclass(frozen=True, slots=True)
class CbyCredited(_CbyMovement):
    """CBY credited to an account (mint, transfer, publisher_revenue or protocol_fee)."""

    TYPE: ClassVar[str] = "CbyCredited"


@dataclasses.dataclass(frozen=True, slots=True)
class CbyDebited(_CbyMovement):
    """CBY debited from an account (transfer, purchase or burn)."""

    TYPE: ClassVar[str] = "CbyDebited"


@dataclasses.dataclass(frozen=True, slots=True)
class CbyMinted:
    """The genesis minter minted CBY (on ``cby:supply``)."""

    TYPE: ClassVar[str] = "CbyMinted"
    to: str
    amount_cby: int
    total_supply_cby: int


@dataclasses.dataclass(frozen=True, slots=True)
class CbyBurned:
    """An account burned CBY (on ``cby:supply``)."""

    TYPE: ClassVar[str] = "CbyBurned"
    account: str
    amount_cby: int
    total_supply_cby: int


@dataclasses.dataclass(frozen=True, slots=True)
class PaidStreamRegistered:
    """A PLATFORM_MANAGED stream registered with the key manager (on ``paid:<stream_id>``)."""

    TYPE: ClassVar[str] = "PaidStreamRegistered"
    stream_id: str
    owner: str
    paid_stream_config: PaidStreamConfig


@dataclasses.dataclass(frozen=True)
class _PurchaseId:
    """A purchase's id: the first field of a purchase's schema (slot-free, so that a purchase can
    also be a slotted `KeyAccessReceipt`)."""

    purchase_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Purchase(KeyAccessReceipt, _PurchaseId):
    """A purchase of key epochs: its id, then the CIP-7 `KeyAccessReceipt` it is (a dataclass lays
    out its bases' fields from the last base to the first: the schema's order). ``to_dict()`` is
    the receipt alone."""

    @classmethod
    def of(cls, purchase_id: str, receipt: KeyAccessReceipt) -> Self:
        """The purchase `purchase_id` of what `receipt` states."""
        return cls(purchase_id, **{name: getattr(receipt, name) for name in RECEIPT_FIELDS})


@dataclasses.dataclass(frozen=True, slots=True)
class EpochAccessRequested(_Purchase):
    """A priced purchase sent to the payer's account (in flight until settled)."""

    TYPE: ClassVar[str] = "EpochAccessRequested"


@dataclasses.dataclass(frozen=True, slots=True)
class EpochAccessPurchased(_Purchase):
    """CIP-7 EpochAccessPurchased (the receipt's fields and the purchase id)."""

    TYPE: ClassVar[str] = "EpochAccessPurchased"


@dataclasses.dataclass(frozen=True, slots=True)
class EpochAccessIdempotent:
    """CIP-7 EpochAccessIdempotent: already covered, nothing charged."""

    TYPE: ClassVar[str] = "EpochAccessIdempotent"
    stream_id: str
    beneficiary_account: str
    target_key_epoch: int
    active_until_key_epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class EpochAccessFailed:
    """A purchase the payer's account refused (nothing charged)."""

    TYPE: ClassVar[str] = "EpochAccessFailed"
    purchase_id: str
    stream_id: str
    beneficiary_account: str
    code: str
    message: str


__all__ = [
    "AccountKeyRegistered",
    "AccountKeyRevoked",
    "ActorAuthorizationGranted",
    "ActorAuthorizationRevoked",
    "ActorCreated",
    "CbyBurned",
    "CbyCredited",
    "CbyDebited",
    "CbyMinted",
    "EpochAccessFailed",
    "EpochAccessIdempotent",
    "EpochAccessPurchased",
    "EpochAccessRequested",
    "PaidStreamRegistered",
    "SpendingAllowanceGranted",
    "SpendingAllowanceRevoked",
]
