"""`watchtower demo`: the README's first command. Shows every capability built so far, end to end."""

from __future__ import annotations

import time

import click

from watchtower.cli.demo_wait import demo_step
from watchtower.local.broker import LocalKafka
from watchtower.local.config import DEFAULT_CONTROLLER_PORT, DEFAULT_PORT, ClusterSpec
from watchtower.local.jars import spark_jars
from watchtower.local.paths import watchtower_home
from watchtower.local.smoke import Hop, three_client_roundtrip
from watchtower.spark.smoke import spark_copy
from watchtower.topics.admin import ensure_topics


def _step(title: str) -> None:
    click.secho(f"\n== {title}", bold=True)


@click.command("demo")
@click.option("--port", default=DEFAULT_PORT, show_default=True, envvar="WATCHTOWER_LOCAL_PORT")
@click.option("--controller-port", default=DEFAULT_CONTROLLER_PORT, show_default=True,
              envvar="WATCHTOWER_LOCAL_CONTROLLER_PORT")
@click.option("--keep-running", is_flag=True, help="Leave the broker up afterwards.")
def demo(port: int, controller_port: int, keep_running: bool) -> None:
    """Start the embedded Kafka, create the topics, drive all three clients, then stop cleanly."""
    spec = ClusterSpec(watchtower_home() / "local" / f"demo-{port}", port, controller_port)
    broker = LocalKafka(spec)
    started_here = broker.status()["state"] != "running"
    t0 = time.monotonic()
    _step("1. embedded Apache Kafka (KRaft, single node)")
    with demo_step("start the embedded Kafka broker", logs=spec.data_dir):
        waited = broker.up()
    st = broker.status()
    click.echo(f"kafka {st['kafka_version']} answering at {st['bootstrap']} after {waited:.1f}s "
               f"(data {st['data_dir']})")
    try:
        _step("2. topic catalogue (`watchtower init`)")
        with demo_step("create the topic catalogue", logs=spec.data_dir):
            created = ensure_topics(spec.bootstrap)
        for r in created:
            click.echo(f"  {r.action:8} {r.name:22} partitions={r.partitions} rf={r.replication_factor}")

        _step("3. one record through confluent-kafka, Faust (aiokafka) and Spark")

        def show(h: Hop) -> None:
            click.echo(f"  [{h.seconds:5.1f}s] {h.client:16} {h.action}: {h.value!r}")

        with demo_step("one record through confluent-kafka, Faust and Spark"):
            three_client_roundtrip(spec.bootstrap, lambda b, src, dst: spark_copy(b, src, dst, spark_jars()), show)

        _step("4. the stream actor: workers, HTTP API, SDK and CLI (feeds, rotation, filters, allowlist, ring), "
              "then a paid feed, then replays beyond the window (service and Spark)")
        from watchtower.cli.demo_stream import run_stream_demo

        run_stream_demo(spec.bootstrap)

        _step("5. push delivery: a push and a push-with-pull-fallback subscriber over SSE, the gateway "
              "killed mid-stream, and the per-block bound")
        from watchtower.cli.demo_push import run_push_demo

        run_push_demo(spec.bootstrap)

        _step("6. timer-driven ingestion: a price feed fed by runners under QUORUM, one of them lying, "
              "and a source outage")
        from watchtower.cli.demo_ingest import run_ingest_demo

        run_ingest_demo(spec.bootstrap)
    finally:
        if started_here and not keep_running:
            _step("stopping")
            broker.down()
            click.echo(f"broker stopped: {broker.status()['state']}")
    click.secho(f"\ndemo finished in {time.monotonic() - t0:.0f}s", fg="green")
