"""The public `cowboy watchtower` CLI's command lines (shared/spec/cowboy-watchtower-cli.md) parse
against ours unchanged, beside our own names. Pure: each line is parsed, nothing is sent.
Failed before the aliases: `account register-key`, `list-keys`, `revoke-key`, `--to-epoch`,
`--account-key-id`, `--epochs` and `consume` were unknown.
"""

from __future__ import annotations

import click
import pytest

from watchtower.cli import ledger_cmd, paid_feed_cmd
from watchtower.cli.main import _register, cli


def parsed(*args: str) -> tuple[click.Command, dict[str, object]]:
    """The leaf command `args` reach and the parameters it would be called with."""
    _register()
    ctx = cli.make_context("watchtower", list(args), resilient_parsing=False)
    command: click.Command = cli
    while isinstance(command, click.Group):
        name, sub, rest = command.resolve_command(ctx, [*getattr(ctx, "_protected_args", []), *ctx.args])
        assert sub is not None, name
        ctx = sub.make_context(name, rest, parent=ctx)
        command = sub
    return command, ctx.params


@pytest.mark.parametrize("line", [
    "account register-key --scheme x25519",
    "account list-keys",
    "account revoke-key 2",
    "feed 3 acquire-access --to-epoch 12 --account-key-id 1 --beneficiary 0x" + "a1" * 32,
    "feed 3 fetch-keys --account-key-id 1 --epochs 10,11,12",
    "feed 3 consume --account-key-id 1 --cursor 5 --limit 20",
    "feed 3 subscribe --mode push-fallback",
    "feed 3 get-since --cursor 0 --limit 10",
    "feed 3 announce-key-epoch 4",
    "feed 3 pre-wrap-epochs --from 10 --to 12",
    "feed 3 wrap-daemon --depth 2",
    "feed 3 rewrap-epochs",
])
def test_a_public_cli_line_parses(line: str) -> None:
    command, _ = parsed(*line.split())
    assert command.callback is not None


def test_the_aliases_are_our_own_commands_and_options() -> None:
    assert parsed("account", "list-keys")[0] is ledger_cmd.account_keys_list
    assert parsed("account", "revoke-key", "2")[0] is ledger_cmd.account_keys_revoke
    command, params = parsed("feed", "3", "acquire-access", "--to-epoch", "12", "--account-key-id", "1")
    assert command is paid_feed_cmd.feed_acquire_access
    assert (params["until_epoch"], params["account_key_id"]) == (12, 1)
    assert parsed("feed", "3", "acquire-access", "--until-epoch", "12")[1]["until_epoch"] == 12


def test_epoch_lists() -> None:
    assert paid_feed_cmd.parse_epochs("10,11,12") == [10, 11, 12]
    assert paid_feed_cmd.parse_epochs("3-5,9,4") == [3, 4, 5, 9]
    for bad in ("", "x", "5-3", "-1", "1-20000"):
        with pytest.raises(click.BadParameter):
            paid_feed_cmd.parse_epochs(bad)
