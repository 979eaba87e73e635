"""`watchtower spark verify`: check a stream's whole archive in bulk (signatures, hashes, gaplessness).

The key schedule is fetched from ``GET /v1/streams/{id}/keys`` and its chain verified from the
owner's address exactly as the SDK does (`ApiClient.key_schedule` + `key_chain.verify_key_chain`);
every record is checked by `audit` (Spark decodes the records; one Arrow batch at a time, the pure
core checks them). Gaps are read
from the sequences themselves: the archive must hold 1..head, each once.

The report (`VerifyReport.as_json`): ``messages`` (records of the stream), ``verified``,
``bad_signatures``, ``bad_hashes``, ``malformed``, ``duplicates``, ``head`` (highest sequence),
``missing`` (how many of 1..head are absent), ``gaps`` (the first ranges ``[from, to]`` missing, at
most `MAX_GAPS`), ``first_bad_sequence`` (the lowest sequence that is missing or does not verify),
``per_key`` (per signing key id: messages, verified, bad) and ``ok``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pyspark.sql import Window
from pyspark.sql import functions as sf

from watchtower.protocol.key_chain import verify_key_chain
from watchtower.protocol.key_schedule import KeySchedule
from watchtower.spark.audit import audited

MAX_GAPS = 100
Report = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """The result of one verification run (see the module docstring)."""

    stream_id: str
    messages: int
    verified: int
    bad_signatures: int
    bad_hashes: int
    malformed: int
    duplicates: int
    head: int
    missing: int
    gaps: list[list[int]]
    first_bad_sequence: int | None
    per_key: dict[str, dict[str, int]]

    @property
    def ok(self) -> bool:
        return self.messages == self.verified and self.missing == 0 and self.duplicates == 0

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


def verified_schedule(api: Any, stream_id: str, owner: str | None = None) -> KeySchedule:
    """The stream's key schedule, trusted only once its chain verifies from the owner's address."""
    return verify_key_chain(stream_id, api.key_schedule(stream_id), owner)


def verify_stream(spark: Any, bootstrap: str, stream_id: str, schedule: KeySchedule, *, prefix: str | None = None,
                  report: Report = lambda _line: None) -> VerifyReport:
    """Verify every record of `stream_id` on ``messages`` against `schedule` (already chain-verified)."""
    df = audited(spark, bootstrap, stream_id, schedule, prefix=prefix, keep=()).select("a.*").cache()
    try:
        report(f"verifying stream {stream_id}: signatures, payload hashes and sequences")
        status = sf.col("status")
        # One job for the totals and the per-key counts: the rollup's grand total row is the totals.
        rows = df.rollup("signing_key_id").agg(
            sf.grouping("signing_key_id").alias("total"),
            sf.count(sf.lit(1)).alias("messages"),
            *[sf.sum(sf.when(status == name, 1).otherwise(0)).alias(name)
              for name in ("verified", "bad_signature", "bad_hash", "malformed")],
            sf.max("sequence").alias("head"), sf.count_distinct("sequence").alias("distinct"),
            sf.count("sequence").alias("with_sequence"),
            sf.min(sf.when(status != "verified", sf.col("sequence"))).alias("first_bad")).collect()
        empty = {"messages": 0, "with_sequence": 0}  # no records: a rollup has no grand total row
        totals = next((r.asDict() for r in rows if r["total"] == 1), empty)
        per_key = {str(r["signing_key_id"]): {"messages": int(r["messages"]), "verified": int(r["verified"]),
                                              "bad": int(r["messages"]) - int(r["verified"])}
                   for r in rows if r["total"] == 0 and r["signing_key_id"] is not None}
        head = int(totals.get("head") or 0)
        distinct = int(totals.get("distinct") or 0)
        # Each gap is [previous + 1, sequence - 1] between neighbours in sequence order; sequence 1
        # has the virtual neighbour 0. The window is over the distinct sequences only (8 bytes a
        # message), gathered in one partition.
        seqs = df.where(sf.col("sequence").isNotNull()).select("sequence").distinct()
        prev = sf.coalesce(sf.lag("sequence").over(Window.orderBy("sequence")), sf.lit(0))
        gap_rows = (seqs.withColumn("prev", prev).where(sf.col("sequence") - sf.col("prev") > 1)
                    .orderBy("sequence").limit(MAX_GAPS).collect())
        gaps = [[int(r["prev"]) + 1, int(r["sequence"]) - 1] for r in gap_rows]
    finally:
        df.unpersist()
    bad = [s for s in (totals.get("first_bad"), gaps[0][0] if gaps else None) if s is not None]
    result = VerifyReport(
        stream_id=stream_id, messages=int(totals["messages"]), verified=int(totals.get("verified") or 0),
        bad_signatures=int(totals.get("bad_signature") or 0), bad_hashes=int(totals.get("bad_hash") or 0),
        malformed=int(totals.get("malformed") or 0), duplicates=int(totals["with_sequence"]) - distinct, head=head,
        missing=head - distinct, gaps=gaps, first_bad_sequence=min(bad) if bad else None,
        per_key=dict(sorted(per_key.items(), key=lambda kv: int(kv[0]))))
    report(f"stream {stream_id}: {result.verified}/{result.messages} verified, {result.bad_signatures} bad "
           f"signatures, {result.bad_hashes} bad hashes, {result.missing} missing up to {head}")
    return result
