"""Per-record verification of the ``messages`` archive in bulk: an Arrow (pandas) UDF over the raw
record values that calls the pure core, so the rules stay in one place.

Inside the UDF each value is decoded with `schemas.records.decode_message` and checked with
`protocol.signing`: the payload hash (SHA-256 of ``payload_inline``) and the signature under the
key the schedule puts in force at the message's sequence (`verify_with_schedule`, which also
refuses a message naming another key id than the one in force). Status per record:

- ``verified``;
- ``bad_hash``: the stored payload_hash is not SHA-256 of the payload (the payload was altered);
- ``bad_signature``: the hash holds but the signature does not verify under the key in force;
- ``malformed``: the value is not a StreamMessage this build reads.

The schedule must already be verified from the owner's address (`key_chain.verify_key_chain`) by
the caller: a key is trusted because the owner signed it, never because a server said so.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
from pyspark.sql import functions as sf

from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.key_schedule import KeySchedule
from watchtower.protocol.signing import verify_with_schedule
from watchtower.schemas.records import decode_message
from watchtower.spark.archive import decoded, kafka_source
from watchtower.topics.catalogue import topic_name
from watchtower.topics.partitioning import partition_for_key

STATUSES = ("verified", "bad_hash", "bad_signature", "malformed")
AUDIT_TYPE = "status string, sequence long, signing_key_id long, key_in_force long, tags_json string"


Checked = tuple[str, int | None, int | None, int | None, str | None]


def check_value(value: bytes, schedule: KeySchedule, *, with_tags: bool = False) -> Checked:
    """(status, sequence, signing_key_id, key id in force, tags as canonical JSON or None) of one value.

    The common case costs one decode and one `verify_with_schedule` (which checks the payload hash
    itself); only a failure pays for telling a bad hash from a bad signature."""
    try:
        msg = decode_message(bytes(value))
    except WatchtowerError:
        return "malformed", None, None, None, None
    tags = json.dumps(dict(msg.tags), sort_keys=True, ensure_ascii=False, separators=(",", ":")) if with_tags else None
    try:
        in_force: int | None = schedule.key_at_sequence(msg.sequence).signing_key_id
    except WatchtowerError:
        in_force = None
    if in_force is not None and verify_with_schedule(msg, schedule):
        return "verified", msg.sequence, msg.signing_key_id, in_force, tags
    status = "bad_hash" if hashlib.sha256(msg.payload_inline).digest() != msg.payload_hash else "bad_signature"
    return status, msg.sequence, msg.signing_key_id, in_force, tags


def audit_udf(schedule: KeySchedule, *, with_tags: bool = False) -> Any:
    """The pandas UDF: binary values -> struct<status, sequence, signing_key_id, key_in_force, tags_json>
    (tags_json only `with_tags`: the export needs it, verification does not)."""

    @sf.pandas_udf(AUDIT_TYPE)  # type: ignore[call-overload]
    def audit(values: pd.Series) -> pd.DataFrame:
        rows = [check_value(v, schedule, with_tags=with_tags) for v in values]
        frame = pd.DataFrame(rows, columns=["status", "sequence", "signing_key_id", "key_in_force", "tags_json"])
        for name in ("sequence", "signing_key_id", "key_in_force"):
            frame[name] = frame[name].astype("Int64")  # nullable: a malformed record has none
        return frame

    return audit


def audited(spark: Any, bootstrap: str, stream_id: str, schedule: KeySchedule, *, prefix: str | None = None,
            partitions: int | None = None, with_tags: bool = False) -> Any:
    """The stream's records of ``messages`` (its partition, read_committed, to the end at the start)
    with the decoded message ``m`` and the verification result ``a`` (see the module docstring)."""
    from watchtower.spark.replay_job import partitions_of

    topic = topic_name("messages", prefix)
    count = partitions if partitions is not None else partitions_of(bootstrap, topic)
    partition = partition_for_key(stream_id.encode(), count)
    # Verification needs no order: split the partition's offsets over every core.
    records = kafka_source(spark, bootstrap, topic, [partition],
                           min_partitions=spark.sparkContext.defaultParallelism)
    # Select the stream by its key, so a record whose value does not decode still counts as malformed.
    ours = decoded(records.where(sf.col("key") == sf.lit(bytearray(stream_id.encode()))), keep_all=True)
    return ours.withColumn("a", audit_udf(schedule, with_tags=with_tags)(sf.col("value")))
