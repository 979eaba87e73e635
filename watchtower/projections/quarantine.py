"""Quarantined records: what the projection refused to fold, per topic partition.

A record that breaks a rule (undecodable, for another stream than its key, a sequence that does
not follow the head, a signature that does not verify, an event that contradicts the views) is
never folded and never fatal. It is logged with topic, partition, offset and reason, and counted
here, in a mapping keyed ``"<topic>/<partition>"``. The live worker keeps it in memory, so its
counts cover what this worker process decided since it started; the offline rebuild counts the
whole log with the same code.

Each entry keeps the count, the `RECENT` records of the highest offsets (offset and reason) and the
`REMEMBERED` highest offsets: Faust redelivers a tail after a rebalance, and a redelivered record that was
already quarantined must not be counted twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, Final

log = logging.getLogger("watchtower.projections.quarantine")

RECENT: Final = 5
REMEMBERED: Final = 256
MAX_REASON: Final = 300  # characters of a reason kept: a reason may quote hostile bytes


def quarantine_key(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def record(table: MutableMapping[str, Any], topic: str, partition: int, offset: int, reason: str) -> bool:
    """Count one refused record; False (and no change) when it was already counted (a redelivery)."""
    key = quarantine_key(topic, partition)
    entry = table.get(key) or {"topic": topic, "partition": partition, "count": 0, "recent": [], "offsets": []}
    if offset in entry["offsets"]:
        return False
    # A reason may quote hostile bytes (a megabyte key, say): keep logs and /v1/health small.
    reason = reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 1] + "…"
    log.warning("quarantined %s[%s]@%s: %s", topic, partition, offset, reason)
    # The highest offsets, not the latest decided: a waited stream's records may be decided before
    # records that precede them in the log (`fold.publishes_first`), and the entry must end as the
    # in-order fold (the offline rebuild) leaves it.
    table[key] = {
        **entry,
        "count": int(entry["count"]) + 1,
        "recent": sorted([*entry["recent"], {"offset": offset, "reason": reason}],
                         key=lambda r: int(r["offset"]))[-RECENT:],
        "offsets": sorted([*entry["offsets"], offset])[-REMEMBERED:],
    }
    return True


def summary(entries: Iterable[tuple[str, Any]], partitions: Iterable[int] | None = None) -> dict[str, Any]:
    """``{"count", "recent": [{"topic", "partition", "offset", "reason"}]}`` over `entries`.

    Only `partitions` (all when None) count, so a worker reports its own share. `recent` holds the
    last few per partition, ordered by topic, partition and offset (deterministic, comparable).
    """
    wanted = None if partitions is None else set(partitions)
    count, recent = 0, []
    for _key, entry in entries:
        if not isinstance(entry, Mapping) or (wanted is not None and int(entry["partition"]) not in wanted):
            continue
        count += int(entry["count"])
        recent += [{"topic": entry["topic"], "partition": int(entry["partition"]), **r} for r in entry["recent"]]
    recent.sort(key=lambda r: (r["topic"], r["partition"], r["offset"]))
    return {"count": count, "recent": recent}
