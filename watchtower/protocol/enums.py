"""The closed vocabularies of CIP-7, as string enums.

Members are `str` subclasses whose value is the spec's spelling, so they compare equal to the
plain strings that arrive in JSON, Avro and CBOR, and encode as those strings.
"""

from __future__ import annotations

from enum import StrEnum

from watchtower.protocol.errors import InvalidArgumentError


class PayloadFormat(StrEnum):
    """StreamMessage.payload_format."""

    PLAINTEXT = "PLAINTEXT"
    CIPHERTEXT = "CIPHERTEXT"


class AccessMode(StrEnum):
    """StreamConfig.access_mode. `SUBSCRIBER_PAID` is accepted as an alias of PLATFORM_MANAGED.

    CIP-7 requires implementations to treat the alias and the name as identical, so the alias is
    folded into PLATFORM_MANAGED on parse: `AccessMode("SUBSCRIBER_PAID") is PLATFORM_MANAGED`.
    """

    OPEN = "OPEN"
    PLATFORM_MANAGED = "PLATFORM_MANAGED"

    @classmethod
    def _missing_(cls, value: object) -> AccessMode | None:
        if value == "SUBSCRIBER_PAID":
            return cls.PLATFORM_MANAGED
        return None


SUBSCRIBER_PAID_ALIAS = "SUBSCRIBER_PAID"


def parse_access_mode(value: object) -> AccessMode:
    """`value` as an AccessMode (SUBSCRIBER_PAID folds into PLATFORM_MANAGED), else INVALID_ARGUMENT."""
    if isinstance(value, str):
        try:
            return AccessMode(value)
        except ValueError:
            pass
    raise InvalidArgumentError(f"access_mode must be OPEN or PLATFORM_MANAGED (alias SUBSCRIBER_PAID), got {value!r}")


class SubscriptionPolicy(StrEnum):
    """StreamConfig.subscription_policy."""

    PUBLIC = "PUBLIC"
    PRIVATE_ALLOWLIST = "PRIVATE_ALLOWLIST"


class DeliveryMode(StrEnum):
    """Subscription.mode."""

    PUSH = "PUSH"
    PULL = "PULL"
    PUSH_WITH_PULL_FALLBACK = "PUSH_WITH_PULL_FALLBACK"


class SubscriptionStatus(StrEnum):
    """Subscription.status."""

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    CANCELLED = "CANCELLED"


class KeyStatus(StrEnum):
    """AccountKeyRegistration.status and ActorAuthorization.status."""

    ACTIVE = "ACTIVE"
    REVOKED = "REVOKED"


class ReplayState(StrEnum):
    """ICRC-77 ReplayState, spelled as the draft spells its variants."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELED = "canceled"
    ERRORED = "errored"
