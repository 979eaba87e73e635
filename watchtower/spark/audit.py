"""Per-record verification of the ``messages`` archive in bulk: one Arrow batch at a time, over the
columns Spark's ``from_avro`` already decoded, calling the pure core so the rules stay in one place.

Spark decodes each record (`archive.decoded`) in the JVM; `mapInArrow` hands the decoded ``m``
struct to Python a batch (`spark.sql.execution.arrow.maxRecordsPerBatch` rows) at a time. Per batch,
`audit_batch` turns the columns into Python values column by column, resolves the key in force for
every row at once (a binary search of the batch's sequences over the schedule's effective
sequences), then per record builds the `StreamMessage` from its fields (the constructor is the
CIP-7 structural rule) and checks it with `protocol.signing.verify_message` against the key in
force: the payload hash (SHA-256 of ``payload_inline``), then the signature over
`message_signing_bytes`, the one function the per-message path signs and verifies with. Status per
record:

- ``verified``;
- ``bad_hash``: the stored payload_hash is not SHA-256 of the payload (the payload was altered);
- ``bad_signature``: the hash holds but the signature does not verify under the key in force (or
  the message names another key id than the one in force);
- ``malformed``: the value is not a StreamMessage this build reads.

`check_value` is the same decision for one raw value (a full `decode_message`). The batch path
leaves to it every record Spark's decoding does not account for byte for byte (not framed as a
message, a body ``from_avro`` could not read, or one longer than the record it decoded, e.g. bytes
after it): only those few are Avro-decoded in Python, so each record gets exactly the per-record
decoder's result.

The schedule must already be verified from the owner's address (`key_chain.verify_key_chain`) by
the caller: a key is trusted because the owner signed it, never because a server said so.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql import functions as sf
from pyspark.sql.avro.functions import to_avro

from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.signing import verify_message, verify_with_schedule
from watchtower.protocol.stream.key_schedule import KeySchedule, KeyScheduleEntry
from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas.records import decode_message
from watchtower.spark.archive import FRAME_BYTES, decoded, kafka_source, message_schema
from watchtower.topics.catalogue import topic_name
from watchtower.topics.partitioning import partition_for_key

STATUSES = ("verified", "bad_hash", "bad_signature", "malformed")
AUDIT_TYPE = "status string, sequence long, signing_key_id long, key_in_force long, tags_json string"
#: The message fields, in the order of the StreamMessage schema (and of Spark's ``m`` struct).
MESSAGE_FIELDS = ("version", "stream_id", "sequence", "timestamp_unix_ms", "kind", "content_type", "tags",
                  "payload_format", "payload_inline", "payload_hash", "key_epoch", "signing_key_id", "publisher_sig")


Checked = tuple[str, int | None, int | None, int | None, str | None]


def _tags_json(msg: StreamMessage) -> str:
    return json.dumps(dict(msg.tags), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def check_value(value: bytes, schedule: KeySchedule, *, with_tags: bool = False) -> Checked:
    """(status, sequence, signing_key_id, key id in force, tags as canonical JSON or None) of one raw
    value, by a full `decode_message`: the per-record reference of `audit_batch`."""
    try:
        msg = decode_message(bytes(value))
    except WatchtowerError:
        return "malformed", None, None, None, None
    tags = _tags_json(msg) if with_tags else None
    try:
        in_force: int | None = schedule.key_at_sequence(msg.sequence).signing_key_id
    except WatchtowerError:
        in_force = None
    if in_force is not None and verify_with_schedule(msg, schedule):
        return "verified", msg.sequence, msg.signing_key_id, in_force, tags
    status = "bad_hash" if hashlib.sha256(msg.payload_inline).digest() != msg.payload_hash else "bad_signature"
    return status, msg.sequence, msg.signing_key_id, in_force, tags


class _Unreadable:
    """A value Arrow could not turn into Python (e.g. a string that is not UTF-8): no rule accepts it."""


UNREADABLE = _Unreadable()


def _pylist(array: Any) -> list[Any]:
    """`array` as Python values; an element that does not convert becomes `UNREADABLE` (so its record
    is malformed, as the Python decoder would find it) instead of failing the batch."""
    try:
        return list(array.to_pylist())
    except (UnicodeDecodeError, ValueError, ArithmeticError):
        out: list[Any] = []
        for i in range(len(array)):
            try:
                out.append(array[i].as_py())
            except (UnicodeDecodeError, ValueError, ArithmeticError):
                out.append(UNREADABLE)
        return out


def _tag_maps(tags: Any) -> list[dict[Any, Any]]:
    """Per row, the tag map of Spark's ``map<string, struct<member0: string, member1: boolean,
    member2: double>>`` (the Avro union text | bool | double): the one member that is set."""
    offsets = tags.offsets.to_pylist()
    keys = _pylist(tags.keys)
    text, flag, number = (_pylist(child) for child in tags.items.flatten())
    values = [t if t is not None else (f if f is not None else x) for t, f, x in zip(text, flag, number, strict=True)]
    return [dict(zip(keys[a:b], values[a:b], strict=True)) if b > a else {}
            for a, b in itertools.pairwise(offsets)]


def audit_batch(m: Any, raw: Any, schedule: KeySchedule, *, with_tags: bool = False) -> Any:
    """The audit of one Arrow batch: `m` the decoded-message struct column, `raw` a binary column that
    is null where `m` is the whole record and holds the record's value where it is not (not framed
    as a message, a body Spark could not decode, or bytes after the record): those few records are
    decided by `check_value` itself. Returns the ``AUDIT_TYPE`` struct column (see the module
    docstring): the same per-record result as `check_value`."""
    import numpy as np
    import pyarrow as pa  # type: ignore[import-untyped]

    fields = m.flatten()  # the struct's own nulls pushed into every field
    columns = {name: (_tag_maps(array) if name == "tags" else _pylist(array))
               for name, array in zip(MESSAGE_FIELDS, fields, strict=True)}
    values = raw.to_pylist()
    # The key in force for every row of the batch at once; a row without a valid sequence gets -1.
    entries = schedule.entries
    effective = np.array([e.effective_sequence for e in entries], dtype=np.int64)
    seqs = fields[MESSAGE_FIELDS.index("sequence")].fill_null(0).to_numpy(zero_copy_only=False)
    at = np.where(seqs >= effective[0], np.searchsorted(effective, seqs, side="right") - 1, -1).tolist()

    out: tuple[list[Any], ...] = ([], [], [], [], [])  # status, sequence, signing_key_id, key_in_force, tags_json
    rows = zip(*(columns[name] for name in MESSAGE_FIELDS), strict=True)
    for i, (version, stream_id, seq, ts, kind, content_type, tags, fmt, payload, payload_hash, key_epoch,
            signing_key_id, sig) in enumerate(rows):
        if values[i] is not None:
            result = check_value(values[i], schedule, with_tags=with_tags)
        else:
            try:
                msg = StreamMessage(version=version, stream_id=stream_id, sequence=seq, timestamp_unix_ms=ts,
                                    kind=kind, content_type=content_type, tags=tags, payload_format=fmt,
                                    payload_inline=payload, payload_hash=payload_hash, key_epoch=key_epoch,
                                    signing_key_id=signing_key_id, publisher_sig=sig)
            except WatchtowerError:
                result = ("malformed", None, None, None, None)
            else:
                result = _check(msg, entries[at[i]] if at[i] >= 0 else None, with_tags)
        for column, value in zip(out, result, strict=True):
            column.append(value)
    return pa.StructArray.from_arrays(
        [pa.array(out[0], pa.string()), *(pa.array(column, pa.int64()) for column in out[1:4]),
         pa.array(out[4], pa.string())],
        names=["status", "sequence", "signing_key_id", "key_in_force", "tags_json"])


def _check(msg: StreamMessage, entry: KeyScheduleEntry | None, with_tags: bool) -> Checked:
    """`check_value`'s decision for a message already built, `entry` the key in force at its sequence."""
    if entry is not None and entry.signing_key_id == msg.signing_key_id and verify_message(msg, entry.public_key):
        status = "verified"
    elif hashlib.sha256(msg.payload_inline).digest() != msg.payload_hash:
        status = "bad_hash"
    else:
        status = "bad_signature"
    return (status, msg.sequence, msg.signing_key_id, None if entry is None else entry.signing_key_id,
            _tags_json(msg) if with_tags else None)


