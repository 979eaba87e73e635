"""ICRC-77 replays from the command line: ``replay request | register | status | cancel | list`` and
``feed ID replay-price CBY``.

``replay register`` registers several replays in one call (ICRC-77 icrc77_register_replay, the
gateway's ``POST /v1/commands/batch``): ranges ``FROM:TO`` of one feed or stream, or a ``--batch``
JSON file, and prints one result per registration, in order.

``replay request`` signs a register_replay for a feed (its id, looked up in the registry) or a
stream id; ``--follow`` then reads the replayed messages from Kafka (``--bootstrap``, the
deployment's ``--prefix``), each verified against the owner's key chain, with a progress bar on
stderr, until the replay is done. ``status --watch`` shows the progress bar alone. Every read takes
``--json``. A refusal prints its code, the ICRC-77 variant it answers to and what to do next.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from watchtower.cli import settings
from watchtower.cli.account_cmd import echo_table, identity_options, json_option, load_account
from watchtower.cli.feed_group import FeedRef, api_option, feed, message_line, parse_json, pass_feed, write_options
from watchtower.cli.json_output import echo_json
from watchtower.client.http import ApiClient
from watchtower.client.replay import TERMINAL, ReplayClient, ReplayRequest, ReplayTicket, state_of
from watchtower.protocol.errors import PaymentRequiredError, WatchtowerError
from watchtower.protocol.replay.status import STATUSES
from watchtower.topics.catalogue import topic_prefix

F = TypeVar("F", bound=Callable[..., Any])
BAR_WIDTH = 30


def kafka_options(func: F) -> F:
    """``--bootstrap`` and ``--prefix``: where replayed messages are read from."""
    func = click.option("--prefix", default=None, help="Topic prefix of the deployment [env WATCHTOWER_TOPIC_PREFIX; "
                                                       "default wt].")(func)
    return click.option("--bootstrap", default=None,
                        help="Kafka bootstrap servers [env WATCHTOWER_BOOTSTRAP; default: the one `watchtower "
                             "init` or `up` saved].")(func)


def _client(api_url: str | None, account: str | None, key_file: Path | None, bootstrap: str | None = None,
            prefix: str | None = None) -> ReplayClient:
    return ReplayClient(load_account(account, key_file), ApiClient(api_url), settings.bootstrap(bootstrap),
                        prefix=prefix or topic_prefix())


def explained(err: WatchtowerError) -> WatchtowerError:
    """`err` with its ICRC-77 variant named and, for PAYMENT_REQUIRED, the flag that pays."""
    variant = type(err).ICRC77_VARIANT
    hint = ""
    if isinstance(err, PaymentRequiredError) and err.details.get("price_cby") is not None:
        hint = f" Rerun with --max-payment {err.details['price_cby']} to pay it."
    if variant is None and not hint:
        return err
    text = err.message + (f" (ICRC-77 {variant})" if variant else "") + hint
    return type(err)(text, details=err.details) if type(err) is not WatchtowerError else err


def parse_skip(text: str | None) -> list[int] | None:
    """``M`` or ``M,K`` as an ICRC-77 skip (every M-th sequence, at offset K)."""
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not M or M,K (integers)", param_hint="--skip") from None


def bar(status: Mapping[str, Any]) -> str:
    """``[#####-----]  42.0%  running  12 delivered, 3 filtered, 0 skipped``."""
    percent = float(status.get("percent") or 0.0)
    done = int(BAR_WIDTH * min(100.0, percent) / 100)
    stats = status.get("stats") or {}
    return (f"[{'#' * done}{'-' * (BAR_WIDTH - done)}] {percent:5.1f}%  {state_of(status):9}  "
            f"{stats.get('delivered', 0)} delivered, {stats.get('filtered', 0)} filtered, "
            f"{stats.get('skipped', 0)} skipped")


class _Progress:
    """A progress bar on stderr: redrawn in place on a terminal, one line per change otherwise."""

    def __init__(self, replay_id: int) -> None:
        self.replay_id = replay_id
        self.last = ""
        self.tty = sys.stderr.isatty()

    def __call__(self, status: Mapping[str, Any]) -> None:
        line = f"replay {self.replay_id} {bar(status)}"
        if line == self.last:
            return
        self.last = line
        click.echo(("\r" + line) if self.tty else line, err=True, nl=not self.tty)

    def close(self) -> None:
        if self.tty and self.last:
            click.echo("", err=True)


def _summary(status: Mapping[str, Any]) -> str:
    stats = status["stats"]
    state = state_of(status)
    text = f"replay {status['replayId']} of {status['stream_id']} {status['range']}: {state}"
    if state == "errored":
        text += f" ({status['status']['errored']})"
    return (f"{text}; {stats['delivered']} delivered, {stats['filtered']} filtered, {stats['skipped']} skipped of "
            f"{stats['total']} ({status['percent']}%), engine {stats['engine']}, price {status['price_cby']} CBY")


@click.group("replay")
def replay() -> None:
    """ICRC-77 replays: re-emit a historical range of a feed to you, beyond the ring window."""


@replay.command("request")
@click.argument("namespace", metavar="FEED_OR_STREAM")
@click.option("--from", "from_sequence", type=click.IntRange(min=1), required=True, help="First sequence.")
@click.option("--to", "to_sequence", type=click.IntRange(min=1), default=None,
              help="End, exclusive (default: the head when the replay is registered).")
@click.option("--filter", "filter_json", default=None, metavar="JSON", help="CIP-7 filter DSL over headers.")
@click.option("--skip", "skip_text", default=None, metavar="M[,K]", help="Only sequences s with s % M == K.")
@click.option("--max-payment", type=click.IntRange(min=0), default=None, metavar="CBY",
              help="The most you accept to pay (a priced feed refuses without it: PAYMENT_REQUIRED).")
@click.option("--memo", default="", help="A note kept with the replay (at most 32 bytes).")
@click.option("--follow", is_flag=True, help="Then print the replayed, verified messages until the replay is done.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=600.0, show_default=True,
              help="With --follow: give up (TIMEOUT) after this many seconds.")
@kafka_options
@write_options
def replay_request(namespace: str, from_sequence: int, to_sequence: int | None, filter_json: str | None,
                   skip_text: str | None, max_payment: int | None, memo: str, follow: bool, timeout_s: float,
                   bootstrap: str | None, prefix: str | None, api_url: str | None, account: str | None,
                   key_file: Path | None, as_json: bool) -> None:
    """Register a replay of [--from, --to) of FEED_OR_STREAM (a feed id or a stream id); prints its id."""
    client = _client(api_url, account, key_file, bootstrap, prefix)
    flt = parse_json(filter_json, "--filter") if filter_json else None
    try:
        ticket = client.register(namespace, from_sequence, to_sequence, filter=flt, skip=parse_skip(skip_text),
                                 max_payment_cby=max_payment, memo=memo.encode())
    except WatchtowerError as err:
        raise explained(err) from None
    if as_json and not follow:
        echo_json({"replay_id": str(ticket.replay_id), "stream_id": ticket.stream_id, "first": ticket.first,
                   "end_exclusive": ticket.end_exclusive, "end_id": ticket.end_id, "price_cby": ticket.price_cby})
        return
    if not as_json:
        click.echo(f"replay {ticket.replay_id} registered: {ticket.stream_id} [{ticket.first}, {ticket.end_exclusive})"
                   f", {ticket.total} sequence(s), price {ticket.price_cby} CBY")
    if not follow:
        return
    progress = _Progress(ticket.replay_id)
    count = 0
    try:
        for msg in client.messages(ticket, timeout_s=timeout_s, on_status=progress):
            count += 1
            if as_json:
                echo_json({"replay_id": str(ticket.replay_id), **msg.to_json_dict()}, line=True)
            else:
                click.echo(message_line(msg))
    except WatchtowerError as err:
        raise explained(err) from None
    finally:
        progress.close()
    if not as_json:
        click.echo(f"{count} verified message(s) replayed")


def parse_range(text: str) -> tuple[int, int | None]:
    """``FROM:TO`` (TO exclusive) or ``FROM:`` (up to the head) as (from, to)."""
    first, sep, end = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(first), (int(end) if end.strip() else None)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not FROM:TO or FROM: (integers; TO is exclusive)",
                                 param_hint="RANGE") from None


