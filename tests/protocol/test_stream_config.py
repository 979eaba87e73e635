"""StreamConfig and IngestionConfig rules (CIP-7 Data Types 1 and 9)."""

from __future__ import annotations

from typing import Any

import pytest

from watchtower.protocol import AccessMode, IngestionConfig, PaidStreamConfig, StreamConfig, SubscriptionPolicy
from watchtower.protocol.errors import InvalidArgumentError

OWNER = "0x" + "aa" * 32
PAID = PaidStreamConfig(
    fee_per_key_epoch_cby=5, protocol_fee_bps=100, publisher_treasury=OWNER, protocol_treasury="0x" + "bb" * 32
)
INGESTION = IngestionConfig(
    enabled=True, task_definition={"url": "x"}, result_schema={"type": "object"}, num_runners=3, proof_type="NONE"
)


def config(**overrides: Any) -> StreamConfig:
    fields: dict[str, Any] = {"stream_id": "prices", "owner": OWNER, "publisher_key": bytes(32)}
    fields.update(overrides)
    return StreamConfig(**fields)


def test_defaults() -> None:
    c = config()
    assert (c.ring_buffer_capacity, c.max_subscribers, c.current_signing_key_id) == (10_000, 10_000, 1)
    assert c.subscription_policy is SubscriptionPolicy.PUBLIC
    assert c.access_mode is AccessMode.OPEN
    assert not c.is_paid


def test_subscriber_paid_is_stored_as_platform_managed() -> None:
    c = config(access_mode="SUBSCRIBER_PAID", paid_stream_config=PAID)
    assert c.access_mode is AccessMode.PLATFORM_MANAGED
    assert c.is_paid
    assert c.to_dict()["access_mode"] == "PLATFORM_MANAGED"


@pytest.mark.parametrize(
    "overrides",
    [
        {"stream_id": ""},
        {"owner": "bob"},
        {"publisher_key": bytes(31)},
        {"current_signing_key_id": 0},
        {"ring_buffer_capacity": 0},
        {"ring_buffer_capacity": 2**32},
        {"max_subscribers": 0},
        {"max_push_deliveries_per_block": 0},
        {"max_push_cycles_per_block": 0},
        {"max_push_cycles_per_block": float("inf")},
        {"subscription_policy": "FRIENDS"},
        {"access_mode": "FREE"},
        {"access_mode": "PLATFORM_MANAGED"},  # without paid_stream_config
        {"access_mode": "OPEN", "paid_stream_config": PAID},
        {"paid_stream_config": {"fee_per_key_epoch_cby": 5}},
        {"ingestion": {"enabled": True}},
    ],
)
def test_rules(overrides: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        config(**overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        {"enabled": "yes"},
        {"interval_blocks": 0},
        {"num_runners": 0},
        {"num_runners": 256},
        {"proof_type": ""},
        {"task_definition": "x"},
        {"transform_method": ""},
    ],
)
def test_ingestion_rules(overrides: dict[str, Any]) -> None:
    fields = INGESTION.to_dict() | overrides
    with pytest.raises(InvalidArgumentError):
        IngestionConfig(**fields)


def test_round_trips_in_record_and_json_form() -> None:
    c = config(
        access_mode="PLATFORM_MANAGED",
        paid_stream_config=PAID,
        ingestion=INGESTION,
        subscription_policy="PRIVATE_ALLOWLIST",
    )
    assert StreamConfig.from_dict(c.to_dict()) == c
    assert StreamConfig.from_dict(c.to_json_dict()) == c
    assert c.to_json_dict()["publisher_key_hex"] == "00" * 32


def test_from_dict_reports_unknown_and_missing_fields() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown"):
        StreamConfig.from_dict(config().to_dict() | {"colour": "red"})
    with pytest.raises(InvalidArgumentError, match="missing"):
        StreamConfig.from_dict({"stream_id": "s"})
    with pytest.raises(InvalidArgumentError, match="hex"):
        StreamConfig.from_dict({"stream_id": "s", "owner": OWNER, "publisher_key_hex": "zz"})
