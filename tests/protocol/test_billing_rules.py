"""Key epochs from block time, PaidStreamConfig, and acquire_epoch_access (DESIGN §5, §7.6)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import PROPERTY, vectors_of_type

from watchtower.protocol import (
    AccessMode,
    EpochPricing,
    PaidStreamConfig,
    acquire_epoch_access,
    block_height_at,
    first_height_of_epoch,
    key_epoch_at,
    key_epoch_of_height,
    price_epochs,
    require_entitlement,
)
from watchtower.protocol.constants import GENESIS_UNIX_MS
from watchtower.protocol.errors import (
    EntitlementRequiredError,
    InsufficientCbyBalanceError,
    InvalidArgumentError,
    InvalidTargetKeyEpochError,
    MinPurchaseNotMetError,
    NotPlatformManagedStreamError,
    WatchtowerError,
)

TREASURY = "0x" + "11" * 32
PROTOCOL = "0x" + "22" * 32
RICH = 10**18


def buy(**overrides: Any) -> Any:
    args: dict[str, Any] = {
        "access_mode": "PLATFORM_MANAGED",
        "pricing": EpochPricing(1000, 250, 1),
        "current_key_epoch": 100,
        "target_key_epoch": 102,
        "active_until_key_epoch": None,
        "payer_balance_cby": RICH,
    }
    args.update(overrides)
    return acquire_epoch_access(**args)


@pytest.mark.parametrize("vector", vectors_of_type("billing"), ids=lambda v: v["id"])
def test_billing_vectors(vector: dict[str, Any]) -> None:
    inp, expect = vector["input"], vector["expect"]
    pricing = None
    if inp["access_mode"] != "OPEN":
        pricing = EpochPricing(inp["fee_per_key_epoch_cby"], inp["protocol_fee_bps"], inp["min_purchase_epochs"])
    call = {
        "access_mode": inp["access_mode"],
        "pricing": pricing,
        "current_key_epoch": inp["current_key_epoch"],
        "target_key_epoch": inp["target_key_epoch"],
        "active_until_key_epoch": inp["active_until_key_epoch"],
        "payer_balance_cby": inp["payer_balance_cby"],
    }
    if "error" in expect:
        with pytest.raises(WatchtowerError) as caught:
            acquire_epoch_access(**call)
        assert caught.value.code == expect["error"]
        return
    decision = acquire_epoch_access(**call)
    receipt = decision.receipt.to_dict()
    for key, value in expect.items():
        actual = getattr(decision, key) if key in ("idempotent", "active_until_key_epoch") else receipt[key]
        assert actual == value, key


def test_open_stream_is_refused_first_even_with_nonsense_inputs() -> None:
    with pytest.raises(NotPlatformManagedStreamError):
        buy(access_mode="OPEN", pricing=None, current_key_epoch=-1)


def test_subscriber_paid_alias_is_platform_managed() -> None:
    assert buy(access_mode="SUBSCRIBER_PAID").receipt.total_amount_cby == 3075
    with pytest.raises(InvalidArgumentError):
        buy(access_mode="PAID")


def test_idempotence_is_decided_before_the_target_check() -> None:
    decision = buy(active_until_key_epoch=105, target_key_epoch=99)
    assert decision.idempotent
    assert decision.event_name == "EpochAccessIdempotent"
    assert decision.receipt.total_amount_cby == 0
    assert decision.receipt.epochs_charged == 0
    assert decision.receipt.to_key_epoch - decision.receipt.from_key_epoch + 1 == 0


def test_historical_target_without_entitlement_is_invalid() -> None:
    with pytest.raises(InvalidTargetKeyEpochError, match="epoch 100 or later"):
        buy(target_key_epoch=99)


def test_a_lapsed_entitlement_pays_for_the_gap() -> None:
    decision = buy(active_until_key_epoch=95, target_key_epoch=100, pricing=EpochPricing(10, 0, 1))
    assert (decision.receipt.from_key_epoch, decision.receipt.epochs_charged) == (96, 5)
    assert decision.receipt.total_amount_cby == 50
    assert decision.event_name == "EpochAccessPurchased"


def test_minimum_purchase_is_checked_before_the_balance() -> None:
    with pytest.raises(MinPurchaseNotMetError, match="target epoch 103 or later"):
        buy(active_until_key_epoch=100, target_key_epoch=101, pricing=EpochPricing(5, 0, 3), payer_balance_cby=0)


def test_insufficient_balance_says_how_much_is_missing() -> None:
    with pytest.raises(InsufficientCbyBalanceError, match="at least 1 more"):
        buy(payer_balance_cby=3074)
    assert buy(payer_balance_cby=3075).receipt.total_amount_cby == 3075


def test_receipt_carries_the_parties() -> None:
    receipt = buy(stream_id="s", beneficiary_account=TREASURY, payer_account=PROTOCOL).receipt
    assert (receipt.stream_id, receipt.beneficiary_account, receipt.payer_account) == ("s", TREASURY, PROTOCOL)


@PROPERTY
@given(
    st.integers(0, 1000),
    st.integers(0, 1100),
    st.none() | st.integers(0, 1100),
    st.integers(1, 10**6),
    st.integers(0, 5000),
    st.integers(1, 20),
    st.integers(0, 10**12),
)
def test_purchases_conserve_value_and_never_shrink_entitlements(
    current: int, target: int, active_until: int | None, fee: int, bps: int, min_epochs: int, balance: int
) -> None:
    try:
        decision = buy(
            current_key_epoch=current,
            target_key_epoch=target,
            active_until_key_epoch=active_until,
            pricing=EpochPricing(fee, bps, min_epochs),
            payer_balance_cby=balance,
        )
    except (InvalidTargetKeyEpochError, MinPurchaseNotMetError, InsufficientCbyBalanceError):
        return
    r = decision.receipt
    assert r.total_amount_cby == r.publisher_amount_cby + r.protocol_fee_cby <= balance
    assert r.publisher_amount_cby == r.epochs_charged * fee
    assert r.protocol_fee_cby * 10_000 <= r.publisher_amount_cby * bps < (r.protocol_fee_cby + 1) * 10_000
    assert r.epochs_charged == r.to_key_epoch - r.from_key_epoch + 1
    assert decision.active_until_key_epoch >= (active_until if active_until is not None else -1)
    assert decision.active_until_key_epoch >= target
    if not decision.idempotent:
        assert r.epochs_charged >= min_epochs
        assert r.from_key_epoch == (active_until + 1 if active_until is not None else current)


def test_price_of_zero_epochs_is_zero() -> None:
    price = price_epochs(0, EpochPricing(7, 333, 1))
    assert (price.publisher_amount_cby, price.protocol_fee_cby, price.total_amount_cby) == (0, 0, 0)


def test_block_height_and_key_epochs_from_unix_ms() -> None:
    assert block_height_at(GENESIS_UNIX_MS) == 0
    assert block_height_at(GENESIS_UNIX_MS + 999) == 0
    assert block_height_at(GENESIS_UNIX_MS + 1000) == 1
    assert block_height_at(GENESIS_UNIX_MS + 5000, block_interval_ms=2500) == 2
    assert key_epoch_of_height(599, 600) == 0
    assert key_epoch_of_height(600, 600) == 1
    assert key_epoch_at(GENESIS_UNIX_MS + 600_000, 600) == 1
    assert first_height_of_epoch(3, 600) == 1800
    with pytest.raises(InvalidArgumentError, match="before genesis"):
        block_height_at(GENESIS_UNIX_MS - 1)
    with pytest.raises(InvalidArgumentError):
        key_epoch_of_height(10, 0)


def test_entitlement_gate() -> None:
    require_entitlement(active_until_key_epoch=5, key_epoch=5)
    with pytest.raises(EntitlementRequiredError, match="target_key_epoch ≥ 6"):
        require_entitlement(active_until_key_epoch=5, key_epoch=6)
    with pytest.raises(EntitlementRequiredError, match="no entitlement"):
        require_entitlement(active_until_key_epoch=None, key_epoch=0)


def paid(**overrides: Any) -> PaidStreamConfig:
    fields: dict[str, Any] = {
        "fee_per_key_epoch_cby": 1000,
        "protocol_fee_bps": 250,
        "publisher_treasury": TREASURY,
        "protocol_treasury": PROTOCOL,
    }
    fields.update(overrides)
    return PaidStreamConfig(**fields)


def test_paid_config_defaults_and_round_trip() -> None:
    config = paid()
    assert (config.key_epoch_blocks, config.min_purchase_epochs) == (600, 1)
    assert (config.content_cipher, config.key_scope) == ("XCHACHA20_POLY1305", "ACCOUNT")
    assert PaidStreamConfig.from_dict(config.to_dict()) == config
    assert config.pricing == EpochPricing(1000, 250, 1)


@pytest.mark.parametrize(
    "overrides",
    [
        {"fee_per_key_epoch_cby": 0},
        {"protocol_fee_bps": 5001},
        {"protocol_fee_bps": -1},
        {"key_epoch_blocks": 0},
        {"min_purchase_epochs": 0},
        {"content_cipher": "AES_GCM"},
        {"key_scope": "ACTOR"},
        {"publisher_treasury": "alice"},
        {"protocol_treasury": "0x" + "AB" * 32},
    ],
)
def test_paid_config_rules(overrides: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        paid(**overrides)


def test_max_protocol_fee_is_allowed() -> None:
    assert paid(protocol_fee_bps=5000).protocol_fee_bps == 5000


def test_access_mode_enum_folds_the_alias() -> None:
    assert AccessMode("SUBSCRIBER_PAID") is AccessMode.PLATFORM_MANAGED