_BATCH_FIELDS = frozenset({"namespace", "from", "to", "filter", "skip", "max_payment_cby", "memo"})


def parse_batch_file(path: Path, default_namespace: str | None) -> list[ReplayRequest]:
    """A ``--batch`` file: a JSON list of ``{"namespace", "from", "to", "filter", "skip",
    "max_payment_cby", "memo"}`` (``namespace`` defaults to FEED_OR_STREAM, ``to`` to open)."""
    items = parse_json(path.read_text(encoding="utf-8"), "--batch")
    if not isinstance(items, list):
        raise click.BadParameter("must be a JSON list of registrations", param_hint="--batch")
    requests = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not set(item) <= _BATCH_FIELDS or not isinstance(item.get("from"), int):
            raise click.BadParameter(f"item {index} must be an object with an integer \"from\" and only "
                                     f"{sorted(_BATCH_FIELDS)}", param_hint="--batch")
        namespace = item.get("namespace", default_namespace)
        if namespace is None:
            raise click.BadParameter(f"item {index} names no namespace; add one or pass FEED_OR_STREAM",
                                     param_hint="--batch")
        skip = item.get("skip")
        requests.append(ReplayRequest(namespace, item["from"], item.get("to"), item.get("filter"),
                                      parse_skip(skip) if isinstance(skip, str) else skip,
                                      item.get("max_payment_cby"), str(item.get("memo", "")).encode()))
    return requests


