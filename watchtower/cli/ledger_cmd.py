"""Paid-feed account commands: ``account keys …``, ``account actors authorize|revoke``,
``account allowance approve|revoke`` (delegated spending) and ``cby …``.

``account keys add`` generates an X25519 key pair, registers the public half and keeps the private
half 0600 as ``$WATCHTOWER_HOME/account-keys/<account>.<id>.x25519``: epoch keys are sealed to it.
``cby mint`` signs with the deployment's genesis minter key (``$WATCHTOWER_HOME/genesis/minter.key``,
written by `watchtower up`) unless ``--account`` / ``--key-file`` name another signer. Every read
takes ``--json``; every refusal prints its spec code and what to do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from watchtower.cli.account_cmd import account, account_actors_list, echo_table, load_account
from watchtower.cli.feed_group import FeedRef, read_options, write_options
from watchtower.cli.json_output import echo_json
from watchtower.client.account import Account, actor_key_path, resolve_account
from watchtower.client.account import account_key_path as account_file_path
from watchtower.client.account_keys import account_key_path, local_account_key_ids
from watchtower.client.home import watchtower_home
from watchtower.client.http import ApiClient
from watchtower.client.ledger import Ledger
from watchtower.protocol.addresses import require_address
from watchtower.protocol.errors import InvalidArgumentError

MINTER_KEY = Path("genesis") / "minter.key"


def address_of(text: str, what: str) -> str:
    """`text` as an address: ``0x``+64 hex as it is, else the address of the saved account or actor named so."""
    if text.startswith("0x"):
        return require_address(text, what)
    for path in (account_file_path(text), actor_key_path(text)):
        if path.exists():
            return Account.from_key_file(path).address
    raise InvalidArgumentError(f"{what} {text!r} is neither an address (0x + 64 hex) nor a saved account or actor "
                               f"name; see `watchtower account list` and `watchtower account actors`")


def _stream_id(api: ApiClient, feed_ref: str) -> str:
    return FeedRef(feed_ref).resolve(api)[0]


@account.command("info")
@click.argument("who", required=False, metavar="[ACCOUNT]")
@click.option("--account", "account", default=None, metavar="NAME", help="Your account (default 'default').")
@click.option("--key-file", type=click.Path(dir_okay=False, path_type=Path), default=None)
@read_options
def account_info(who: str | None, account: str | None, key_file: Path | None, api_url: str | None,
                 as_json: bool) -> None:
    """Show an account's CBY balance, account keys and actor authorizations (default: yours)."""
    address = address_of(who, "ACCOUNT") if who else load_account(account, key_file).address
    info = ApiClient(api_url).account_info(address)
    if as_json:
        echo_json(info)
        return
    click.echo(f"account      {address}\nbalance_cby  {info.get('balance_cby', 0)}")
    for key in info.get("keys", []):
        click.echo(f"key {key.get('account_key_id')}  {key.get('scheme')}  {key.get('status')}")
    for grant in info.get("authorizations", []):
        click.echo(f"actor {grant.get('actor')}  {grant.get('stream_id')}  {grant.get('status')}")


# --- account keys ----------------------------------------------------------------------------------


@account.group("keys")
def account_keys() -> None:
    """X25519 account keys: epoch keys of paid feeds are sealed to your ACTIVE one."""


@account_keys.command("add")
@write_options
def account_keys_add(api_url: str | None, account: str | None, key_file: Path | None, as_json: bool) -> None:
    """Generate an X25519 key pair and register it (at most 8 active keys per account)."""
    reply, path = Ledger(ApiClient(api_url), load_account(account, key_file)).add_account_key()
    if as_json:
        echo_json({**reply, "private_key_file": str(path)})
        return
    click.echo(f"account key {reply['account_key_id']} registered; its private key is saved to {path} (0600)")


