"""The type names of the events on every log, and the sets a fold dispatches on.

A stream's own log holds `STREAM_EVENT_TYPES` (`stream.state.evolve` folds exactly these, handing
`REPLAY_EVENT_TYPES` to `replay.fold`); the registry's, the ingestion runners' and the Stream Key
Manager's events live on their own keys, never on a stream. Each name is the ``TYPE`` of its body
class in `events` or `ledger.events`, and the name of its Avro schema. Pure: names only.
"""

from __future__ import annotations

from typing import Final

STREAM_CREATED: Final = "StreamCreated"
STREAM_MESSAGE_PUBLISHED: Final = "StreamMessagePublished"
SUBSCRIBER_UPDATED: Final = "SubscriberUpdated"
PUBLISHER_KEY_ROTATED: Final = "PublisherKeyRotated"
SUBSCRIPTION_POLICY_CHANGED: Final = "SubscriptionPolicyChanged"
ALLOWLIST_CHANGED: Final = "AllowlistChanged"
KEY_EPOCH_ROTATED: Final = "KeyEpochRotated"
REPLAY_PRICING_SET: Final = "ReplayPricingSet"
REPLAY_ORDERED: Final = "ReplayOrdered"
REPLAY_REGISTERED: Final = "ReplayRegistered"
REPLAY_PAYMENT_FAILED: Final = "ReplayPaymentFailed"
REPLAY_CANCEL_REQUESTED: Final = "ReplayCancelRequested"
REPLAY_FINISHED: Final = "ReplayFinished"
FEED_REGISTERED: Final = "FeedRegistered"
"""The registry's event (see `registry`); it lives on the registry key, never on a stream."""
INGEST_FAILED: Final = "IngestFailed"
"""CIP-7 IngestFailed: an ingestion tick published nothing (`ingestion_failure`)."""
RUNNER_REGISTERED: Final = "RunnerRegistered"
RUNNER_RETIRED: Final = "RunnerRetired"
"""The runner registry's events (`ingestion_runners`), on the registry's own key, never on a stream."""

# The Stream Key Manager's events (`protocol.ledger.common`): each lives on its instance key
# (``acct:<address>``, ``paid:<stream_id>``, ``cby:supply``), never on a stream.
ACCOUNT_KEY_REGISTERED: Final = "AccountKeyRegistered"
ACCOUNT_KEY_REVOKED: Final = "AccountKeyRevoked"
ACTOR_AUTHORIZATION_GRANTED: Final = "ActorAuthorizationGranted"
ACTOR_AUTHORIZATION_REVOKED: Final = "ActorAuthorizationRevoked"
ACTOR_CREATED: Final = "ActorCreated"
SPENDING_ALLOWANCE_GRANTED: Final = "SpendingAllowanceGranted"
SPENDING_ALLOWANCE_REVOKED: Final = "SpendingAllowanceRevoked"
CBY_CREDITED: Final = "CbyCredited"
CBY_DEBITED: Final = "CbyDebited"
CBY_MINTED: Final = "CbyMinted"
CBY_BURNED: Final = "CbyBurned"
PAID_STREAM_REGISTERED: Final = "PaidStreamRegistered"
EPOCH_ACCESS_REQUESTED: Final = "EpochAccessRequested"
EPOCH_ACCESS_PURCHASED: Final = "EpochAccessPurchased"
EPOCH_ACCESS_IDEMPOTENT: Final = "EpochAccessIdempotent"
EPOCH_ACCESS_FAILED: Final = "EpochAccessFailed"

MESSAGE_CIP7_FIELDS: Final = (
    "stream_id",
    "version",
    "sequence",
    "kind",
    "content_type",
    "payload_format",
    "payload_hash",
    "key_epoch",
    "signing_key_id",
    "timestamp_unix_ms",
)
"""The CIP-7 StreamMessagePublished fields: the whole event body, a reference to the message by
stream, sequence and hash. The message itself goes to the messages topic only."""


STREAM_EVENT_TYPES: Final = frozenset(
    {
        STREAM_CREATED,
        STREAM_MESSAGE_PUBLISHED,
        SUBSCRIBER_UPDATED,
        PUBLISHER_KEY_ROTATED,
        SUBSCRIPTION_POLICY_CHANGED,
        ALLOWLIST_CHANGED,
        KEY_EPOCH_ROTATED,
        REPLAY_PRICING_SET,
        REPLAY_ORDERED,
        REPLAY_REGISTERED,
        REPLAY_PAYMENT_FAILED,
        REPLAY_CANCEL_REQUESTED,
        REPLAY_FINISHED,
        INGEST_FAILED,
    }
)
"""The events a stream's own log holds (the stream actor folds exactly these)."""

REPLAY_EVENT_TYPES: Final = frozenset(
    {REPLAY_PRICING_SET, REPLAY_ORDERED, REPLAY_REGISTERED, REPLAY_PAYMENT_FAILED, REPLAY_CANCEL_REQUESTED,
     REPLAY_FINISHED}
)
"""The ICRC-77 replay control events of a stream (folded by `replay_fold`)."""
