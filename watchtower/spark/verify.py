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
import json
from collections.abc import Callable
from typing import Any

from watchtower.protocol.stream.key_chain import verify_key_chain
from watchtower.protocol.stream.key_schedule import KeySchedule
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


def batch_summary(a: Any) -> str:
    """One Arrow batch of audit results (`audit.AUDIT_TYPE`) reduced to JSON: per signing key id
    (``""`` for a malformed record) the count of each status; the records with a sequence; the
    highest sequence; the lowest sequence that does not verify; the batch's distinct sequences as
    ascending runs ``[first, last]`` (one run for a gapless batch)."""
    statuses, sequences, key_ids = (a.field(name).to_pylist() for name in ("status", "sequence", "signing_key_id"))
    counts: dict[str, dict[str, int]] = {}
    first_bad = None
    for status, seq, key_id in zip(statuses, sequences, key_ids, strict=True):
        per_status = counts.setdefault("" if key_id is None else str(key_id), {})
        per_status[status] = per_status.get(status, 0) + 1
        if status != "verified" and seq is not None and (first_bad is None or seq < first_bad):
            first_bad = seq
    present = sorted({s for s in sequences if s is not None})
    runs: list[list[int]] = []
    for seq in present:
        if runs and runs[-1][1] == seq - 1:
            runs[-1][1] = seq
        else:
            runs.append([seq, seq])
    return json.dumps({"counts": counts, "with_sequence": sum(1 for s in sequences if s is not None),
                       "head": present[-1] if present else None, "first_bad": first_bad, "runs": runs})


def verify_stream(spark: Any, bootstrap: str, stream_id: str, schedule: KeySchedule, *, prefix: str | None = None,
                  report: Report = lambda _line: None) -> VerifyReport:
    """Verify every record of `stream_id` on ``messages`` against `schedule` (already chain-verified).

    One Spark job: each batch's audit is reduced where it is computed (`batch_summary`), and the
    driver merges the summaries: status counts add up, and the union of the batches' sequence runs
    gives the distinct sequences (hence duplicates and gaps)."""
    report(f"verifying stream {stream_id}: signatures, payload hashes and sequences")
    summaries = [json.loads(r["summary"]) for r in
                 audited(spark, bootstrap, stream_id, schedule, prefix=prefix, keep=(), reduce=batch_summary).collect()]
    result = merge_summaries(stream_id, summaries)
    report(f"stream {stream_id}: {result.verified}/{result.messages} verified, {result.bad_signatures} bad "
           f"signatures, {result.bad_hashes} bad hashes, {result.missing} missing up to {result.head}")
    return result


def merge_summaries(stream_id: str, summaries: list[dict[str, Any]]) -> VerifyReport:
    """The report of a stream from the `batch_summary` of each of its batches (in any order)."""
    per_status: dict[str, int] = {}
    per_key: dict[str, dict[str, int]] = {}
    for summary in summaries:
        for key_id, counts in summary["counts"].items():
            for status, count in counts.items():
                per_status[status] = per_status.get(status, 0) + count
            if key_id:
                entry = per_key.setdefault(key_id, {"messages": 0, "verified": 0, "bad": 0})
                entry["messages"] += sum(counts.values())
                entry["verified"] += counts.get("verified", 0)
                entry["bad"] = entry["messages"] - entry["verified"]
    # The union of the runs, in order: its length is the distinct count; the holes between the runs
    # (sequence 1 has the virtual neighbour 0) are the gaps.
    distinct, reached = 0, 0
    gaps: list[list[int]] = []
    for first, last in sorted(run for summary in summaries for run in summary["runs"]):
        if first > reached + 1 and len(gaps) < MAX_GAPS:
            gaps.append([reached + 1, first - 1])
        if last > reached:
            distinct += last - max(first, reached + 1) + 1
            reached = last
    head = reached
    first_bads = [s["first_bad"] for s in summaries if s["first_bad"] is not None]
    with_sequence = sum(s["with_sequence"] for s in summaries)
    bad = [s for s in (min(first_bads, default=None), gaps[0][0] if gaps else None) if s is not None]
    return VerifyReport(
        stream_id=stream_id, messages=sum(per_status.values()), verified=per_status.get("verified", 0),
        bad_signatures=per_status.get("bad_signature", 0), bad_hashes=per_status.get("bad_hash", 0),
        malformed=per_status.get("malformed", 0), duplicates=with_sequence - distinct, head=head,
        missing=head - distinct, gaps=gaps, first_bad_sequence=min(bad) if bad else None,
        per_key=dict(sorted(per_key.items(), key=lambda kv: int(kv[0]))))