@account_keys.command("list")
@click.option("--address", default=None, metavar="ADDR", help="Whose keys (default: your account's).")
@click.option("--account", "account", default=None, metavar="NAME", help="Your account (default 'default').")
@click.option("--key-file", type=click.Path(dir_okay=False, path_type=Path), default=None)
@read_options
def account_keys_list(address: str | None, account: str | None, key_file: Path | None, api_url: str | None,
                      as_json: bool) -> None:
    """List an account's registered keys, and which of them this machine holds the private half of."""
    me = None if address else load_account(account, key_file)
    who = me.address if me is not None else address_of(str(address), "--address")
    info = ApiClient(api_url).account_info(who)
    held = set(local_account_key_ids(me)) if me is not None else set()  # another's key files are never looked up
    keys = [{**k, "private_key_here": k.get("account_key_id") in held} for k in info.get("keys", [])]
    if as_json:
        echo_json({"account": who, "keys": keys})
        return
    rows = [(k.get("account_key_id"), k.get("scheme"), k.get("status"), str(k.get("public_key_hex", ""))[:16] + "…",
             k.get("registered_at_block"), "yes" if k["private_key_here"] else "no") for k in keys]
    echo_table(("ID", "SCHEME", "STATUS", "PUBLIC KEY", "REGISTERED AT", "PRIVATE KEY HERE"), rows,
               empty=f"{who} has no account keys; register one with `watchtower account keys add`")


@account_keys.command("revoke")
@click.argument("account_key_id", type=click.IntRange(min=1))
@write_options
def account_keys_revoke(account_key_id: int, api_url: str | None, account: str | None, key_file: Path | None,
                        as_json: bool) -> None:
    """Revoke key ACCOUNT_KEY_ID: epoch keys are never sealed to it again (its private file is kept)."""
    me = load_account(account, key_file)
    reply = Ledger(ApiClient(api_url), me).revoke_account_key(account_key_id)
    if as_json:
        echo_json(reply)
        return
    click.echo(f"account key {account_key_id} revoked (private key left at {account_key_path(me, account_key_id)})")


# --- account actors authorize|revoke ---------------------------------------------------------------


def _actor_command(action: str) -> None:
    @account_actors_list.command(action)
    @click.argument("actor")
    @click.option("--feed", "feed_ref", metavar="ID", help="The paid feed (feed id or stream id).")
    @click.option("--all-streams", is_flag=True,
                  help="Every stream of the account: the account's own actor (CIP-7 actor.creator), authorized "
                       "everywhere until revoked on one feed (--feed) or everywhere (--all-streams).")
    @write_options
    def command(actor: str, feed_ref: str | None, all_streams: bool, api_url: str | None, account: str | None,
                key_file: Path | None, as_json: bool) -> None:
        if (feed_ref is None) != all_streams:
            raise click.UsageError("name one feed with --feed, or every stream with --all-streams")
        api = ApiClient(api_url)
        stream_id, who = (None if feed_ref is None else _stream_id(api, feed_ref)), address_of(actor, "ACTOR")
        ledger = Ledger(api, load_account(account, key_file))
        act = ledger.authorize_actor if action == "authorize" else ledger.revoke_actor
        reply = act(who, stream_id, all_streams=all_streams)
        if as_json:
            echo_json(reply)
            return
        where = "every stream" if all_streams else stream_id
        click.echo(f"actor {who} {'may now decrypt' if action == 'authorize' else 'may no longer decrypt'} "
                   f"{where} for {ledger.account.address}"
                   f"{'' if action == 'authorize' else ' (from the next block)'}")

    command.help = (f"{'Let' if action == 'authorize' else 'Stop'} ACTOR (address or actor name) "
                    f"{'decrypt' if action == 'authorize' else 'decrypting'} a paid feed on your entitlement.")


_actor_command("authorize")
_actor_command("revoke")


# --- account allowance approve|revoke (CIP-7 delegated spending authority) ---------------------------


