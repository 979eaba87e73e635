"""Fulfil one registered ICRC-77 replay as a Spark batch job (DESIGN §7.8, replay interfaces §2, §7).

    python -m watchtower.spark.replay_job --bootstrap B --stream-id S --replay-id N [--master M] [--jars J]

1. Read the ``replay`` partition of S (read_committed, with confluent-kafka: it is small) for the
   ``registered`` record of N. A replay that already has a terminal record is left alone (the
   replay worker may launch this job again after a restart: at-least-once, never twice finished).
   When nothing has claimed the replay yet, write ``ReplayProgress(engine="spark")`` so the
   service knows Spark owns it.
2. Read the ``messages`` partition of S with Spark's Kafka source, read_committed, up to the end at
   the start of the job; select exactly as `ReplaySelector` does: the stream, ``[first,
   end_exclusive)``, the skip rule, then the filter compiled to a Column (`filter_compile`).
3. A sequence of the plan missing from the archive: ``ReplayErrored`` naming it, no deliveries.
4. Otherwise write the deliveries through the Kafka sink: key = requester, value = the original
   record value byte for byte, ``headers`` = the original headers then `replay_headers`, the
   partition murmur2(requester) gives (the producer's default partitioner, set explicitly here),
   in ascending sequence order; then ``ReplayCompleted(engine="spark")`` with the counts.

The Spark sink is at-least-once: a job that dies after some deliveries and is run again writes them
again; readers deduplicate by (stream_id, sequence) as they do for the service replay after a crash.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from watchtower.protocol.errors import GenericReplayError, ReplayNotFoundError, WatchtowerError
from watchtower.protocol.replay.records import (
    ReplayCanceled,
    ReplayCompleted,
    ReplayErrored,
    ReplayProgress,
    ReplayRegistration,
)
from watchtower.protocol.replay.registration import check_registration_command
from watchtower.protocol.replay.rules import parse_replay_filter, parse_skip, replay_headers
from watchtower.protocol.replay.status import ReplayRuleError
from watchtower.schemas.replay_records import decode_replay_record, encode_replay_record
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import spark_kafka_options
from watchtower.topics.errors import TopicUnavailableError
from watchtower.topics.metadata import partition_count
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.reader import read_committed
from watchtower.topics.record_writer import RecordWriter

_LOG = logging.getLogger(__name__)
ENGINE = "spark"
HEADERS_TYPE = "array<struct<key: string, value: binary>>"
Report = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class ReplayJobResult:
    """What the job did: ``status`` is completed / errored / already-<terminal kind>."""

    replay_id: int
    stream_id: str
    status: str
    delivered: int = 0
    filtered: int = 0
    skipped: int = 0
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class _ReplayLog:
    registration: ReplayRegistration | None = None
    terminal: str | None = None
    engines: set[str] = dataclasses.field(default_factory=set)


def partitions_of(bootstrap: str, topic: str) -> int:
    """The partition count of `topic`."""
    try:
        return partition_count(bootstrap, topic)
    except TopicUnavailableError as exc:
        raise GenericReplayError(f"topic {topic} is not readable ({exc.reason}); run `watchtower init` first") from None


def _read_replay_log(bootstrap: str, topic: str, partition: int, stream_id: str, replay_id: int) -> _ReplayLog:
    log = _ReplayLog()
    for m in read_committed(bootstrap, [topic], partition=partition):
        try:
            record = decode_replay_record(m.value())
        except WatchtowerError as exc:  # the status fold quarantines it; the job only skips it
            _LOG.warning("skipping %s[%d]@%d: %s", topic, partition, m.offset(), exc.message)
            continue
        if record.replay_id != replay_id:
            continue
        if isinstance(record, ReplayRegistration) and log.registration is None and record.stream_id == stream_id:
            try:  # the same check as the replay worker's: only a registration its requester signed
                check_registration_command(record)
            except ReplayRuleError as exc:
                _LOG.warning("skipping %s[%d]@%d: %s", topic, partition, m.offset(), exc)
                continue
            log.registration = record
        elif isinstance(record, ReplayProgress):
            log.engines.add(record.engine)
        elif isinstance(record, ReplayCompleted | ReplayCanceled | ReplayErrored) and log.terminal is None:
            log.terminal = {ReplayCompleted: "completed", ReplayCanceled: "canceled",
                            ReplayErrored: "errored"}[type(record)]
    return log


def _write_replay_record(bootstrap: str, topic: str, partition: int, record: Any) -> None:
    writer = RecordWriter(bootstrap)
    writer.write(topic, encode_replay_record(record), key=record.stream_id.encode(), partition=partition)
    if writer.flush(60) != 0:
        raise GenericReplayError(f"could not write the replay record to {topic}[{partition}]; check the broker")


def _now_ms() -> int:
    return int(time.time() * 1000)


def run_replay(spark: Any, bootstrap: str, stream_id: str, replay_id: int, *, prefix: str | None = None,
               report: Report = lambda _line: None) -> ReplayJobResult:
    """Fulfil replay `replay_id` of `stream_id` (see the module docstring); the outcome."""
    from pyspark.sql import functions as sf

    from watchtower.spark.archive import decoded, kafka_source, message_columns
    from watchtower.spark.filter_compile import filter_column

    replay_topic, messages_topic = topic_name("replay", prefix), topic_name("messages", prefix)
    deliveries_topic = topic_name("deliveries", prefix)
    partition = partition_for_key(stream_id.encode(), partitions_of(bootstrap, messages_topic))
    log = _read_replay_log(bootstrap, replay_topic, partition, stream_id, replay_id)
    reg = log.registration
    if reg is None:
        raise ReplayNotFoundError(f"replay {replay_id} of stream {stream_id} is not registered on {replay_topic}; "
                                  f"check the id with `watchtower replay list`")
    if log.terminal is not None:
        report(f"replay {replay_id} is already {log.terminal}; nothing to do")
        return ReplayJobResult(replay_id, stream_id, f"already-{log.terminal}")
    if "service" in log.engines:
        raise GenericReplayError(f"replay {replay_id} is being fulfilled by the replay service; follow it with "
                                 f"`watchtower replay status {replay_id}`")
    if ENGINE not in log.engines:
        _write_replay_record(bootstrap, replay_topic, partition, ReplayProgress(
            v=1, replay_id=replay_id, stream_id=stream_id, engine=ENGINE, partition=partition, next_offset=0,
            next_sequence=reg.first, delivered=0, filtered=0, skipped=0, at_ms=_now_ms()))

    skip = parse_skip(reg.skip)
    node = None if reg.filter is None else parse_replay_filter(json.loads(reg.filter))
    m = message_columns()
    seq = m["sequence"]
    in_plan = decoded(kafka_source(spark, bootstrap, messages_topic, [partition])).where(
        (sf.col("m.stream_id") == sf.lit(stream_id)) & (seq >= sf.lit(reg.first)) & (seq < sf.lit(reg.end_exclusive)))
    kept = sf.lit(True) if skip is None else (seq % sf.lit(skip[0]) == sf.lit(skip[1]))
    passes = filter_column(node, m)
    selected = in_plan.withColumn("kept", kept).withColumn("passes", kept & passes)
    report(f"replay {replay_id}: reading {messages_topic}[{partition}] for sequences "
           f"[{reg.first}, {reg.end_exclusive}) (read_committed)")
    counts = selected.agg(sf.count_distinct(seq).alias("distinct"),
                          sf.sum(sf.when(~sf.col("kept"), 1).otherwise(0)).alias("skipped"),
                          sf.sum(sf.when(sf.col("kept") & ~sf.col("passes"), 1).otherwise(0)).alias("filtered"),
                          sf.sum(sf.when(sf.col("passes"), 1).otherwise(0)).alias("delivered")).first()
    expected = reg.end_exclusive - reg.first
    if (counts["distinct"] or 0) != expected:
        present = {r[0] for r in in_plan.select(seq).distinct().collect()}
        missing = next(s for s in range(reg.first, reg.end_exclusive) if s not in present)
        reason = (f"the archive of stream {stream_id} is missing sequence {missing} of the plan "
                  f"[{reg.first}, {reg.end_exclusive}) ({expected - len(present)} missing); nothing was delivered")
        _write_replay_record(bootstrap, replay_topic, partition, ReplayErrored(
            v=1, replay_id=replay_id, stream_id=stream_id, reason=reason, delivered=0, at_ms=_now_ms()))
        report(f"replay {replay_id}: errored: {reason}")
        return ReplayJobResult(replay_id, stream_id, "errored", reason=reason)
    delivered, filtered, skipped = (int(counts[name] or 0) for name in ("delivered", "filtered", "skipped"))
    report(f"replay {replay_id}: {expected} in plan: {delivered} to deliver, {filtered} filtered, {skipped} skipped")

    target = partition_for_key(reg.requester.encode(), partitions_of(bootstrap, deliveries_topic))
    extra = sf.array(*[sf.struct(sf.lit(k).alias("key"), sf.lit(bytearray(v)).alias("value"))
                       for k, v in replay_headers(replay_id, reg.end_id)])
    original = sf.coalesce(sf.col("headers"), sf.array().cast(HEADERS_TYPE))
    out = (selected.where(sf.col("passes"))
           .withColumn("seq", seq)
           .sortWithinPartitions("seq")  # one Kafka partition is one Spark partition: ascending order
           .select(sf.lit(bytearray(reg.requester.encode())).alias("key"), sf.col("value"),
                   sf.concat(original, extra).alias("headers"), sf.lit(target).alias("partition")))
    (out.write.format("kafka").options(**spark_kafka_options(bootstrap))
        .option("topic", deliveries_topic).option("kafka.acks", "all")
        .option("kafka.enable.idempotence", "true").save())
    report(f"replay {replay_id}: wrote {delivered} deliveries to {deliveries_topic}[{target}] for {reg.requester}")
    _write_replay_record(bootstrap, replay_topic, partition, ReplayCompleted(
        v=1, replay_id=replay_id, stream_id=stream_id, engine=ENGINE, delivered=delivered, filtered=filtered,
        skipped=skipped, at_ms=_now_ms()))
    report(f"replay {replay_id}: completed")
    return ReplayJobResult(replay_id, stream_id, "completed", delivered, filtered, skipped)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m watchtower.spark.replay_job", description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--stream-id", required=True)
    parser.add_argument("--replay-id", required=True, type=int)
    parser.add_argument("--master", default=None, help="Spark master (default: local, at most 2 cores)")
    parser.add_argument("--jars", default=None, help="the Kafka connector's jars, comma-separated paths of jars or "
                                                     "directories (default: $WATCHTOWER_SPARK_JARS)")
    args = parser.parse_args(argv)
    from watchtower.spark.session import default_master, local_session

    jars = None if args.jars is None else [part for part in args.jars.split(",") if part.strip()]
    spark = local_session("watchtower-replay", master=args.master or default_master(), jars=jars)
    try:
        result = run_replay(spark, args.bootstrap, args.stream_id, args.replay_id,
                            report=lambda line: print(line, file=sys.stderr, flush=True))
    except WatchtowerError as exc:  # a refusal a person can act on: one line, not a traceback
        print(f"error [{exc.code}]: {exc.message}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    print(json.dumps(result.as_json()))
    return 0 if result.status != "errored" else 1


if __name__ == "__main__":
    sys.exit(main())
