"""Ingestion on the command line: ``new feed --ingest-url …`` (a feed fed by runners),
``feed ID ingestion status [--json]`` and ``ingest serve`` (the scheduler and aggregator)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from watchtower.cli.account_cmd import echo_json, load_account
from watchtower.cli.feed_config import stream_config_fields
from watchtower.cli.feed_group import FeedRef, feed, pass_feed, read_options
from watchtower.cli.new_feed_cmd import new_feed
from watchtower.cli.settings import bootstrap as resolve_bootstrap
from watchtower.client.http import ApiClient
from watchtower.client.ingestion import http_ingestion, ingestion_status
from watchtower.client.sdk import create_feed, new_stream_id, wait_until_visible
from watchtower.ingest import keys
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.events import IngestFailed

_INGEST_OPTIONS = [
    click.Option(["--ingest-url"], default=None, metavar="URL",
                 help="Ingestion: fetch this HTTP(S) JSON source every --interval-blocks and publish it (runners "
                      "execute it; the feed's publisher key is the ingestion service's, delegated by you)."),
    click.Option(["--ingest-select"], default=None, metavar="PATH|JSON",
                 help='Ingestion: a path like $.data.price, or a JSON object {"name": "$.path", ...}.'),
    click.Option(["--interval-blocks"], type=click.IntRange(min=1), default=1, show_default=True),
    click.Option(["--runners", "num_runners"], type=click.IntRange(1, 255), default=3, show_default=True),
    click.Option(["--proof"], type=click.Choice(["QUORUM", "MEDIAN", "NONE"]), default="QUORUM", show_default=True),
    click.Option(["--transform"], type=click.Choice(["identity", "field_map", "price_batch"]), default=None),
    click.Option(["--result-schema"], default=None, metavar="JSON", help="Ingestion: a JSON Schema for the result."),
    click.Option(["--timeout-blocks"], type=click.IntRange(1, 600), default=None),
]
new_feed.params.extend(_INGEST_OPTIONS)
_plain_new_feed = new_feed.callback


def _new_feed(**kwargs: Any) -> None:
    ingest = {str(o.name): kwargs.pop(str(o.name)) for o in _INGEST_OPTIONS}
    if ingest["ingest_url"] is None:
        given = [o.opts[0] for o in _INGEST_OPTIONS if o.name != "ingest_url" and ingest[str(o.name)] != o.default]
        if given:
            raise click.UsageError(f"{', '.join(given)} only apply with --ingest-url")
        assert _plain_new_feed is not None
        return _plain_new_feed(**kwargs)
    select: Any = ingest["ingest_select"]
    if select is not None and select.lstrip().startswith("{"):
        select = json.loads(select)
    schema = json.loads(ingest["result_schema"]) if ingest["result_schema"] else None
    ingestion = http_ingestion(url=ingest["ingest_url"], select=select, interval_blocks=ingest["interval_blocks"],
                               num_runners=ingest["num_runners"], proof_type=ingest["proof"],
                               transform=ingest["transform"], result_schema=schema,
                               timeout_blocks=ingest["timeout_blocks"])
    owner = load_account(kwargs.pop("account"), kwargs.pop("key_file"))
    as_json, api = kwargs.pop("as_json"), ApiClient(kwargs.pop("api_url"))
    if kwargs.pop("publisher_key_file") is not None:
        raise click.UsageError("an ingesting feed is published by the ingestion key; drop --publisher-key-file")
    sid = kwargs.pop("stream_id") or new_stream_id()
    name, description = kwargs.pop("name"), kwargs.pop("description")
    config = stream_config_fields(owner.address, kwargs)
    delegated = keys.ingestion_publisher_public_key()  # your signed create names it: the delegation clients verify
    reply = create_feed(api, owner, name=name, description=description, stream_id=sid,
                        publisher_key_hex=delegated.hex(), ingestion=ingestion, **config)
    wait_until_visible(api, sid)
    if as_json:
        echo_json({**reply, "ingestion": ingestion})
        return None
    click.echo(f"feed {reply.get('feed_id')} created (stream {sid}), ingesting {ingest['ingest_url']} every "
               f"{ingest['interval_blocks']} block(s) with {ingest['num_runners']} runners ({ingest['proof']})")
    return None


new_feed.callback = _new_feed


def _failures(bootstrap: str, stream_id: str, limit: int = 10) -> list[dict[str, Any]]:
    from watchtower.schemas.wire import decode_event
    from watchtower.topics.catalogue import topic_name
    from watchtower.topics.reader import read_committed

    out = []
    for msg in read_committed(bootstrap, [topic_name("events")]):
        if msg.key() != stream_id.encode():
            continue
        try:
            event = decode_event(msg.value())
        except WatchtowerError:
            continue
        body = event.body
        if isinstance(body, IngestFailed):
            out.append({"reason": body.reason, "first_tick": body.first_tick, "last_tick": body.last_tick,
                        "timestamp_unix_ms": body.timestamp_unix_ms, "detail": body.detail})
    return out[-limit:]


@feed.group("ingestion")
def feed_ingestion() -> None:
    """The feed's timer-driven ingestion (CIP-7 IngestionConfig)."""