def _ticket_json(ticket: ReplayTicket) -> dict[str, Any]:
    return {"replay_id": str(ticket.replay_id), "stream_id": ticket.stream_id, "first": ticket.first,
            "end_exclusive": ticket.end_exclusive, "end_id": ticket.end_id, "price_cby": ticket.price_cby}


@replay.command("register")
@click.argument("args", nargs=-1, metavar="[FEED_OR_STREAM] [FROM:TO ...]")
@click.option("--batch", "batch_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A JSON list of registrations ({namespace, from, to, filter, skip, max_payment_cby, memo}).")
@click.option("--filter", "filter_json", default=None, metavar="JSON", help="For every range: CIP-7 filter DSL.")
@click.option("--skip", "skip_text", default=None, metavar="M[,K]", help="For every range: only s % M == K.")
@click.option("--max-payment", type=click.IntRange(min=0), default=None, metavar="CBY",
              help="For every range: the most you accept to pay.")
@click.option("--memo", default="", help="For every range: a note kept with the replay (at most 32 bytes).")
@kafka_options
@write_options
def replay_register(args: tuple[str, ...], batch_file: Path | None, filter_json: str | None, skip_text: str | None,
                    max_payment: int | None, memo: str, bootstrap: str | None, prefix: str | None,
                    api_url: str | None, account: str | None, key_file: Path | None, as_json: bool) -> None:
    """Register several replays in one call: FEED_OR_STREAM FROM:TO [FROM:TO ...] (TO exclusive, FROM: up
    to the head), or --batch FILE. Each is decided on its own; prints one result per registration, in
    order, and exits 1 if any was refused."""
    if batch_file is not None:
        if len(args) > 1 or filter_json or skip_text or max_payment is not None or memo:
            raise click.UsageError("--batch takes every registration from its file: pass at most FEED_OR_STREAM "
                                   "(the default namespace) besides it")
        requests = parse_batch_file(batch_file, args[0] if args else None)
    else:
        if len(args) < 2:
            raise click.UsageError("pass FEED_OR_STREAM and one or more ranges FROM:TO, or --batch FILE")
        flt = parse_json(filter_json, "--filter") if filter_json else None
        requests = [ReplayRequest(args[0], first, end, flt, parse_skip(skip_text), max_payment, memo.encode())
                    for first, end in map(parse_range, args[1:])]
    if not requests:
        raise click.UsageError("the batch is empty: give at least one registration")
    try:
        results = _client(api_url, account, key_file, bootstrap, prefix).register_many(requests)
    except WatchtowerError as err:
        raise explained(err) from None
    if as_json:
        echo_json({"results": [{"ok": True, **_ticket_json(r)} if isinstance(r, ReplayTicket)
                               else {"ok": False, "error": r.to_dict()} for r in results]})
    else:
        for index, r in enumerate(results, start=1):
            if isinstance(r, ReplayTicket):
                click.echo(f"{index}. replay {r.replay_id} registered: {r.stream_id} [{r.first}, {r.end_exclusive}), "
                           f"{r.total} sequence(s), price {r.price_cby} CBY")
            else:
                click.echo(f"{index}. error [{r.code}]: {explained(r).message}")
    if not all(isinstance(r, ReplayTicket) for r in results):
        sys.exit(1)


@replay.command("status")
@click.argument("replay_id", type=click.IntRange(min=1))
@click.option("--watch", is_flag=True, help="Show a progress bar until the replay is done.")
@api_option
@json_option
def replay_status(replay_id: int, watch: bool, api_url: str | None, as_json: bool) -> None:
    """Show a replay's status and progress (ICRC-77 replay_status)."""
    api = ApiClient(api_url)
    status = api.request("GET", f"/v1/replays/{replay_id}")
    if watch:
        progress = _Progress(replay_id)
        progress(status)
        while state_of(status) not in TERMINAL:
            time.sleep(0.5)
            status = api.request("GET", f"/v1/replays/{replay_id}")
            progress(status)
        progress.close()
    if as_json:
        echo_json(status)
    else:
        click.echo(_summary(status))