@account.group("allowance")
def account_allowance() -> None:
    """Let another address sign purchases your account pays (--payer YOU), up to a cap in CBY wei."""


@account_allowance.command("approve")
@click.argument("spender")
@click.option("--cap-cby", "cap_cby", type=click.IntRange(1, 2**63 - 1), required=True,
              help="The most SPENDER may spend from your balance under this allowance, in CBY wei.")
@click.option("--feed", "feed_ref", metavar="ID", default=None,
              help="Only purchases on this paid feed (feed id or stream id); default: any feed.")
@write_options
def account_allowance_approve(spender: str, cap_cby: int, feed_ref: str | None, api_url: str | None,
                              account: str | None, key_file: Path | None, as_json: bool) -> None:
    """Let SPENDER (address or saved name) pay purchases from your balance, up to --cap-cby in all.

    Approving again for the same spender and feed replaces the allowance and starts from nothing
    spent. SPENDER then runs `feed ID acquire-access --payer YOUR-ADDRESS`.
    """
    api = ApiClient(api_url)
    stream_id = None if feed_ref is None else _stream_id(api, feed_ref)
    ledger = Ledger(api, load_account(account, key_file))
    reply = ledger.approve_spending(address_of(spender, "SPENDER"), cap_cby, stream_id)
    if as_json:
        echo_json(reply)
        return
    click.echo(f"{reply.get('spender')} may spend up to {cap_cby} CBY wei of {ledger.account.address} on "
               f"{'any feed' if stream_id is None else stream_id}")


@account_allowance.command("revoke")
@click.argument("spender")
@click.option("--feed", "feed_ref", metavar="ID", default=None,
              help="The feed of the allowance (default: the any-feed allowance).")
@write_options
def account_allowance_revoke(spender: str, feed_ref: str | None, api_url: str | None, account: str | None,
                             key_file: Path | None, as_json: bool) -> None:
    """Withdraw SPENDER's allowance (effective for every purchase decided after it)."""
    api = ApiClient(api_url)
    stream_id = None if feed_ref is None else _stream_id(api, feed_ref)
    ledger = Ledger(api, load_account(account, key_file))
    reply = ledger.revoke_spending(address_of(spender, "SPENDER"), stream_id)
    if as_json:
        echo_json(reply)
        return
    click.echo(f"{reply.get('spender')} may no longer spend from {ledger.account.address} on "
               f"{'any feed' if stream_id is None else stream_id} ({reply.get('spent_cby')} CBY wei spent)")


# --- cby -------------------------------------------------------------------------------------------


@click.group("cby")
def cby() -> None:
    """CBY, the currency paid feeds are bought with: balances, mint, transfer, burn, supply."""


def _balance_row(api: ApiClient, who: str) -> dict[str, Any]:
    info = api.account_info(who)
    return {"account": who, "balance_cby": info.get("balance_cby", 0)}


@cby.command("balance")
@click.argument("accounts", nargs=-1, metavar="[ACCOUNT]...")
@click.option("--account", "account", default=None, metavar="NAME", help="Your account (default 'default').")
@click.option("--key-file", type=click.Path(dir_okay=False, path_type=Path), default=None)
@read_options
def cby_balance(accounts: tuple[str, ...], account: str | None, key_file: Path | None, api_url: str | None,
                as_json: bool) -> None:
    """Show the CBY balance of each ACCOUNT (address or saved name; default: yours)."""
    api = ApiClient(api_url)
    who = [address_of(a, "ACCOUNT") for a in accounts] or [load_account(account, key_file).address]
    rows = [_balance_row(api, w) for w in who]
    if as_json:
        echo_json(rows[0] if len(rows) == 1 else {"balances": rows})
        return
    echo_table(("ACCOUNT", "BALANCE (CBY wei)"), [(r["account"], r["balance_cby"]) for r in rows], empty="")


