"""The `watchtower` command: one click group; each concern registers its own subcommands."""

from __future__ import annotations

import sys

import click

from watchtower import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="watchtower")
def cli() -> None:
    """Watchtower: signed, ordered, filterable data feeds on Apache Kafka."""


_registered = False


def _register() -> None:
    # Imported here so a broken optional subsystem cannot take the whole command down
    # at import time, and so tests can build the same group.
    global _registered
    if _registered:
        return
    from watchtower.cli import (
        account_cmd,
        demo_cmd,
        feed_cmd,
        gateway_cmd,
        init_cmd,
        keymgr_cmd,
        ledger_cmd,
        local_cmd,
        replay_cmd,
        up_cmd,
        vectors_cmd,
    )
    from watchtower.cli import paid_feed_cmd as _paid  # it adds `feed ID acquire-access|renew|fetch-keys`

    cli.add_command(vectors_cmd.vectors)
    cli.add_command(local_cmd.local)
    cli.add_command(init_cmd.init)
    cli.add_command(demo_cmd.demo)
    cli.add_command(gateway_cmd.gateway)
    cli.add_command(keymgr_cmd.keymgr)
    cli.add_command(__import__("watchtower.cli.spark_cmd", fromlist=["spark"]).spark)  # spark replay|verify|export
    for stack_command in (up_cmd.up, up_cmd.down, up_cmd.status):
        cli.add_command(stack_command)
    for command in (account_cmd.account, feed_cmd.new, feed_cmd.list_feeds, feed_cmd.feeds_by_owner, feed_cmd.feed,
                    ledger_cmd.cby, replay_cmd.replay):
        cli.add_command(command)
    del _paid
    _registered = True


def _one_line_errors() -> tuple[type[BaseException], ...]:
    from watchtower.local.errors import LocalStackError
    from watchtower.protocol.errors import WatchtowerError
    from watchtower.topics.admin import TopicMismatchError

    return (LocalStackError, WatchtowerError, TopicMismatchError)


def main() -> None:
    """Console-script entry point: user-fixable errors print one line, never a traceback."""
    _register()
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except _one_line_errors() as exc:
        from watchtower.protocol.errors import WatchtowerError

        code = getattr(exc, "code", None)
        prefix = f"error [{code}]" if isinstance(code, str) else "error"
        # A WatchtowerError's str() already starts with its code; print the sentence once.
        text = exc.message if isinstance(exc, WatchtowerError) else str(exc)
        click.echo(f"{prefix}: {text}", err=True)
        sys.exit(1)
    except SystemExit:
        raise
