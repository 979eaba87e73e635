"""The schema ids of Watchtower records: stable numeric ids, kinds and versions (the topics and
their layout are `topics.catalogue`).

The id goes into every framed record's header, so ids are forever: never reuse or renumber one.
A new schema takes the next free id in its block; a new *version* of a schema keeps its id and
adds a file ``<Name>.v<N>.avsc`` next to the old ones (old files are never deleted, so years-old
topics stay decodable).

Blocks: 1-9 shared records, 10-49 events (50-99 held retired command and reply drafts).
A retired id stays in `RETIRED_IDS` and is never given to another schema.
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from typing import Final


class SchemaKind(StrEnum):
    """What a schema describes."""

    RECORD = "record"  # a value on its own topic (StreamMessage on messages)
    EVENT = "event"  # a past-tense fact on the events topic


@dataclasses.dataclass(frozen=True, slots=True)
class SchemaInfo:
    """One catalogued schema."""

    name: str
    schema_id: int
    kind: SchemaKind


_ENTRIES: Final = (
    # shared records
    ("StreamMessage", 1, SchemaKind.RECORD),
    # CIP-7 ingestion's signed records (ingest.tasks, ingest.results)
    ("IngestTask", 3, SchemaKind.RECORD),
    ("IngestResult", 4, SchemaKind.RECORD),
    ("IngestTaskBatch", 5, SchemaKind.RECORD),
    ("IngestResultBatch", 6, SchemaKind.RECORD),
    # events: one schema per event type, each file self-contained (every named type inlined)
    ("StreamMessagePublished", 10, SchemaKind.EVENT),
    ("SubscriberUpdated", 11, SchemaKind.EVENT),
    ("PublisherKeyRotated", 12, SchemaKind.EVENT),
    ("KeyEpochRotated", 19, SchemaKind.EVENT),
    ("StreamCreated", 30, SchemaKind.EVENT),
    ("SubscriptionPolicyChanged", 31, SchemaKind.EVENT),
    ("AllowlistChanged", 32, SchemaKind.EVENT),
    ("FeedRegistered", 37, SchemaKind.EVENT),
    # The Stream Key Manager's events. The eight drafted (and retired unused) under these very
    # names take back their ids, so an id still means one schema; the rest take fresh ids.
    ("EpochAccessPurchased", 13, SchemaKind.EVENT),
    ("EpochAccessIdempotent", 14, SchemaKind.EVENT),
    ("AccountKeyRegistered", 15, SchemaKind.EVENT),
    ("AccountKeyRevoked", 16, SchemaKind.EVENT),
    ("ActorAuthorizationGranted", 17, SchemaKind.EVENT),
    ("ActorAuthorizationRevoked", 18, SchemaKind.EVENT),
    ("CbyCredited", 21, SchemaKind.EVENT),
    ("CbyDebited", 22, SchemaKind.EVENT),
    ("PaidStreamRegistered", 23, SchemaKind.EVENT),
    ("EpochAccessRequested", 24, SchemaKind.EVENT),
    ("EpochAccessFailed", 25, SchemaKind.EVENT),
    ("CbyMinted", 35, SchemaKind.EVENT),
    ("CbyBurned", 36, SchemaKind.EVENT),
    # ICRC-77 replay control on a stream (fresh ids: 33 and 34 held retired replay drafts).
    ("ReplayPricingSet", 26, SchemaKind.EVENT),
    ("ReplayOrdered", 27, SchemaKind.EVENT),
    ("ReplayRegistered", 28, SchemaKind.EVENT),
    ("ReplayPaymentFailed", 29, SchemaKind.EVENT),
    ("ReplayCancelRequested", 38, SchemaKind.EVENT),
    ("ReplayFinished", 39, SchemaKind.EVENT),
    # CIP-7 ingestion: IngestFailed takes back the id its unused draft held; the runner registry's
    # events take fresh ids.
    ("IngestFailed", 20, SchemaKind.EVENT),
    ("RunnerRegistered", 40, SchemaKind.EVENT),
    ("RunnerRetired", 41, SchemaKind.EVENT),
    # CIP-7 actor.creator and delegated spending authority, on an account (fresh ids).
    ("ActorCreated", 42, SchemaKind.EVENT),
    ("SpendingAllowanceGranted", 43, SchemaKind.EVENT),
    ("SpendingAllowanceRevoked", 44, SchemaKind.EVENT),
)

RETIRED_IDS: Final[dict[str, int]] = {
    # Schemas drafted before any record used them, removed unused; their ids stay taken so a
    # future schema can never be mistaken for one of them. Commands, replies and internal
    # forwards are JSON envelopes defined in `envelopes`, not Avro.
    "StreamConfig": 2,  # now inlined in StreamCreated
    "ReplayRequested": 33,
    "ReplayStatusChanged": 34,
    "CreateStream": 50,
    "Publish": 51,
    "Subscribe": 52,
    "Unsubscribe": 53,
    "RenewSubscription": 54,
    "RotatePublisherKey": 55,
    "SetSubscriptionPolicy": 56,
    "AllowlistAdd": 57,
    "AllowlistRemove": 58,
    "AnnounceKeyEpoch": 59,
    "AcquireEpochAccess": 60,
    "RegisterAccountKey": 61,
    "RevokeAccountKey": 62,
    "AuthorizeActor": 63,
    "RevokeActor": 64,
    "RequestReplay": 65,
    "CancelReplay": 66,
    "MintCby": 67,
    "CommandReply": 90,
}

CATALOG: Final[dict[str, SchemaInfo]] = {name: SchemaInfo(name, sid, kind) for name, sid, kind in _ENTRIES}
BY_ID: Final[dict[int, SchemaInfo]] = {info.schema_id: info for info in CATALOG.values()}

if len(BY_ID) != len(CATALOG) or set(BY_ID) & set(RETIRED_IDS.values()):  # pragma: no cover
    raise RuntimeError("schema ids must be unique and never reuse a retired id")


def names_of_kind(kind: SchemaKind) -> tuple[str, ...]:
    """Every catalogued name of `kind`, in id order."""
    return tuple(sorted((i.name for i in CATALOG.values() if i.kind is kind), key=lambda n: CATALOG[n].schema_id))
