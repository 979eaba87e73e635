"""The embedded broker's opt-in metrics agent: off by default, and a broker started with it serves its
JMX request counters as JSON (what bench/bench_stream_actor.py reads per publish)."""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_fixture import embedded_spec, free_ports
from waiting import wait_until

from watchtower.local.broker import LocalKafka, metrics_agent_args
from watchtower.local.config import ClusterSpec
from watchtower.local.jars import JOLOKIA_BUNDLE, KAFKA_BUNDLE, _pom
from watchtower.topics.connection import kafka_config

PRODUCE_COUNT = "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce,*/Count"


def test_no_agent_unless_the_spec_asks(tmp_path: Path) -> None:
    spec = ClusterSpec(tmp_path)
    node = spec.node_specs[0]
    assert spec.metrics_port is None
    assert spec.metrics_url(node) is None
    assert metrics_agent_args(spec, node, tmp_path / "agent.jar") == []
    with_metrics = dataclasses.replace(spec, metrics_port=20000, nodes=2)
    second = with_metrics.node_specs[1]
    assert with_metrics.metrics_url(second) == "http://127.0.0.1:20001/jolokia/"
    assert metrics_agent_args(with_metrics, second, tmp_path / "agent.jar") == [
        f"-javaagent:{tmp_path / 'agent.jar'}=port=20001,host=127.0.0.1,discoveryEnabled=false"]


def test_the_agent_jar_is_fetched_by_its_classifier() -> None:
    version = JOLOKIA_BUNDLE.version
    assert (f"<artifactId>jolokia-agent-jvm</artifactId><version>{version}</version><classifier>javaagent</classifier>"
            in _pom(JOLOKIA_BUNDLE))
    assert "<classifier>" not in _pom(KAFKA_BUNDLE)


def _produce_count(url: str) -> int:
    with urllib.request.urlopen(url + "read/" + PRODUCE_COUNT, timeout=10) as resp:  # noqa: S310 - loopback
        body = json.loads(resp.read())
    if body["status"] == 404 and body.get("error_type") == "javax.management.InstanceNotFoundException":
        return 0  # no such meter yet: the broker registers one at the first request of its type
    assert body["status"] == 200, body
    return sum(int(attrs["Count"]) for attrs in body["value"].values())


@pytest.mark.integration
def test_a_broker_with_metrics_counts_produce_requests(tmp_path: Path) -> None:
    spec = dataclasses.replace(embedded_spec(tmp_path / "kafka"), metrics_port=free_ports(1)[0])
    lk = LocalKafka(spec)
    try:
        lk.up()
        url = lk.metrics_url()
        assert url is not None
        bootstrap = spec.bootstrap
        admin = AdminClient({**kafka_config(bootstrap), **lk.client_settings()})
        topic = NewTopic("metrics-probe", num_partitions=1, replication_factor=1)
        admin.create_topics([topic])["metrics-probe"].result(30)
        assert _produce_count(url) == 0
        producer = Producer({**kafka_config(bootstrap), **lk.client_settings(), "linger.ms": 0})
        for _ in range(3):
            producer.produce("metrics-probe", value=b"x")
            producer.flush(30)  # one request per record: each is acknowledged before the next
        # The broker counts a request once it has sent the response, so the client may see the
        # acknowledgement a moment before the meter moves: wait for it, then hold it to exactly 3.
        wait_until("the broker's Produce meter to count 3 requests", lambda: _produce_count(url) >= 3, timeout_s=30)
        assert _produce_count(url) == 3
    finally:
        lk.down()
