"""The benchmark's cost arithmetic: broker request counters read over Jolokia, per-publish figures."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from broker_requests import (
    count_delta,
    cpu_table,
    cpu_us_per_message,
    leg_cost,
    parse_error_counts,
    parse_request_counts,
    requests_table,
    transactions_note,
)

MBEAN = "kafka.network:type=RequestMetrics,name=RequestsPerSec,request={},version={}"


def _jolokia(counts: dict[tuple[str, int], int]) -> dict[str, object]:
    """A Jolokia answer to a pattern read of RequestsPerSec/Count, as the agent sends it."""
    return {"request": {"mbean": "kafka.network:name=RequestsPerSec,type=RequestMetrics,*", "attribute": "Count",
                        "type": "read"},
            "value": {MBEAN.format(t, v): {"Count": n} for (t, v), n in counts.items()},
            "status": 200, "timestamp": 1}


def test_request_counts_sum_the_api_versions_of_each_type() -> None:
    body = _jolokia({("Produce", 11): 40, ("Produce", 12): 2, ("EndTxn", 4): 7, ("ApiVersions", 3): 1})
    # Another meter under the same pattern (other name) is not a request count.
    body["value"]["kafka.network:type=RequestMetrics,name=ErrorsPerSec,request=Produce,error=NONE"] = {"Count": 99}
    assert parse_request_counts(body) == {"Produce": 42, "EndTxn": 7, "ApiVersions": 1}


def test_property_order_of_the_mbean_name_does_not_matter() -> None:
    body = {"status": 200, "value": {
        "kafka.network:version=2,request=Fetch,name=RequestsPerSec,type=RequestMetrics": {"Count": 5}}}
    assert parse_request_counts(body) == {"Fetch": 5}


def test_no_matching_meter_yet_is_no_requests() -> None:
    body = {"status": 404, "error_type": "javax.management.InstanceNotFoundException",
            "error": "No MBean with pattern ... found for READ request"}
    assert parse_request_counts(body) == {}


def test_error_answers_count_by_request_and_code_without_the_successes() -> None:
    errors = "kafka.network:type=RequestMetrics,name=ErrorsPerSec,request={},error={}"
    body = {"status": 200, "value": {
        errors.format("AddPartitionsToTxn", "CONCURRENT_TRANSACTIONS"): {"Count": 12},
        errors.format("AddPartitionsToTxn", "NONE"): {"Count": 900},
        errors.format("AddOffsetsToTxn", "CONCURRENT_TRANSACTIONS"): {"Count": 3},
        MBEAN.format("Produce", 11): {"Count": 40}}}
    assert parse_error_counts(body) == {"AddPartitionsToTxn/CONCURRENT_TRANSACTIONS": 12,
                                        "AddOffsetsToTxn/CONCURRENT_TRANSACTIONS": 3}
    with pytest.raises(ValueError):
        parse_error_counts({"status": 200, "value": {errors.format("Produce", "X"): {"Count": None}}})


@pytest.mark.parametrize("body", [
    {"status": 403, "error_type": "java.lang.SecurityException", "error": "access denied"},
    {"status": 200, "value": 12},
    {"status": 200, "value": {MBEAN.format("Produce", 1): {"Count": "x"}}},
])
def test_a_failed_or_malformed_read_is_an_error(body: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        parse_request_counts(body)


def test_delta_counts_types_first_seen_after_and_drops_unchanged_ones() -> None:
    before = {"Produce": 10, "Metadata": 4}
    after = {"Produce": 25, "Metadata": 4, "EndTxn": 3}
    assert count_delta(before, after) == {"Produce": 15, "EndTxn": 3}
    with pytest.raises(ValueError, match="backwards"):
        count_delta({"Produce": 10}, {"Produce": 2})


def test_cpu_per_message_totals_only_the_parts_of_the_leg() -> None:
    cpu = {"worker": 2.0, "projection": 1.0, "broker": 0.5, "bench client": 0.5}
    ours = cpu_us_per_message(cpu, 1000)
    assert ours == {"worker": 2000.0, "projection": 1000.0, "broker": 500.0, "bench client": 500.0, "total": 4000.0}
    raw = cpu_us_per_message(cpu, 1000, ("broker", "bench client"))
    assert raw["total"] == 1000.0
    assert math.isnan(cpu_us_per_message(cpu, 0)["total"])


def _phase(name: str, requests: dict[str, int] | None) -> dict[str, object]:
    entry: dict[str, object] = {"phase": name, "wall_s": 2.0,
                                "cpu_s": {"worker": 1.0, "projection": 0.5, "broker": 0.25, "bench client": 0.25}}
    if requests is not None:
        entry["broker_requests"] = requests
    return entry


def test_a_leg_divides_cpu_and_requests_by_its_acknowledged_messages() -> None:
    ours = leg_cost(_phase("1. publish burst", {"Produce": 1500, "EndTxn": 100, "AddOffsetsToTxn": 100,
                                                "TxnOffsetCommit": 100, "WriteTxnMarkers": 100}),
                    "1. burst", "project", 500)
    assert ours["us_per_msg"]["total"] == pytest.approx(4000.0)
    assert ours["per_message"]["EndTxn"] == pytest.approx(0.2)
    assert ours["requests_per_message"] == pytest.approx(1900 / 500)
    note = transactions_note(ours)
    assert note is not None
    assert "5.0 messages per transaction" in note
    assert "Produce 15.00" in note
    raw = leg_cost(_phase("1. raw produce->consume", {"Produce": 50, "Fetch": 20}), "1. burst raw", "raw", 5000)
    assert raw["us_per_msg"]["total"] == pytest.approx(100.0)  # broker + client only
    assert raw["per_message"]["Produce"] == pytest.approx(0.01)
    assert transactions_note(raw) is None
    bare = leg_cost(_phase("2. paced", None), "2. @100", "project", 10)
    assert "per_message" not in bare


def test_tables_show_every_leg_and_the_idle_background() -> None:
    legs = [leg_cost(_phase("a", {"Produce": 1000, "EndTxn": 100}), "1. burst", "project", 1000),
            leg_cost(_phase("b", {"Produce": 10, "Fetch": 30, "FetchConsumer": 30}), "1. burst raw", "raw", 1000)]
    text = requests_table(legs, {"Fetch": 2.5, "FetchConsumer": 2.5, "BrokerHeartbeat": 0.5})
    lines = {line.split()[0]: line.split()[1:] for line in text.splitlines()[2:]}
    assert lines["Produce"] == ["1.0000", "0.0100", "0.00"]
    assert lines["EndTxn"] == ["0.1000", "0.0000", "0.00"]
    assert lines["Fetch"] == ["0.0000", "0.0300", "2.50"]
    assert lines["of"] == ["which", "FetchConsumer", "0.0000", "0.0300", "2.50"]
    # Every fetch also ticks FetchConsumer: the totals count it once.
    assert lines["all"] == ["types", "1.1000", "0.0400", "3.00"]
    assert legs[1]["requests_per_message"] == pytest.approx(0.04)
    cpu = cpu_table(legs, ["worker", "projection", "broker", "bench client"]).splitlines()
    assert cpu[2].split()[-1] == "2000.0"  # 2 s of CPU over 1000 messages
    assert "(1000.0)" in cpu[3]  # the idle worker beside the raw leg, shown apart
    assert cpu[3].split()[-1] == "500.0"