@cby.command("digest")
@read_options
def cby_digest(api_url: str | None, as_json: bool) -> None:
    """Show the rebuild digest of the paid-feed tables (balances, keys, entitlements), to compare with a rebuild."""
    digest = ApiClient(api_url).keymgr_digest()
    if as_json:
        echo_json(digest)
        return
    for name, value in digest.items():
        click.echo(f"{name:20} {value}")


@cby.command("supply")
@read_options
def cby_supply(api_url: str | None, as_json: bool) -> None:
    """Show the total CBY supply beside the sum of all balances (they are always equal)."""
    supply = ApiClient(api_url).cby_supply()
    if as_json:
        echo_json(supply)
        return
    for name in ("total_supply_cby", "sum_of_balances_cby", "accounts"):
        click.echo(f"{name:20} {supply.get(name)}")


def _minter(account: str | None, key_file: Path | None) -> Account:
    if account or key_file:
        return load_account(account, key_file)
    path = watchtower_home() / MINTER_KEY
    if not path.exists():
        raise InvalidArgumentError(f"no genesis minter key at {path}; `watchtower up` creates it, or pass the "
                                   f"minter's --key-file")
    return resolve_account(key_file=path)


@cby.command("mint")
@click.argument("to")
@click.argument("amount", type=click.IntRange(1, 2**63 - 1))
@write_options
def cby_mint(to: str, amount: int, api_url: str | None, account: str | None, key_file: Path | None,
             as_json: bool) -> None:
    """Create AMOUNT CBY wei for TO (genesis minter only; signed with genesis/minter.key by default)."""
    reply = Ledger(ApiClient(api_url), _minter(account, key_file)).mint_cby(address_of(to, "TO"), amount)
    if as_json:
        echo_json(reply)
        return
    click.echo(f"minted {amount} CBY wei to {to}")


@cby.command("transfer")
@click.argument("to")
@click.argument("amount", type=click.IntRange(1, 2**63 - 1))
@click.option("--memo", default=None, help="A note recorded with the transfer.")
@write_options
def cby_transfer(to: str, amount: int, memo: str | None, api_url: str | None, account: str | None,
                 key_file: Path | None, as_json: bool) -> None:
    """Send AMOUNT CBY wei from your account to TO (address or saved name)."""
    reply = Ledger(ApiClient(api_url), load_account(account, key_file)).transfer_cby(address_of(to, "TO"), amount,
                                                                                    memo)
    if as_json:
        echo_json(reply)
        return
    click.echo(f"transferred {amount} CBY wei to {to}")


@cby.command("burn")
@click.argument("amount", type=click.IntRange(1, 2**63 - 1))
@write_options
def cby_burn(amount: int, api_url: str | None, account: str | None, key_file: Path | None, as_json: bool) -> None:
    """Destroy AMOUNT CBY wei of your balance."""
    reply = Ledger(ApiClient(api_url), load_account(account, key_file)).burn_cby(amount)
    if as_json:
        echo_json(reply)
        return
    click.echo(f"burned {amount} CBY wei")


# --- the public CLI's names (shared/spec/cowboy-watchtower-cli.md), beside ours ------------------


@account.command("register-key")
@click.option("--scheme", type=click.Choice(["x25519"], case_sensitive=False), default="x25519", show_default=True,
              help="The account key scheme (CIP-7 v1 has X25519 only).")
@write_options
@click.pass_context
def account_register_key(ctx: click.Context, scheme: str, api_url: str | None, account: str | None,
                         key_file: Path | None, as_json: bool) -> None:
    """Register a new X25519 account key (the same as `account keys add`)."""
    del scheme  # X25519 is the only scheme
    ctx.invoke(account_keys_add, api_url=api_url, account=account, key_file=key_file, as_json=as_json)


account.add_command(account_keys_list, "list-keys")  # `account keys list`
account.add_command(account_keys_revoke, "revoke-key")  # `account keys revoke ID`
