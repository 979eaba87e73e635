"""``watchtower keymgr serve|public-key``: the Stream Key Manager as a process of its own."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import click

from watchtower.cli import settings


@click.group()
def keymgr() -> None:
    """The Stream Key Manager: master seeds, stream_encrypt/decrypt and sealed epoch keys (docs/keymgr.md)."""


@keymgr.command()
@click.option("--bootstrap", default=None, help="Kafka bootstrap servers [env WATCHTOWER_BOOTSTRAP].")
@click.option("--port", default=8472, show_default=True, envvar="WATCHTOWER_KEYMGR_PORT", type=click.IntRange(1, 65535))
@click.option(
    "--bind",
    default="127.0.0.1",
    show_default=True,
    envvar="WATCHTOWER_KEYMGR_BIND",
    help="Address to listen on (it hands out decrypted payloads: keep loopback unless behind a proxy).",
)
@click.option("--prefix", default=None, help="Topic prefix [env WATCHTOWER_TOPIC_PREFIX, default wt].")
@click.option(
    "--kek-file",
    type=click.Path(path_type=Path),
    default=None,
    envvar="WATCHTOWER_KEYMGR_KEK_FILE",
    help="The KEK file (64 hex digits, mode 0600). Without it: WATCHTOWER_KEYMGR_KEK.",
)
def serve(bootstrap: str | None, port: int, bind: str, prefix: str | None, kek_file: Path | None) -> None:
    """Serve the key manager's HTTP API until Ctrl-C or SIGTERM."""
    from watchtower.keymgr.main import serve as run

    if kek_file is not None:
        os.environ["WATCHTOWER_KEYMGR_KEK_FILE"] = str(kek_file)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    click.echo(f"key manager on http://{bind}:{port} (Ctrl-C stops it)", err=True)
    raise SystemExit(run(settings.bootstrap(bootstrap), port, prefix, bind=bind))


@keymgr.command()
@click.option("--bootstrap", default=None, help="Kafka bootstrap servers [env WATCHTOWER_BOOTSTRAP].")
@click.option("--prefix", default=None, help="Topic prefix [env WATCHTOWER_TOPIC_PREFIX, default wt].")
@click.option("--old-kek-file", type=click.Path(path_type=Path), required=True, help="The KEK the seeds are under.")
@click.option("--new-kek-file", type=click.Path(path_type=Path), required=True, help="The KEK to re-wrap them under.")
def rewrap(bootstrap: str | None, prefix: str | None, old_kek_file: Path, new_kek_file: Path) -> None:
    """Rotate the KEK: re-wrap every stored master seed under the new KEK (docs/keymgr.md).

    Fences a running key manager (stop it first); afterwards start it with the new KEK and give the
    workers the new receipt key (`watchtower keymgr public-key --kek-file NEW`).
    """
    from watchtower.keymgr.kek import KekError, read_kek_file
    from watchtower.keymgr.vault import Vault

    try:
        old, new = read_kek_file(old_kek_file), read_kek_file(new_kek_file)
        vault = Vault(settings.bootstrap(bootstrap), prefix, old)
        vault.open()
    except KekError as exc:
        raise click.ClickException(str(exc)) from None
    count = vault.rewrap(new)
    vault.close()
    click.echo(
        f"re-wrapped {count} stream seed(s) from KEK {old.kek_id} to KEK {new.kek_id}; receipt key now "
        f"{new.receipt_public_key().hex()}"
    )


@keymgr.command("public-key")
@click.option("--kek-file", type=click.Path(path_type=Path), default=None, envvar="WATCHTOWER_KEYMGR_KEK_FILE")
def public_key(kek_file: Path | None) -> None:
    """Print the receipt public key of a KEK (what the workers need as WATCHTOWER_KEYMGR_PUBLIC_KEY)."""
    from watchtower.keymgr.kek import KekError, load_kek

    environ = dict(os.environ)
    if kek_file is not None:
        environ["WATCHTOWER_KEYMGR_KEK_FILE"] = str(kek_file)
    try:
        click.echo(load_kek(environ).receipt_public_key().hex())
    except KekError as exc:
        raise click.ClickException(str(exc)) from None
