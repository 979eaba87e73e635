"""The metric definitions' own rules, without a broker: bounded labels, batch-level counting, lag arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from watchtower.metrics import common, exposition, lag, side_workers
from watchtower.metrics import worker as worker_metrics
from watchtower.metrics.projection import FoldLagBoard, PartitionLag
from watchtower.protocol.errors import MalformedRecordError, StaleSequenceError
from watchtower.protocol.signed_command import Method
from watchtower.schemas.wire import encode_reply
from watchtower.topics.group_lag import GroupLag


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_quarantine_reasons_become_a_bounded_set_of_classes() -> None:
    assert common.reason_class("STALE_SEQUENCE: sequence 3 after head 5") == "STALE_SEQUENCE"
    assert common.reason_class("snapshot refused, folding the whole partition instead: x") == "SNAPSHOT_REFUSED"
    assert common.reason_class("unexpected KeyError: 'body'") == "UNEXPECTED"
    assert common.reason_class("not a StreamMessage: bad bytes at 0x00ff") == "OTHER"
    assert common.topic_role("t1234.events") == "events"
    assert common.topic_role("events") == "events"


def test_more_distinct_codes_than_the_bound_fold_into_other() -> None:
    seen = {common.reason_class(f"CODE_{i:03d}: x") for i in range(common.MAX_REASONS * 2)}
    assert "OTHER" in seen
    assert len(seen) <= common.MAX_REASONS + 1


def test_a_refusal_is_labelled_with_its_spec_code_and_a_command_with_its_method() -> None:
    assert worker_metrics.refusal_code(encode_reply(False, error=StaleSequenceError("x"))) == "STALE_SEQUENCE"
    assert worker_metrics.refusal_code(encode_reply(False, error=MalformedRecordError("x"))) == "MALFORMED_RECORD"
    assert worker_metrics.refusal_code(b"not json") == "WATCHTOWER_ERROR"

    class Forward:
        pass

    class Command:
        method = Method.PUBLISH

    assert worker_metrics.method_label(Command()) == "publish"
    assert worker_metrics.method_label(Forward()) == "Forward"


def test_commands_count_when_their_batch_commits_never_when_it_aborts() -> None:
    batches = worker_metrics.BatchMetrics()
    ok = ("watchtower_worker_commands_total", {"method": "unit_method", "outcome": "ok"})
    refused = ("watchtower_worker_commands_total", {"method": "unit_method", "outcome": "UNIT_CODE"})
    aborted_before = sample("watchtower_worker_aborted_batches_total")
    batches.begin()
    batches.decided("unit_method", "ok")
    batches.decided("unit_method", "UNIT_CODE")
    batches.aborted()
    assert sample(ok[0], **ok[1]) == 0
    assert sample("watchtower_worker_aborted_batches_total") == aborted_before + 1
    batches.begin()  # the same commands, decided again after the abort
    for _ in range(3):
        batches.decided("unit_method", "ok")
    batches.decided("unit_method", "UNIT_CODE")
    batches.committed(4, 0.0)
    assert sample(ok[0], **ok[1]) == 3
    assert sample(refused[0], **refused[1]) == 1


def test_fold_lag_seconds_is_zero_when_caught_up_else_the_newest_folded_records_age() -> None:
    board = FoldLagBoard()
    board.assigned([0, 1])
    board.measured({("wt.events", 0): PartitionLag(0, 1_000_000), ("wt.messages", 0): PartitionLag(0, None),
                    ("wt.events", 1): PartitionLag(7, 1_000_000), ("wt.messages", 1): PartitionLag(0, 1_004_000)},
                   serving={0})
    assert board.lag_seconds(now_s=1_010.0) == {0: 0.0, 1: 6.0}
    families = {f.name: f for f in board.collect()}
    records = {tuple(s.labels.values()): s.value for s in families["watchtower_projection_fold_lag_records"].samples}
    assert records == {("events", "0"): 0, ("messages", "0"): 0, ("events", "1"): 7, ("messages", "1"): 0}
    assert families["watchtower_projection_serving_partitions"].samples[0].value == 1
    assert families["watchtower_projection_catching_up_partitions"].samples[0].value == 1
    board.assigned([2])  # a new assignment forgets the old partitions
    assert set(board.lag_seconds()) == {2}


def test_the_metrics_port_setting() -> None:
    assert exposition.metrics_port({}) == 0
    assert exposition.metrics_port({exposition.ENV_PORT: "9464"}) == 9464
    assert exposition.metrics_port({exposition.ENV_PORT: "off"}) is None
    with pytest.raises(ValueError, match="not a port"):
        exposition.metrics_port({exposition.ENV_PORT: "http"})
    with pytest.raises(ValueError, match=r"0\.\.65535"):
        exposition.metrics_port({exposition.ENV_PORT: "70000"})


def test_group_lag_counts_what_a_reader_gets_where_it_was_read_and_the_raw_offsets_elsewhere() -> None:
    seen = GroupLag("g", {("t.events", 0): (10, 11), ("t.events", 1): (None, 4), ("t.events", 2): (3, 900)},
                    counted={("t.events", 0): 0, ("t.events", 1): 4})
    assert seen.lag_of("t.events", 0) == 0  # one commit marker: nothing to read
    assert seen.lag_of("t.events", 2) == 897
    assert seen.total == 901
    assert seen.exact is False
    body = seen.as_json()
    assert body["lag"] == 901
    assert lag.over({"groups": [body]}, 900, None) == ["group g lags 901 records (> 900)"]
    assert lag.over({"groups": [body]}, 901, None) == []
    report = {"groups": [], "projections": {"p": {"records": 2, "seconds": 3.5}, "q": {"error": "down"}}}
    assert lag.over(report, 1, None) == ["p lags 2 records (> 1)"]
    assert lag.over(report, None, 3.0) == ["p lags 3.5 s (> 3 s)"]
    assert lag.over(report, None, None) == []


def test_a_metrics_address_file_is_read_back(tmp_path: Path) -> None:
    path = tmp_path / "x.metrics.json"
    assert lag.metrics_url(path) is None
    path.write_text(json.dumps({"service": "worker", "url": "http://127.0.0.1:1/metrics", "pid": 1}))
    assert lag.metrics_url(path) == "http://127.0.0.1:1/metrics"


def test_replay_progress_counts_what_active_replays_still_have_and_the_oldest_running_checkpoint() -> None:
    class View:
        def __init__(self, status: str, end: int, next_sequence: int, updated: int | None) -> None:
            self.status, self.end_exclusive = status, end
            self.next_sequence, self.updated_at_ms = next_sequence, updated

    side_workers.replay_progress([View("running", 151, 51, 10_000), View("pending", 11, 1, None),
                                  View("completed", 500, 1, 0), View("running", 20, 20, 4_000)], now_ms=12_500)
    assert sample("watchtower_replay_remaining_sequences") == 100 + 10
    assert sample("watchtower_replay_checkpoint_age_seconds") == 8.5
    side_workers.replay_progress([], now_ms=0)
    assert sample("watchtower_replay_remaining_sequences") == 0
    assert sample("watchtower_replay_checkpoint_age_seconds") == 0
