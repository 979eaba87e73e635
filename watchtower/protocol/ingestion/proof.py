"""Who runs a task and which result wins: deterministic runner selection and the NONE, QUORUM and
MEDIAN proof rules (CIP-2 proof types as CIP-7 ingestion uses them).

Selection is rendezvous hashing: each registered runner scores SHA-256(task_id ‖ runner public
key), and the `num_runners` lowest scores run the task. Anyone holding the task id and the
registered list recomputes it; the order the list is read in does not matter; a runner joining
or leaving moves only the tasks it wins or held.

The proof rules take the outcomes of the selected runners, in arrival order, one per runner (the
first from each counts), each either a valid result (canonical JSON bytes that satisfied
``result_schema``) or the failure reason the runner (or the checks) gave:

- NONE: the first valid result decides;
- QUORUM: a result returned byte-identically by a strict majority of the *selected* runners
  (``num_runners // 2 + 1``) decides; it is decided as soon as one reaches the majority (no later
  result can change it) and failed as soon as no result can reach it any more;
- MEDIAN: once every selected runner answered, or at the deadline, a strict majority of valid
  results is needed: numeric fields take the lower median (always a value some runner returned,
  never an average), every other field the value a strict majority returned byte-identically.

The issue (#24) writes the quorum as ⌈N/2⌉+1; that exceeds N for N ≤ 2 and equals N for N = 3, so
one lying runner out of three would fail every tick. A strict majority (⌊N/2⌋+1) is the bound
under which a minority of liars can neither publish nor block: docs/ingestion.md explains.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from watchtower.protocol.ingestion import IngestReason, ProofType
from watchtower.protocol.ingestion.results import canonical_json, parse_result
from watchtower.protocol.validation import is_number

_REASON_ORDER = tuple(IngestReason)


def selection_score(task_id: bytes, runner_key: bytes) -> bytes:
    """The rendezvous score of one runner for one task (lower runs first)."""
    return hashlib.sha256(task_id + runner_key).digest()


def select_runners(task_id: bytes, runner_keys: Iterable[bytes], num_runners: int) -> tuple[bytes, ...]:
    """The public keys of the runners selected for `task_id`: the `num_runners` lowest scores
    among the distinct `runner_keys` (fewer when fewer are registered), lowest first."""
    distinct = set(runner_keys)
    return tuple(sorted(distinct, key=lambda k: (selection_score(task_id, k), k))[:num_runners])


def majority(num_runners: int) -> int:
    """A strict majority of `num_runners`."""
    return num_runners // 2 + 1


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """One selected runner's answer: `result` (canonical JSON bytes, valid) or the failure `error`."""

    runner: str
    result: bytes | None = None
    error: IngestReason | None = None
    detail: str = ""
    """What the runner said went wrong (an error's), carried into the IngestFailed detail."""

    def __post_init__(self) -> None:
        if (self.result is None) == (self.error is None):
            raise ValueError("an outcome is a result or an error, exactly one")


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """`pending` (wait for more), or `result` decided, or `reason` failed (with `detail`)."""

    result: bytes | None = None
    reason: IngestReason | None = None
    detail: str = ""

    @property
    def pending(self) -> bool:
        return self.result is None and self.reason is None


PENDING = Verdict()


def first_per_runner(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """`outcomes` keeping only the first of each runner, in order."""
    seen: set[str] = set()
    out = []
    for o in outcomes:
        if o.runner not in seen:
            seen.add(o.runner)
            out.append(o)
    return out


def decide_proof(proof: ProofType, num_runners: int, outcomes: Sequence[Outcome], *, expired: bool) -> Verdict:
    """The verdict on `outcomes` (see the module docstring); `expired`: the task's deadline passed."""
    answers = first_per_runner(outcomes)
    valid = [o.result for o in answers if o.result is not None]
    need = 1 if proof is ProofType.NONE else majority(num_runners)
    missing = max(0, num_runners - len(answers))
    if proof is ProofType.NONE:
        if valid:
            return Verdict(valid[0])
    elif proof is ProofType.QUORUM:
        counts = Counter(valid)
        if counts:
            value, count = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
            if count >= need:
                return Verdict(value)
            if count + missing >= need and not expired:
                return PENDING
        elif missing >= need and not expired:
            return PENDING
        return _failure(answers, len(valid), need, disagreed=len(valid) >= need)
    else:
        if missing and not expired:
            return PENDING
        if len(valid) >= need:
            return median_of(valid, need)
    if missing and not expired:
        return PENDING
    return _failure(answers, len(valid), need, disagreed=False)


def _failure(answers: Sequence[Outcome], n_valid: int, need: int, *, disagreed: bool) -> Verdict:
    if not answers:
        return Verdict(reason=IngestReason.TIMEOUT, detail="no runner answered before the deadline")
    if disagreed:
        return Verdict(reason=IngestReason.QUORUM_NOT_REACHED,
                       detail=f"{n_valid} valid results, no {need} of them identical")
    errors = Counter(o.error for o in answers if o.error is not None)
    if errors:
        reason = max(errors, key=lambda r: (errors[r], -_REASON_ORDER.index(r)))
        said = next((o.detail for o in answers if o.error is reason and o.detail), "")
        return Verdict(reason=reason, detail=f"{errors[reason]} of {len(answers)} runners: {reason}"
                                             f"{f' ({said})' if said else ''}; {n_valid} valid results, {need} needed")
    return Verdict(reason=IngestReason.TOO_FEW_RESULTS, detail=f"{n_valid} valid results, {need} needed")


def median_of(results: Sequence[bytes], need: int) -> Verdict:
    """The MEDIAN verdict over valid `results` (canonical JSON bytes), needing `need` of them."""
    values = [parse_result(r) for r in results]
    if all(is_number(v) for v in values):
        return Verdict(canonical_json(lower_median(values)))
    if not all(isinstance(v, Mapping) for v in values):
        return _mixed(values, need)
    shapes = Counter(tuple(sorted(v)) for v in values)
    shape, count = max(shapes.items(), key=lambda kv: (kv[1], kv[0]))
    if count < need:
        return Verdict(reason=IngestReason.QUORUM_NOT_REACHED,
                       detail=f"no {need} results have the same fields")
    same = [v for v in values if tuple(sorted(v)) == shape]
    out: dict[str, Any] = {}
    for key in shape:
        column = [v[key] for v in same]
        if all(is_number(x) for x in column):
            out[key] = lower_median(column)
            continue
        votes = Counter(canonical_json(x) for x in column)
        agreed, n = max(votes.items(), key=lambda kv: (kv[1], kv[0]))
        if n < need:
            return Verdict(reason=IngestReason.QUORUM_NOT_REACHED,
                           detail=f"field {key!r} is not numeric and no {need} results agree on it")
        out[key] = parse_result(agreed)
    return Verdict(canonical_json(out))


def _mixed(values: Sequence[Any], need: int) -> Verdict:
    votes = Counter(canonical_json(v) for v in values)
    agreed, n = max(votes.items(), key=lambda kv: (kv[1], kv[0]))
    if n >= need:
        return Verdict(agreed)
    return Verdict(reason=IngestReason.QUORUM_NOT_REACHED, detail="the results are neither numbers nor objects "
                                                                  f"and no {need} of them agree")


def lower_median(values: Sequence[Any]) -> Any:
    """The lower median of numbers (the ⌈n/2⌉-th smallest): a value from `values`, never a mean."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]
