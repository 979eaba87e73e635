"""Quarantine reasons quote hostile bytes; what is kept of them stays small."""

from __future__ import annotations

from typing import Any

from watchtower.projections.quarantine import MAX_REASON, record, summary


def test_a_huge_reason_is_clipped_before_it_reaches_the_log_or_health() -> None:
    table: dict[str, Any] = {}
    assert record(table, "wt.events", 0, 7, "keyed " + "x" * 1_000_000)
    (entry,) = summary(table.items())["recent"]
    assert len(entry["reason"]) == MAX_REASON
    assert entry["reason"].startswith("keyed xxx")
    assert not record(table, "wt.events", 0, 7, "again")  # a redelivery is counted once
