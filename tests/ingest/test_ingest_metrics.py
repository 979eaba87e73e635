"""The ingestion processes' /metrics: what the aggregator and a runner did, read back through
prometheus-client's own text parser, with bounded labels only."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.ingest.test_aggregator import HEIGHT, RUNNERS, SCHEDULER, SID, Sink, aggregator, result, task
from watchtower.ingest.runner import Runner
from watchtower.metrics.ingest import AggregatorCollector, RunnerCollector
from watchtower.protocol.addresses import address_from_public_key
from watchtower.schemas.ingest_records import encode_task


def scrape(collector: object) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    registry = CollectorRegistry()
    registry.register(collector)  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def test_the_aggregator_counts_tasks_publishes_failures_and_refusals() -> None:
    sink = Sink()
    agg = aggregator(sink)
    before = scrape(AggregatorCollector(agg))
    assert before["watchtower_ingest_published_total"] == {(): 0.0}
    assert "watchtower_ingest_tick_to_ack_seconds" not in before  # no publish yet: no quantiles
    t1, t3 = task(1), task(3)
    agg.on_task(encode_task(t1))
    for runner in range(3):
        agg.on_result(result(t1, runner, {"p": 7}))
    agg.on_result(b"\x00 not a result")  # hostile bytes on ingest.results
    agg.on_result(result(t1, 0, {"p": 7}))  # the same runner's result again
    agg.step(HEIGHT + 2)
    agg.on_task(encode_task(task(2, skip_from=2)))
    agg.on_task(encode_task(t3))
    agg.step(HEIGHT + 6)  # tick 3 passes its deadline without results
    after = scrape(AggregatorCollector(agg))
    assert after["watchtower_ingest_tasks_total"][()] == 3
    assert after["watchtower_ingest_send_window_limit"][()] == agg.window.limit
    assert after["watchtower_ingest_send_window_in_flight"][()] == 0  # every command answered
    assert after["watchtower_ingest_send_window_held"][()] == 0
    assert after["watchtower_ingest_published_total"][()] == 1
    assert sum(after["watchtower_ingest_failed_total"].values()) == len(sink.reports) >= 1
    quarantined = after["watchtower_ingest_quarantined_total"]
    assert sum(quarantined.values()) == sum(agg.quarantined.values()) >= 1
    assert quarantined[(("code", "MALFORMED_RECORD"),)] == 1
    assert quarantined[(("code", "DUPLICATE_RESULT"),)] == 1
    # Labels name codes and reasons, never a stream or a runner.
    for name, series in after.items():
        for labels in series:
            for _key, value in labels:
                assert SID not in value, name
                assert not value.startswith("0x"), name


def test_a_runner_counts_the_tasks_it_refused() -> None:
    runner = Runner(RUNNERS[0], address_from_public_key(bytes(SCHEDULER.verify_key)))
    assert runner.accept(b"forged bytes") is None
    genuine = encode_task(task(1))
    forged = genuine[:-1] + bytes([genuine[-1] ^ 0x01])
    assert runner.accept(forged) is None
    metrics = scrape(RunnerCollector(runner))
    assert metrics["watchtower_runner_results_total"][()] == 0
    assert sum(metrics["watchtower_runner_quarantined_total"].values()) == 2


def test_a_process_says_whether_it_has_stepped_back_from_the_cpu() -> None:
    from tests.ingest.test_stepping_back import FakeGroup
    from watchtower.ingest.priority import Yielder
    from watchtower.metrics.ingest import PriorityCollector

    readings = iter([0.6] * 10)
    yielder = Yielder(10, idle=lambda: next(readings), group=FakeGroup())
    collector = PriorityCollector(yielder.describe)
    assert scrape(collector) == {"watchtower_ingest_stepping_back": {(): 0.0}}, "no reading yet: no idle share"
    for _ in range(10):
        yielder.step()
    assert scrape(collector) == {"watchtower_ingest_stepping_back": {(): 1.0},
                                 "watchtower_ingest_host_idle_ratio": {(): 0.6}}
    assert scrape(PriorityCollector(lambda: {"mode": "always", "nice": 10})) == {
        "watchtower_ingest_stepping_back": {(): 1.0}}
    assert scrape(PriorityCollector(lambda: {"mode": "never", "nice": 0})) == {
        "watchtower_ingest_stepping_back": {(): 0.0}}


def test_the_aggregator_tells_how_late_its_publishes_were_since_it_was_last_asked() -> None:
    sink = Sink()
    agg = aggregator(sink)
    assert agg.take_lateness() is None, "nothing published"
    t1 = task(1)
    agg.on_task(encode_task(t1))
    for runner in range(3):
        agg.on_result(result(t1, runner, {"p": 7}))
    agg.step(HEIGHT + 2)
    late = agg.take_lateness()
    assert late is not None
    assert late * 1000 == pytest.approx(max(agg.lags_ms), abs=1)  # the tick started long ago: very late
    assert agg.take_lateness() is None, "each publish is told once"
