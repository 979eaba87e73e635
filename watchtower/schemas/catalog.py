"""The catalogue of Watchtower record schemas: stable numeric ids, kinds and versions.

The id goes into every framed record's header, so ids are forever: never reuse or renumber one.
A new schema takes the next free id in its block; a new *version* of a schema keeps its id and
adds a file ``<Name>.v<N>.avsc`` next to the old ones (old files are never deleted, so years-old
topics stay decodable).

Blocks: 1-9 shared records, 10-49 events, 50-89 commands, 90-99 replies.
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from typing import Final


class SchemaKind(StrEnum):
    """What a schema describes."""

    RECORD = "record"  # a value type used on its own topic and inside others (StreamMessage, StreamConfig)
    EVENT = "event"  # a past-tense fact on the events topic
    COMMAND = "command"  # a signed request on the commands topic
    REPLY = "reply"  # the answer to a command


@dataclasses.dataclass(frozen=True, slots=True)
class SchemaInfo:
    """One catalogued schema."""

    name: str
    schema_id: int
    kind: SchemaKind


_ENTRIES: Final = (
    # shared records
    ("StreamMessage", 1, SchemaKind.RECORD),
    ("StreamConfig", 2, SchemaKind.RECORD),
    # CIP-7 events
    ("StreamMessagePublished", 10, SchemaKind.EVENT),
    ("SubscriberUpdated", 11, SchemaKind.EVENT),
    ("PublisherKeyRotated", 12, SchemaKind.EVENT),
    ("EpochAccessPurchased", 13, SchemaKind.EVENT),
    ("EpochAccessIdempotent", 14, SchemaKind.EVENT),
    ("AccountKeyRegistered", 15, SchemaKind.EVENT),
    ("AccountKeyRevoked", 16, SchemaKind.EVENT),
    ("ActorAuthorizationGranted", 17, SchemaKind.EVENT),
    ("ActorAuthorizationRevoked", 18, SchemaKind.EVENT),
    ("KeyEpochRotated", 19, SchemaKind.EVENT),
    ("IngestFailed", 20, SchemaKind.EVENT),
    # project events (state changes CIP-7 does not name, but the log must hold)
    ("StreamCreated", 30, SchemaKind.EVENT),
    ("SubscriptionPolicyChanged", 31, SchemaKind.EVENT),
    ("AllowlistChanged", 32, SchemaKind.EVENT),
    ("ReplayRequested", 33, SchemaKind.EVENT),
    ("ReplayStatusChanged", 34, SchemaKind.EVENT),
    ("CbyMinted", 35, SchemaKind.EVENT),
    ("CbyBurned", 36, SchemaKind.EVENT),
    # commands: one per actor / platform method
    ("CreateStream", 50, SchemaKind.COMMAND),
    ("Publish", 51, SchemaKind.COMMAND),
    ("Subscribe", 52, SchemaKind.COMMAND),
    ("Unsubscribe", 53, SchemaKind.COMMAND),
    ("RenewSubscription", 54, SchemaKind.COMMAND),
    ("RotatePublisherKey", 55, SchemaKind.COMMAND),
    ("SetSubscriptionPolicy", 56, SchemaKind.COMMAND),
    ("AllowlistAdd", 57, SchemaKind.COMMAND),
    ("AllowlistRemove", 58, SchemaKind.COMMAND),
    ("AnnounceKeyEpoch", 59, SchemaKind.COMMAND),
    ("AcquireEpochAccess", 60, SchemaKind.COMMAND),
    ("RegisterAccountKey", 61, SchemaKind.COMMAND),
    ("RevokeAccountKey", 62, SchemaKind.COMMAND),
    ("AuthorizeActor", 63, SchemaKind.COMMAND),
    ("RevokeActor", 64, SchemaKind.COMMAND),
    ("RequestReplay", 65, SchemaKind.COMMAND),
    ("CancelReplay", 66, SchemaKind.COMMAND),
    ("MintCby", 67, SchemaKind.COMMAND),
    # replies
    ("CommandReply", 90, SchemaKind.REPLY),
)

CATALOG: Final[dict[str, SchemaInfo]] = {name: SchemaInfo(name, sid, kind) for name, sid, kind in _ENTRIES}
BY_ID: Final[dict[int, SchemaInfo]] = {info.schema_id: info for info in CATALOG.values()}

if len(BY_ID) != len(CATALOG):  # pragma: no cover - a duplicated id is a programming error
    raise RuntimeError("schema ids must be unique")


def names_of_kind(kind: SchemaKind) -> tuple[str, ...]:
    """Every catalogued name of `kind`, in id order."""
    return tuple(sorted((i.name for i in CATALOG.values() if i.kind is kind), key=lambda n: CATALOG[n].schema_id))