@feed_ingestion.command("status")
@click.option("--bootstrap", default=None, help="Kafka bootstrap, to list the last IngestFailed reasons.")
@click.option("--reasons/--no-reasons", default=True, show_default=True,
              help="Read the last IngestFailed events from Kafka.")
@read_options
@pass_feed
def ingestion_status_cmd(ref: FeedRef, bootstrap: str | None, reasons: bool, api_url: str | None,
                         as_json: bool) -> None:
    """Last tick published, fail count and the last failure reasons."""
    api = ApiClient(api_url)
    stream_id, _ = ref.resolve(api)
    status = ingestion_status(api, stream_id)
    status.pop("task_definition_json")
    if reasons:
        status["last_failures"] = _failures(resolve_bootstrap(bootstrap), stream_id)
    if as_json:
        echo_json(status)
        return
    cfg = status["ingestion"]
    click.echo(f"stream            {stream_id}")
    click.echo(f"ingestion         every {cfg['interval_blocks']} block(s), {cfg['num_runners']} runners, "
               f"{cfg['proof_type']}, transform {cfg.get('transform_method') or 'identity'}")
    last = status["last_success"]
    done = "none yet" if last is None else f"tick {last['tick']} -> sequence {last['sequence']}"
    click.echo(f"last success      {done}")
    click.echo(f"ingest_fail_count {status['ingest_fail_count']}")
    for failure in status.get("last_failures", []):
        click.echo(f"  failed ticks {failure['first_tick']}..{failure['last_tick']}: {failure['reason']} "
                   f"({failure['detail']})")


@click.group("ingest")
def ingest() -> None:
    """The ingestion service: the scheduler and the aggregator."""


@ingest.command("serve")
@click.option("--bootstrap", default=None, help="Kafka bootstrap [env WATCHTOWER_BOOTSTRAP].")
@click.option("--api", "api_url", default=None,
              help="Accepted for older scripts; the aggregator writes its commands to Kafka itself.")
@click.option("--role", type=click.Choice(["all", "aggregator", "scheduler"]), default="all", show_default=True,
              help="Run both parts, or only an aggregator (add one per machine to share the feeds) or the scheduler.")
@click.option("--health-file", type=click.Path(dir_okay=False, path_type=Path), default=None)
def ingest_serve(bootstrap: str | None, api_url: str | None, role: str, health_file: Path | None) -> None:  # noqa: ARG001
    """Run the scheduler (Faust) and the aggregator in the foreground (docs/ingestion.md, Capacity)."""
    from watchtower.ingest.service import serve
    from watchtower.topics.catalogue import topic_prefix

    serve(resolve_bootstrap(bootstrap), topic_prefix(), keys.scheduler_key(), keys.ingestion_publisher_key(),
          health_file, role=role)
