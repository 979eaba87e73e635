"""`watchtower init`: create the catalogue's topics (idempotently) and record the deployment."""

from __future__ import annotations

import click

from watchtower.cli import settings
from watchtower.cli.json_output import echo_json
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import DEFAULT_PARTITIONS, catalogue


@click.command("init")
@click.option("--bootstrap", default=None, help="Kafka bootstrap servers [env WATCHTOWER_BOOTSTRAP].")
@click.option("--partitions", default=DEFAULT_PARTITIONS, show_default=True, type=click.IntRange(1, 1024),
              help="Partitions of every co-partitioned topic.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def init(bootstrap: str | None, partitions: int, as_json: bool) -> None:
    """Create every Watchtower topic that is missing; safe to run again."""
    bs = settings.bootstrap(bootstrap)
    results = ensure_topics(bs, catalogue(partitions=partitions))
    settings.save({"bootstrap": bs, "partitions": partitions})
    if as_json:
        echo_json({"bootstrap": bs, "topics": [r.__dict__ for r in results]})
        return
    for r in results:
        click.echo(f"{r.action:8} {r.name}  partitions={r.partitions} rf={r.replication_factor}")