@replay.command("cancel")
@click.argument("replay_ids", nargs=-1, required=True, type=click.IntRange(min=1), metavar="REPLAY_ID...")
@write_options
def replay_cancel(replay_ids: tuple[int, ...], api_url: str | None, account: str | None, key_file: Path | None,
                  as_json: bool) -> None:
    """Ask to stop replays you requested (messages already sent are not recalled).

    One id is one cancel_replay; several go together in one call (ICRC-77 icrc77_cancel_replay, a
    vector in and a vector out), each answered on its own.
    """
    client = _client(api_url, account, key_file)
    if len(replay_ids) == 1:
        try:
            reply = client.cancel(replay_ids[0])
        except WatchtowerError as err:
            raise explained(err) from None
        if as_json:
            echo_json(reply)
        else:
            click.echo(f"cancel of replay {replay_ids[0]} requested; `watchtower replay status {replay_ids[0]}` "
                       "shows when it stops")
        return
    try:
        results = client.cancel_many(replay_ids)
    except WatchtowerError as err:
        raise explained(err) from None
    if as_json:
        echo_json({"results": [{"replay_id": str(rid), "ok": False, "error": r.to_dict()}
                               if isinstance(r, WatchtowerError) else {"replay_id": str(rid), "ok": True, "result": r}
                               for rid, r in zip(replay_ids, results, strict=True)]})
    else:
        for rid, r in zip(replay_ids, results, strict=True):
            click.echo(f"replay {rid}: " + (f"error [{r.code}]: {explained(r).message}"
                                            if isinstance(r, WatchtowerError) else "cancel requested"))
    if any(isinstance(r, WatchtowerError) for r in results):
        sys.exit(1)


@replay.command("list")
@click.option("--mine", is_flag=True, help="Only the replays your account requested.")
@click.option("--stream", "stream_id", default=None, metavar="STREAM", help="Only replays of this stream.")
@click.option("--status", type=click.Choice(STATUSES), default=None, help="Only replays in this state.")
@click.option("--take", type=click.IntRange(1, 500), default=100, show_default=True, help="Replays per page.")
@click.option("--prev", type=click.IntRange(min=0), default=None, help="Start after this replay id (paging).")
@identity_options
@api_option
@json_option
def replay_list(mine: bool, stream_id: str | None, status: str | None, take: int, prev: int | None,
                account: str | None, key_file: Path | None, api_url: str | None, as_json: bool) -> None:
    """List replays by id (ICRC-77 get_replays), one page at a time."""
    api = ApiClient(api_url)
    requester = load_account(account, key_file).address if mine else None
    page = api.request("GET", "/v1/replays", query={"requester": requester, "stream_id": stream_id,
                                                    "status": status, "prev": prev, "take": take})
    if as_json:
        echo_json(page)
        return
    rows = [(r["replayId"], r["stream_id"], f"[{r['range'][0]}, {r['range'][1] or 'head'})", state_of(r),
             f"{r['percent']}%", r["stats"]["delivered"], r["price_cby"]) for r in page["replays"]]
    echo_table(("REPLAY", "STREAM", "RANGE", "STATUS", "DONE", "DELIVERED", "PRICE"), rows, empty="no replays")
    if page.get("next") is not None:
        click.echo(f"more: --prev {page['next']}")


@feed.command("replay-price")
@click.argument("price", type=click.IntRange(0, 2**63 - 1), metavar="CBY")
@write_options
@pass_feed
def feed_replay_price(ref: FeedRef, price: int, api_url: str | None, account: str | None, key_file: Path | None,
                      as_json: bool) -> None:
    """Set the feed's ICRC-77 replay price, CBY per replayed event (owner only; 0: free)."""
    api = ApiClient(api_url)
    stream_id, _ = ref.resolve(api)
    try:
        reply = api.command(load_account(account, key_file).sign("set_replay_price", stream_id,
                                                                 {"price_per_event_cby": price}))
    except WatchtowerError as err:
        raise explained(err) from None
    if as_json:
        echo_json(reply)
    else:
        click.echo(f"replays of {stream_id} now cost {price} CBY per event")
