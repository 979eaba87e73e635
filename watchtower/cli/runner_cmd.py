"""``watchtower runner start NAME [--lie]`` and ``watchtower runner list [--json]``."""

from __future__ import annotations

import click

from watchtower.cli.account_cmd import echo_json, echo_table
from watchtower.cli.settings import bootstrap as resolve_bootstrap


@click.group("runner")
def runner() -> None:
    """Ingestion runners: processes with their own ed25519 identity that run ingestion tasks."""


@runner.command("start")
@click.argument("name")
@click.option("--lie", is_flag=True, help="Demo only: add 1 to every number it returns (QUORUM outvotes it).")
@click.option("--bootstrap", default=None, help="Kafka bootstrap [env WATCHTOWER_BOOTSTRAP].")
@click.option("--api", "api_url", default=None, help="The API / command gateway it registers through.")
def runner_start(name: str, lie: bool, bootstrap: str | None, api_url: str | None) -> None:
    """Register runner NAME (key file runners/NAME.key, created on first use) and run it in the foreground."""
    import os

    from watchtower.ingest.main import main

    os.environ["WATCHTOWER_BOOTSTRAP"] = resolve_bootstrap(bootstrap)
    if api_url:
        os.environ["WATCHTOWER_API"] = api_url
    main(["runner", name, *(["--lie"] if lie else [])])


@runner.command("list")
@click.option("--bootstrap", default=None, help="Kafka bootstrap [env WATCHTOWER_BOOTSTRAP].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def runner_list(bootstrap: str | None, as_json: bool) -> None:
    """The registered runners, as folded from the events log."""
    from watchtower.ingest.view import IngestionView
    from watchtower.topics.catalogue import topic_name
    from watchtower.topics.reader import read_committed

    view = IngestionView()
    for msg in read_committed(resolve_bootstrap(bootstrap), [topic_name("events")]):
        view.fold(msg.value())
    runners = [{"runner": address, "label": label} for address, label in sorted(view.registry.runners.items())]
    if as_json:
        echo_json({"runners": runners})
        return
    echo_table(("RUNNER", "LABEL"), [(r["runner"], r["label"]) for r in runners],
               empty="no runners registered; start one with `watchtower runner start NAME`")
