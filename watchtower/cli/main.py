"""The `watchtower` command: one click group; each concern registers its own subcommands."""

from __future__ import annotations

import sys
from collections.abc import Mapping

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
    from watchtower.cli import (  # ingest_cmd adds `new feed --ingest-*`, `feed ID ingestion`
        account_cmd,
        demo_cmd,
        feed_group,
        gateway_cmd,
        ingest_cmd,
        init_cmd,
        keymgr_cmd,
        ledger_cmd,
        local_cmd,
        new_feed_cmd,
        replay_cmd,
        runner_cmd,
        status_cmd,
        up_cmd,
        vectors_cmd,
    )
    from watchtower.cli import audience_cmd as _audience  # it adds `feed ID subscribe|follow|allowlist|…`
    from watchtower.cli import epoch_wrap_cmd as _wrap  # it adds `feed ID pre-wrap-epochs|wrap-daemon|rewrap-epochs`
    from watchtower.cli import feed_cmd as _feed  # it adds `feed ID publish|get-since|get-head|rotate-publisher-key|…`
    from watchtower.cli import paid_feed_cmd as _paid  # it adds `feed ID acquire-access|renew|fetch-keys`
    from watchtower.cli import private_feed_cmd as _private  # it adds `feed ID keyloads`

    cli.add_command(vectors_cmd.vectors)
    cli.add_command(local_cmd.local)
    cli.add_command(init_cmd.init)
    cli.add_command(demo_cmd.demo)
    cli.add_command(gateway_cmd.gateway)
    cli.add_command(keymgr_cmd.keymgr)
    cli.add_command(ingest_cmd.ingest)
    cli.add_command(runner_cmd.runner)
    cli.add_command(__import__("watchtower.cli.spark_cmd", fromlist=["spark"]).spark)  # spark replay|verify|export
    for stack_command in (up_cmd.up, up_cmd.down, status_cmd.status):
        cli.add_command(stack_command)
    for command in (account_cmd.account, new_feed_cmd.new, new_feed_cmd.list_feeds, new_feed_cmd.feeds_by_owner,
                    feed_group.feed, ledger_cmd.cby, replay_cmd.replay):
        cli.add_command(command)
    del _audience, _feed, _paid, _private, _wrap
    _registered = True


def _one_line_errors() -> tuple[type[BaseException], ...]:
    from watchtower.local.errors import LocalStackError
    from watchtower.protocol.errors import WatchtowerError
    from watchtower.topics.admin import TopicMismatchError

    return (LocalStackError, WatchtowerError, TopicMismatchError)


def _wants_json(argv: list[str]) -> bool:
    """Whether the command line asks for JSON output (``--json`` before any ``--``)."""
    return "--json" in (argv[: argv.index("--")] if "--" in argv else argv)


def _echo_json_error(code: str, message: str, details: Mapping[str, object] | None = None) -> None:
    """The spec error object, as the HTTP API answers it: ``{"error": {"code", "message", "details"}}``
    on stdout (where the command's JSON goes), so a script reads its details (e.g. CURSOR_TOO_OLD's
    ready register_replay request) the same way it reads a success."""
    from watchtower.cli.json_output import echo_json

    body = {"error": {"code": code, "message": message, "details": dict(details) if details else {}}}
    echo_json(body, line=True)


def main() -> None:
    """Console-script entry point: user-fixable errors print one line, never a traceback.

    Under ``--json`` every refusal (a spec error, a usage error, a local-stack problem) is the spec
    error object on stdout instead, and the exit status is non-zero as always.
    """
    _register()
    as_json = _wants_json(sys.argv[1:])
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        if as_json:
            # A usage error names the argument to fix; any other refusal a command raises as a
            # ClickException (a missing file, a step of the demo) keeps its own code when it has one.
            usage = isinstance(exc, click.UsageError)
            own = getattr(exc, "code", None)
            spec_code = own if isinstance(own, str) else ("INVALID_ARGUMENT" if usage else "WATCHTOWER_ERROR")
            _echo_json_error(spec_code, exc.format_message(), {"usage": True} if usage else None)
        else:
            exc.show()
        sys.exit(exc.exit_code)
    except _one_line_errors() as exc:
        from watchtower.protocol.errors import WatchtowerError

        if as_json:
            if isinstance(exc, WatchtowerError):
                _echo_json_error(exc.code, exc.message, exc.details)
            else:
                code_ = getattr(exc, "code", None)
                _echo_json_error(code_ if isinstance(code_, str) else "WATCHTOWER_ERROR", str(exc))
            sys.exit(1)
        code = getattr(exc, "code", None)
        prefix = f"error [{code}]" if isinstance(code, str) else "error"
        # A WatchtowerError's str() already starts with its code; print the sentence once.
        text = exc.message if isinstance(exc, WatchtowerError) else str(exc)
        click.echo(f"{prefix}: {text}", err=True)
        sys.exit(1)
    except SystemExit:
        raise
