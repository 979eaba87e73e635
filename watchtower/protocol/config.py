"""StreamConfig and IngestionConfig (CIP-7 Data Types 1 and 9), valid by construction.

StreamConfig rules (`InvalidArgumentError` otherwise):
- stream_id non-empty text; owner an address; publisher_key a 32-byte ed25519 key;
- current_signing_key_id ≥ 1; ring_buffer_capacity > 0; max_subscribers > 0 (uint32);
- push limits finite and non-zero: max_push_deliveries_per_block (uint32) and
  max_push_cycles_per_block (uint64, bounded by the wire range) are ≥ 1;
- subscription_policy PUBLIC | PRIVATE_ALLOWLIST; access_mode OPEN | PLATFORM_MANAGED, with
  SUBSCRIBER_PAID accepted and stored as PLATFORM_MANAGED;
- PLATFORM_MANAGED ⇔ paid_stream_config is set;
- confidential (Watchtower's extension, docs/private-feeds.md) is true or false, and true only with
  PRIVATE_ALLOWLIST: the writer then requires every message to be masked under the current keyload.

`to_dict()` keeps bytes as bytes (the record form); `to_json_dict()` writes publisher_key as
``publisher_key_hex``. `from_dict` accepts either spelling. Both leave ``confidential`` out while it
is false, so a stream that is not confidential has the dict (and the state digest) it always had.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from watchtower.protocol.addresses import require_address
from watchtower.protocol.constants import (
    DEFAULT_INGEST_INTERVAL_BLOCKS,
    DEFAULT_MAX_PUSH_CYCLES_PER_BLOCK,
    DEFAULT_MAX_PUSH_DELIVERIES_PER_BLOCK,
    DEFAULT_MAX_SUBSCRIBERS,
    DEFAULT_RING_BUFFER_CAPACITY,
    ED25519_PUBLIC_KEY_BYTES,
    FIRST_SIGNING_KEY_ID,
    MAX_UINT8,
    MAX_UINT32,
)
from watchtower.protocol.enums import AccessMode, SubscriptionPolicy, parse_access_mode
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.ledger.paid import PaidStreamConfig
from watchtower.protocol.validation import known_fields, require_bytes, require_int, require_text


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class IngestionConfig:
    """Optional timer-driven ingestion through CIP-2 runners."""

    enabled: bool
    task_definition: Mapping[str, Any]
    result_schema: Mapping[str, Any]
    num_runners: int
    proof_type: str
    interval_blocks: int = DEFAULT_INGEST_INTERVAL_BLOCKS
    transform_method: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise InvalidArgumentError("ingestion.enabled must be true or false")
        require_int(self.interval_blocks, "ingestion.interval_blocks", minimum=1, maximum=MAX_UINT32)
        require_int(self.num_runners, "ingestion.num_runners", minimum=1, maximum=MAX_UINT8)
        require_text(self.proof_type, "ingestion.proof_type")
        for name in ("task_definition", "result_schema"):
            if not isinstance(getattr(self, name), Mapping):
                raise InvalidArgumentError(f"ingestion.{name} must be an object")
        if self.transform_method is not None:
            require_text(self.transform_method, "ingestion.transform_method")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IngestionConfig:
        """Inverse of `to_dict`."""
        return cls(**known_fields(cls, data, "ingestion"))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StreamConfig:
    """CIP-7 StreamConfig, valid by construction (see the module docstring)."""

    stream_id: str
    owner: str
    publisher_key: bytes
    current_signing_key_id: int = FIRST_SIGNING_KEY_ID
    ring_buffer_capacity: int = DEFAULT_RING_BUFFER_CAPACITY
    max_subscribers: int = DEFAULT_MAX_SUBSCRIBERS
    subscription_policy: SubscriptionPolicy = SubscriptionPolicy.PUBLIC
    max_push_deliveries_per_block: int = DEFAULT_MAX_PUSH_DELIVERIES_PER_BLOCK
    max_push_cycles_per_block: int = DEFAULT_MAX_PUSH_CYCLES_PER_BLOCK
    access_mode: AccessMode = AccessMode.OPEN
    paid_stream_config: PaidStreamConfig | None = None
    ingestion: IngestionConfig | None = None
    confidential: bool = False

    def __post_init__(self) -> None:
        put = object.__setattr__
        require_text(self.stream_id, "stream_id")
        require_address(self.owner, "owner")
        put(
            self,
            "publisher_key",
            require_bytes(self.publisher_key, "publisher_key", length=ED25519_PUBLIC_KEY_BYTES),
        )
        require_int(self.current_signing_key_id, "current_signing_key_id", minimum=FIRST_SIGNING_KEY_ID)
        require_int(self.ring_buffer_capacity, "ring_buffer_capacity", minimum=1, maximum=MAX_UINT32)
        require_int(self.max_subscribers, "max_subscribers", minimum=1, maximum=MAX_UINT32)
        require_int(self.max_push_deliveries_per_block, "max_push_deliveries_per_block", minimum=1, maximum=MAX_UINT32)
        require_int(self.max_push_cycles_per_block, "max_push_cycles_per_block", minimum=1)
        try:
            put(self, "subscription_policy", SubscriptionPolicy(self.subscription_policy))
        except ValueError:
            raise InvalidArgumentError(
                f"subscription_policy must be PUBLIC or PRIVATE_ALLOWLIST, got {self.subscription_policy!r}"
            ) from None
        mode = parse_access_mode(self.access_mode)
        put(self, "access_mode", mode)
        if self.paid_stream_config is not None and not isinstance(self.paid_stream_config, PaidStreamConfig):
            raise InvalidArgumentError("paid_stream_config must be a PaidStreamConfig")
        if self.ingestion is not None and not isinstance(self.ingestion, IngestionConfig):
            raise InvalidArgumentError("ingestion must be an IngestionConfig")
        if mode is AccessMode.PLATFORM_MANAGED and self.paid_stream_config is None:
            raise InvalidArgumentError("a PLATFORM_MANAGED stream needs paid_stream_config")
        if mode is AccessMode.OPEN and self.paid_stream_config is not None:
            raise InvalidArgumentError("an OPEN stream must not have paid_stream_config; use PLATFORM_MANAGED")
        if not isinstance(self.confidential, bool):
            raise InvalidArgumentError("confidential must be true or false")
        if self.confidential and self.subscription_policy is not SubscriptionPolicy.PRIVATE_ALLOWLIST:
            raise InvalidArgumentError(
                "confidential needs subscription_policy PRIVATE_ALLOWLIST (a keyload is sealed to the allowlist); "
                "set subscription_policy to PRIVATE_ALLOWLIST or drop confidential"
            )
        if self.confidential and mode is AccessMode.PLATFORM_MANAGED:
            raise InvalidArgumentError(
                "a confidential stream masks payloads under its own keyloads, a PLATFORM_MANAGED one under the key "
                "manager's epochs: choose one (drop confidential, or use access_mode OPEN)"
            )

    @property
    def is_paid(self) -> bool:
        """True for PLATFORM_MANAGED streams (which must publish CIPHERTEXT)."""
        return self.access_mode is AccessMode.PLATFORM_MANAGED

    def to_dict(self) -> dict[str, Any]:
        """Record form: every field, bytes as bytes, enums as text, nested configs as dicts."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["subscription_policy"] = str(self.subscription_policy)
        out["access_mode"] = str(self.access_mode)
        out["paid_stream_config"] = self.paid_stream_config.to_dict() if self.paid_stream_config else None
        out["ingestion"] = self.ingestion.to_dict() if self.ingestion else None
        if not self.confidential:
            del out["confidential"]  # absent while false: the dict of every other stream is unchanged
        return out

    def to_json_dict(self) -> dict[str, Any]:
        """JSON form: as `to_dict`, with ``publisher_key_hex`` instead of bytes."""
        out = self.to_dict()
        out["publisher_key_hex"] = out.pop("publisher_key").hex()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamConfig:
        """Build from `to_dict` or `to_json_dict` output; `InvalidArgumentError` on any bad field."""
        if not isinstance(data, Mapping):
            raise InvalidArgumentError("stream config must be an object")
        fields = dict(data)
        if "publisher_key_hex" in fields:
            hex_key = fields.pop("publisher_key_hex")
            try:
                fields["publisher_key"] = bytes.fromhex(hex_key)
            except (TypeError, ValueError):
                raise InvalidArgumentError("publisher_key_hex must be hex") from None
        paid = fields.get("paid_stream_config")
        if isinstance(paid, Mapping):
            fields["paid_stream_config"] = PaidStreamConfig.from_dict(paid)
        ingestion = fields.get("ingestion")
        if isinstance(ingestion, Mapping):
            fields["ingestion"] = IngestionConfig.from_dict(ingestion)
        return cls(**known_fields(cls, fields, "stream config"))
