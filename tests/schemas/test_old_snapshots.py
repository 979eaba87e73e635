"""Snapshots written before the ingestion counters existed still load, with nothing failed yet.

`golden/snapshots_before_ingestion.json` holds the snapshot values today's golden file pinned
before the stream state gained ``ingest_fail_count`` / ``last_failed_tick`` and the worker began
hosting the runner registry: a worker upgraded over such a snapshot must load it, not fold the
whole log or quarantine it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from watchtower.protocol.stream.snapshots import decode_snapshot
from watchtower.protocol.stream.state import StreamState
from watchtower.workers.aggregates import default_aggregates

OLD = json.loads((Path(__file__).parent / "golden" / "snapshots_before_ingestion.json").read_text())["records"]


@pytest.mark.parametrize("name", sorted(OLD))
def test_a_snapshot_from_before_ingestion_loads_through_every_hosted_aggregate(name: str) -> None:
    _partition, _offset, parts = decode_snapshot(bytes.fromhex(OLD[name]))
    hosted = {a.name: a for a in default_aggregates()}
    assert "runners" not in parts  # written before the runner registry existed
    assert set(parts) <= set(hosted)
    for part_name, data in parts.items():
        states = hosted[part_name].decode_snapshot(data)
        for state in states.values():
            if isinstance(state, StreamState):
                assert (state.ingest_fail_count, state.last_failed_tick) == (0, 0)


def test_the_old_all_aggregates_snapshot_holds_streams() -> None:
    _p, _o, parts = decode_snapshot(bytes.fromhex(OLD["snapshots/p0-all-aggregates"]))
    streams = default_aggregates()[0].decode_snapshot(parts["stream"])
    assert streams, "the fixture lost its streams"
