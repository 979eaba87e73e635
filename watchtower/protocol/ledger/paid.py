"""PaidStreamConfig (CIP-7 Data Type 2) and the pricing terms billing needs from it.

Rules enforced on construction (`InvalidArgumentError` otherwise):
- fee_per_key_epoch_cby > 0; protocol_fee_bps in [0, 5000];
- key_epoch_blocks > 0 (uint32); min_purchase_epochs ≥ 1 (uint32);
- content_cipher is XCHACHA20_POLY1305 and key_scope is ACCOUNT (the only v1 values);
- publisher_treasury and protocol_treasury are addresses.

CIP-7 says publishers may not override protocol_treasury: it is set at genesis or by governance.
`with_governed_treasury` applies the deployment's treasury to a publisher-supplied config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from watchtower.protocol.addresses import require_address
from watchtower.protocol.constants import (
    CONTENT_CIPHER,
    DEFAULT_KEY_EPOCH_BLOCKS,
    DEFAULT_MIN_PURCHASE_EPOCHS,
    KEY_SCOPE_ACCOUNT,
    MAX_PROTOCOL_FEE_BPS,
    MAX_UINT32,
)
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.validation import known_fields, require_int


@dataclasses.dataclass(frozen=True, slots=True)
class EpochPricing:
    """The three numbers `acquire_epoch_access` prices with."""

    fee_per_key_epoch_cby: int
    protocol_fee_bps: int
    min_purchase_epochs: int = DEFAULT_MIN_PURCHASE_EPOCHS

    def __post_init__(self) -> None:
        require_int(self.fee_per_key_epoch_cby, "fee_per_key_epoch_cby", minimum=1)
        require_int(self.protocol_fee_bps, "protocol_fee_bps", maximum=MAX_PROTOCOL_FEE_BPS)
        require_int(self.min_purchase_epochs, "min_purchase_epochs", minimum=1, maximum=MAX_UINT32)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PaidStreamConfig:
    """CIP-7 PaidStreamConfig, valid by construction."""

    fee_per_key_epoch_cby: int
    protocol_fee_bps: int
    publisher_treasury: str
    protocol_treasury: str
    key_epoch_blocks: int = DEFAULT_KEY_EPOCH_BLOCKS
    content_cipher: str = CONTENT_CIPHER
    key_scope: str = KEY_SCOPE_ACCOUNT
    min_purchase_epochs: int = DEFAULT_MIN_PURCHASE_EPOCHS

    def __post_init__(self) -> None:
        # EpochPricing holds the numeric rules, so they are written once.
        EpochPricing(self.fee_per_key_epoch_cby, self.protocol_fee_bps, self.min_purchase_epochs)
        require_int(self.key_epoch_blocks, "key_epoch_blocks", minimum=1, maximum=MAX_UINT32)
        if self.content_cipher != CONTENT_CIPHER:
            raise InvalidArgumentError(
                f"content_cipher must be {CONTENT_CIPHER} in CIP-7 v1, got {self.content_cipher!r}"
            )
        if self.key_scope != KEY_SCOPE_ACCOUNT:
            raise InvalidArgumentError(f"key_scope must be {KEY_SCOPE_ACCOUNT} in CIP-7 v1, got {self.key_scope!r}")
        require_address(self.publisher_treasury, "publisher_treasury")
        require_address(self.protocol_treasury, "protocol_treasury")

    @property
    def pricing(self) -> EpochPricing:
        """The pricing terms for `acquire_epoch_access`."""
        return EpochPricing(self.fee_per_key_epoch_cby, self.protocol_fee_bps, self.min_purchase_epochs)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (the Avro record and the JSON form)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PaidStreamConfig:
        """Inverse of `to_dict`; unknown or missing fields are `InvalidArgumentError`."""
        return cls(**known_fields(cls, data, "paid_stream_config"))