def audit_frame(df: Any, schedule: KeySchedule, *, with_tags: bool = False,
                keep: tuple[str, ...] = ("m", "partition", "offset"),
                reduce: Callable[[Any], str] | None = None) -> Any:
    """`df` (with a binary ``value``: a Kafka DataFrame, or any) audited: the columns `keep` (``m`` is
    the decoded message, see `archive.decoded`) and ``a``, the ``AUDIT_TYPE`` struct of each record.

    `with_tags` adds ``a.tags_json`` (the export needs it; verification does not). With `reduce`, each
    batch's ``a`` column is reduced in the same Python pass to one row, column ``summary`` (the text
    `reduce` returns): verification keeps counts, not rows."""
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string

    m = sf.col("m")
    # from_avro ignores bytes after the record; the Python decoder refuses them. A record is whole
    # when the body is exactly as long as the record re-encoded (Avro's encoding is deterministic).
    # Any record that is not whole goes to Python as its raw value, for the per-record decoder.
    whole = sf.coalesce(sf.when(m.getField("version").isNotNull(),
                                sf.length(to_avro(m, message_schema())) == sf.length("value") - FRAME_BYTES),
                        sf.lit(False))
    source = decoded(df, keep_all=True)
    inputs = source.select(*keep, *([] if "m" in keep else ["m"]), sf.when(~whole, sf.col("value")).alias("_raw"))
    out_schema = StructType([*(source.schema[name] for name in keep),
                             StructField("a", _parse_datatype_string(AUDIT_TYPE))])
    if reduce is not None:
        keep, out_schema = (), StructType([StructField("summary", _parse_datatype_string("string"))])
    entries = tuple(schedule.entries)

    def audit(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        ours = KeySchedule(entries)
        for batch in batches:
            a = audit_batch(batch.column("m"), batch.column("_raw"), ours, with_tags=with_tags)
            if reduce is not None:
                yield pa.RecordBatch.from_arrays([pa.array([reduce(a)], pa.string())], names=["summary"])
                continue
            yield pa.RecordBatch.from_arrays([*(batch.column(name) for name in keep), a], names=[*keep, "a"])

    return inputs.mapInArrow(audit, out_schema)


def audited(spark: Any, bootstrap: str, stream_id: str, schedule: KeySchedule, *, prefix: str | None = None,
            partitions: int | None = None, with_tags: bool = False,
            keep: tuple[str, ...] = ("m", "partition", "offset"), reduce: Callable[[Any], str] | None = None) -> Any:
    """The stream's records of ``messages`` (its partition, read_committed, to the end at the start)
    audited by `audit_frame` (columns `keep` and ``a``, or `reduce`'s ``summary``; see the module
    docstring)."""
    from watchtower.spark.replay_job import partitions_of

    topic = topic_name("messages", prefix)
    count = partitions if partitions is not None else partitions_of(bootstrap, topic)
    partition = partition_for_key(stream_id.encode(), count)
    # Verification needs no order: split the partition's offsets over every core.
    records = kafka_source(spark, bootstrap, topic, [partition], min_partitions=spark.sparkContext.defaultParallelism,
                           headers=False)
    # Select the stream by its key, so a record whose value does not decode still counts as malformed.
    ours = records.where(sf.col("key") == sf.lit(bytearray(stream_id.encode())))
    return audit_frame(ours, schedule, with_tags=with_tags, keep=keep, reduce=reduce)
