"""The `watchtower` command: one click group; each concern registers its own subcommands."""

from __future__ import annotations

import click

from watchtower import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="watchtower")
def cli() -> None:
    """Watchtower: signed, ordered, filterable data feeds on Apache Kafka."""


def _register() -> None:
    # Imported here so `watchtower --help` stays fast and a broken optional
    # subsystem cannot take the whole command down at import time.
    from watchtower.cli import vectors_cmd

    cli.add_command(vectors_cmd.vectors)


def main() -> None:
    """Console-script entry point."""
    _register()
    cli()
