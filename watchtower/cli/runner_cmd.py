"""``watchtower runner start NAME [--lie]``, ``watchtower runner list [--json]``, and the
registrar's ``watchtower runner admit|dismiss RUNNER`` (docs/ingestion.md, "Runner admission")."""

from __future__ import annotations

from pathlib import Path

import click
import nacl.signing

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


def runner_address(runner: str) -> str:
    """`runner` as an address: an address as it is, else the name of a local runner key
    (``runners/NAME.key`` under the Watchtower home, created on first use, as `runner start` does)."""
    from watchtower.ingest import keys
    from watchtower.protocol.addresses import address_from_public_key, is_address

    if is_address(runner):
        return runner
    if runner.startswith("0x"):
        raise click.UsageError(f"{runner!r} is not an address: '0x' and the 64 lowercase hex digits of a public key")
    return address_from_public_key(bytes(keys.runner_key(runner).verify_key))


def registrar_key(path: Path | None) -> nacl.signing.SigningKey:
    """The registrar's signing key: `path`, else this machine's genesis registrar (`watchtower up`)."""
    from watchtower.cli.genesis import GENESIS_DIR
    from watchtower.client.account import read_key_file
    from watchtower.client.home import watchtower_home

    return read_key_file(path or watchtower_home() / GENESIS_DIR / "registrar.key")


def admit(api_url: str | None, registrar: nacl.signing.SigningKey, runner: str, label: str) -> dict[str, object]:
    """Send the registrar's admission of `runner` (an address); the writer's reply."""
    from watchtower.client.http import ApiClient
    from watchtower.ingest.runner import admission_command

    return ApiClient(api_url).command(admission_command(registrar, runner, label))


_REGISTRAR_KEY = click.option("--registrar-key", "key_path", type=click.Path(dir_okay=False, path_type=Path),
                              default=None, help="The registrar's key file [default: the genesis registrar of "
                                                 "`watchtower up`, genesis/registrar.key].")
_API = click.option("--api", "api_url", default=None, help="The API / command gateway [env WATCHTOWER_API].")


@runner.command("admit")
@click.argument("runner_id", metavar="RUNNER")
@click.option("--label", default=None, help="The runner's label [default: RUNNER].")
@_REGISTRAR_KEY
@_API
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def runner_admit(runner_id: str, label: str | None, key_path: Path | None, api_url: str | None,
                 as_json: bool) -> None:
    """Admit RUNNER (an address, or the name of a runner key on this machine) to the registry.

    On a deployment with a runner registrar only the registrar admits runners: a runner's own
    registration is refused, so nobody can win selections by registering many keys."""
    address = runner_address(runner_id)
    reply = admit(api_url, registrar_key(key_path), address, label or runner_id)
    if as_json:
        echo_json(reply)
        return
    click.echo(f"admitted runner {address} ({reply.get('label')})")


@runner.command("dismiss")
@click.argument("runner_id", metavar="RUNNER")
@_REGISTRAR_KEY
@_API
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def runner_dismiss(runner_id: str, key_path: Path | None, api_url: str | None, as_json: bool) -> None:
    """Retire RUNNER (an address, or a local runner name) from the registry, as the registrar."""
    from watchtower.client.http import ApiClient
    from watchtower.ingest.runner import dismissal_command

    address = runner_address(runner_id)
    reply = ApiClient(api_url).command(dismissal_command(registrar_key(key_path), address))
    if as_json:
        echo_json(reply)
        return
    click.echo(f"retired runner {address}")
