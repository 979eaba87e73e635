"""`watchtower account …`: create, show and list ed25519 accounts and the actors they create.

Keys live under ``$WATCHTOWER_HOME`` (see `watchtower.client.account` for the layout and the
order in which the signing account is found). No command here ever prints a seed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from watchtower.cli.json_output import echo_json
from watchtower.client.account import (
    DEFAULT_ACCOUNT,
    ENV_ACCOUNT,
    ENV_KEY_FILE,
    Account,
    list_accounts,
    resolve_account,
)

F = TypeVar("F", bound=Callable[..., Any])


def identity_options(func: F) -> F:
    """Add ``--account NAME`` and ``--key-file PATH``; the command receives them as `account`, `key_file`."""
    func = click.option(
        "--key-file",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=f"Sign with the key in this file [env {ENV_KEY_FILE}].",
    )(func)
    return click.option(
        "--account",
        "account",
        default=None,
        metavar="NAME",
        help=f"Sign as this account (accounts/NAME.key) [env {ENV_ACCOUNT}; default '{DEFAULT_ACCOUNT}'].",
    )(func)


def json_option(func: F) -> F:
    """Add ``--json`` (received as `as_json`)."""
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(func)


def load_account(account: str | None, key_file: Path | None) -> Account:
    """The signing account for the flags (flag, then environment, then 'default')."""
    return resolve_account(account, key_file)


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, empty: str) -> None:
    """Print rows as left-aligned columns under `headers`, or `empty` when there are none."""
    if not rows:
        click.echo(empty)
        return
    cells = [[str(h) for h in headers], *[["" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _account_lines(info: dict[str, Any]) -> list[str]:
    lines = [f"{info['kind']:8} {info['name'] or '(key file)'}", f"address  {info['address']}"]
    if info.get("parent"):
        lines.append(f"parent   {info['parent']}")
    if info.get("key_file"):
        lines.append(f"key file {info['key_file']}")
    return lines


@click.group("account")
def account() -> None:
    """Accounts (ed25519 keys that sign commands) and the actors they create."""


@account.command("new")
@click.argument("name", default=DEFAULT_ACCOUNT, required=False)
@json_option
def account_new(name: str, as_json: bool) -> None:
    """Create account NAME (default 'default') with a fresh key, saved as accounts/NAME.key (0600)."""
    created = Account.create(name)
    if as_json:
        echo_json(created.describe())
        return
    for line in _account_lines(created.describe()):
        click.echo(line)
    if name != DEFAULT_ACCOUNT:
        click.echo(f"use it with --account {name} or {ENV_ACCOUNT}={name}")


@account.command("show")
@identity_options
@json_option
def account_show(account: str | None, key_file: Path | None, as_json: bool) -> None:
    """Show the account commands are signed with: name, address, key file."""
    info = load_account(account, key_file).describe()
    if as_json:
        echo_json(info)
        return
    for line in _account_lines(info):
        click.echo(line)


@account.command("list")
@json_option
def account_list(as_json: bool) -> None:
    """List the saved accounts."""
    entries = list_accounts()
    if as_json:
        echo_json({"accounts": entries})
        return
    rows = [(e["name"], e["address"] or f"unreadable: {e.get('error')}") for e in entries]
    echo_table(("NAME", "ADDRESS"), rows, empty="no accounts yet; create one with `watchtower account new`")


@account.command("new-actor")
@click.argument("name")
@click.option("--local", is_flag=True,
              help="Only write the actor's key here; do not record its creation on the deployment (it is then "
                   "not the account's own actor until `account actors authorize NAME --all-streams`).")
@click.option("--own", is_flag=True, hidden=True,
              help="Accepted for older scripts: recording the creation is now the default.")
@click.option("--api", "api_url", default=None, metavar="URL", help="The Watchtower HTTP API.")
@identity_options
@json_option
def account_new_actor(name: str, local: bool, own: bool, api_url: str | None, account: str | None,
                      key_file: Path | None, as_json: bool) -> None:
    """Create actor NAME: a program identity with its own key, created by the current account.

    The account's signed create_actor records the creation on the deployment (CIP-7
    actor.creator): the actor is then the account's own, authorized on every stream of the account
    without a grant, until `account actors revoke NAME --feed ID` (one feed) or `--all-streams`.
    """
    if local and own:
        raise click.UsageError("--own records the creation on the deployment; --local does not: pick one")
    creator = load_account(account, key_file)
    actor = creator.create_actor(name)
    if not local:
        from watchtower.client.http import ApiClient
        from watchtower.client.ledger import Ledger
        from watchtower.protocol.errors import WatchtowerError

        try:
            Ledger(ApiClient(api_url), creator).create_actor(actor.address)
        except WatchtowerError as err:
            err.message += (f" (the actor's key is saved as {actor.key_file}; record it as the account's own later "
                            f"with `watchtower account actors authorize {name} --all-streams`)")
            raise
    if as_json:
        echo_json({**actor.describe(), **({} if local else {"own_actor_of": creator.address})})
        return
    for line in _account_lines(actor.describe()):
        click.echo(line)
    if not local:
        click.echo(f"own actor of {creator.address}: authorized on its feeds until revoked")
    click.echo(f"sign as it with --key-file {actor.key_file}")


@account.group("actors", invoke_without_command=True)
@identity_options
@json_option
@click.pass_context
def account_actors_list(ctx: click.Context, account: str | None, key_file: Path | None, as_json: bool) -> None:
    """List the actors the current account created (`actors authorize|revoke` grant them a paid feed)."""
    if ctx.invoked_subcommand is not None:
        return
    owner = load_account(account, key_file)
    actors = owner.list_actors()
    if as_json:
        echo_json({"account": owner.address, "actors": actors})
        return
    rows = [(a.get("name"), a.get("address")) for a in actors]
    echo_table(("NAME", "ADDRESS"), rows, empty="no actors yet; create one with `watchtower account new-actor NAME`")

