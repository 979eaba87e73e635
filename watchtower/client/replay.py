"""`ReplayClient`: ICRC-77 replays from the SDK — register, follow, cancel, list.

A replay re-emits a historical range ``[from, to)`` of one stream, beyond the ring window, to the
requester: the original StreamMessages, byte for byte, on the ``deliveries`` topic keyed by the
requester's address, each with the headers ``icrc77:replay``, ``icrc77:replay:id`` (and
``icrc77:replay:end_id`` when ``to`` was open). `messages` reads them back:

- from the requester's partition of ``deliveries``, ``read_committed`` (a fulfilment that crashed
  mid-transaction never shows), from the offset the partition had when the ticket was registered;
- only records keyed by the requester and marked with this replay's id (other replays and live
  pushes to the same account are ignored);
- each message verified against the stream's publisher key schedule, whose key chain is checked
  from the owner's address exactly as `sdk.Subscriber` does (a forged message raises
  INVALID_SIGNATURE), and inside the replay's plan;
- deduplicated by (stream_id, sequence), so a redelivery after a fulfilment crash is yielded once;
- until the replay is terminal (completed, canceled, errored) and as many distinct messages as it
  reports delivered have been read. An errored replay raises GENERIC_ERROR with its reason after
  what it delivered.

Registration is a signed ``register_replay`` command; its answer (or ICRC-77 error: UNAUTHORIZED,
UNAUTHORIZED_SUBSCRIBER, SUBSCRIPTION_NOT_FOUND, PUBLICATION_NOT_FOUND, IMPROPER_CONFIG,
RANGE_TOO_LARGE, PAYMENT_REQUIRED) comes back from the stream's writer.

`register_many` is ICRC-77's vector form (``icrc77_register_replay``): one signed register_replay
per `ReplayRequest`, with consecutive nonces, sent together to ``POST /v1/commands/batch``; it
answers a ticket or the item's own error for each, in order. Items are decided independently (each
is its own command, with its own nonce and replay id); a batch refused as a whole raises
GENERIC_BATCH_ERROR (ICRC-77 GenericBatchError) and registers nothing.

`recover_gap` is how ``Subscriber(replay_on_cursor_too_old=True)`` crosses a CURSOR_TOO_OLD: it
sends the ready request the error carries, reads the replay and hands back one verified page.

What a request carries and how its answers read (`ReplayRequest`, `ReplayTicket`, the batch
answers, a ReplayStatus's state) is `replay_tickets`', which does no I/O; this module sends and reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.replay_tickets import BATCH_PATH as BATCH_PATH
from watchtower.client.replay_tickets import TERMINAL as TERMINAL
from watchtower.client.replay_tickets import (
    ReplayRequest,
    ReplayTicket,
    batch_item,
    batch_results,
    is_done,
    register_body,
    state_of,
    ticket_of,
)
from watchtower.protocol.errors import (
    CursorTooOldError,
    GenericReplayError,
    InvalidSignatureError,
    MalformedRecordError,
    ReplayNotFoundError,
    RequestTimeoutError,
    WatchtowerError,
)
from watchtower.protocol.replay.rules import read_replay_headers
from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas.records import decode_message
from watchtower.topics.catalogue import topic_name
from watchtower.topics.keyed_partition import KeyedPartitionReader
from watchtower.topics.records import Headers

if TYPE_CHECKING:
    from watchtower.client.sdk import Page, Subscriber

STATUS_EVERY_S: Final = 0.5  # how often `messages` asks for the replay's status while it waits
DEFAULT_TIMEOUT_S: Final = 600.0
MAX_BATCH: Final = 100  # the most registrations one batch may carry (the gateway refuses more as a whole)
_REPLY_MARGIN_S: Final = 5.0  # the HTTP request outlives the gateway's wait, so its TIMEOUT items arrive
_POLL_S: Final = 0.25  # how long `messages` waits for a delivery before it looks at the status again


class ReplayClient:
    """ICRC-77 replays of `account` (the requester) through `api`, read from Kafka at `bootstrap`.

    `prefix`: the deployment's topic prefix (default ``WATCHTOWER_TOPIC_PREFIX`` or ``wt``).
    `expected_owner`: the stream owner whose key chain messages must verify under (default: the
    owner of the first verified chain, as `Subscriber` pins it).
    """

    def __init__(self, account: Account, api: ApiClient, bootstrap: str, *, prefix: str | None = None,
                 expected_owner: str | None = None) -> None:
        self.account = account
        self.api = api
        self.bootstrap = bootstrap
        self.t_deliveries = topic_name("deliveries", prefix)
        self.expected_owner = expected_owner
        self._verifiers: dict[str, Subscriber] = {}

    # ------------------------------------------------------------------ control
    def resolve(self, namespace: str | int) -> tuple[str, str]:
        """(stream id, namespace as recorded): a feed id (``12``, ``"12"`` or ``"feed:12"``) goes
        through the registry; anything else is a stream id. The namespace recorded is always the
        stream id: the stream's writer refuses one that does not name it."""
        text = str(namespace)
        digits = text.removeprefix("feed:")
        if digits.isascii() and digits.isdigit():
            stream_id = str(self.api.feed(int(digits))["stream_id"])
            return stream_id, stream_id
        return text, text

    def register(self, namespace: str | int, from_sequence: int, to_sequence: int | None = None, *,
                 filter: Mapping[str, Any] | None = None, skip: list[int] | tuple[int, ...] | None = None,
                 max_payment_cby: int | None = None, memo: bytes = b"", timeout_s: float = 30.0) -> ReplayTicket:
        """Register a replay of ``[from_sequence, to_sequence)`` (open-ended without `to_sequence`).

        `max_payment_cby` is what you accept to pay (a priced stream without it: PAYMENT_REQUIRED,
        whose details say the price). Raises the ICRC-77 error the stream's writer answers.
        """
        stream_id, body = self._request_body(ReplayRequest(namespace, from_sequence, to_sequence, filter, skip,
                                                           max_payment_cby, memo))
        return self.send(stream_id, body, timeout_s=timeout_s)

    def register_many(self, requests: list[ReplayRequest] | tuple[ReplayRequest, ...], *,
                      timeout_s: float = 30.0) -> list[ReplayTicket | WatchtowerError]:
        """Register several replays in one call (ICRC-77 icrc77_register_replay: a vector in, a vector out).

        Each request becomes its own signed register_replay, with consecutive nonces in request
        order, sent together to ``POST /v1/commands/batch``. Answers, in request order, a
        `ReplayTicket` or the `WatchtowerError` that item was refused with (the codes `register`
        raises; TIMEOUT when its reply did not come within `timeout_s`: sending it again is safe).
        Items are decided independently, not atomically. Raises GENERIC_BATCH_ERROR when the batch
        is refused as a whole (none registered), e.g. more than `MAX_BATCH` requests.
        """
        bodies: list[tuple[str, dict[str, Any]]] = []
        streams: dict[str, tuple[str, str]] = {}
        for request in requests:
            key = str(request.namespace)
            if key not in streams:
                streams[key] = self.resolve(request.namespace)  # a feed id is looked up once
            bodies.append(self._request_body(request, streams[key]))
        nonces = self._consecutive_nonces(len(bodies))
        commands = [self.account.sign("register_replay", sid, body, nonce=nonce)
                    for (sid, body), nonce in zip(bodies, nonces, strict=True)]
        start = self._deliveries_end()  # before registering: every delivery of these replays is after it
        reply = self.api.request("POST", BATCH_PATH, body={"commands": [c.to_dict() for c in commands],
                                                           "timeout_s": timeout_s},
                                 timeout=max(self.api.timeout, timeout_s + _REPLY_MARGIN_S), commands=True)
        return [self._ticket_or_error(item, start) for item in batch_results(reply, len(commands), "registrations")]

    def _consecutive_nonces(self, count: int) -> list[int]:
        """`count` consecutive nonces, all drawn from the account's clock (none is ever given again)."""
        if count == 0:
            return []
        first = self.account.next_nonce()
        for _ in range(count - 1):
            self.account.next_nonce()  # each call is at least one more: the clock has passed the last one
        return [first + i for i in range(count)]

    def _ticket_or_error(self, item: object, start: int | None) -> ReplayTicket | WatchtowerError:
        result = batch_item(item)
        if isinstance(result, WatchtowerError):
            return result
        if not isinstance(result, Mapping):
            raise MalformedRecordError(f"{BATCH_PATH} answered an accepted item without its result")
        return self._ticket(result, start)

    def _request_body(self, request: ReplayRequest,
                      resolved: tuple[str, str] | None = None) -> tuple[str, dict[str, Any]]:
        """(stream id, register_replay body) of `request`."""
        if resolved is None:
            return register_body(request, self.resolve)
        known = resolved
        return register_body(request, lambda _namespace: known)

    def send(self, stream_id: str, body: Mapping[str, Any], *, timeout_s: float = 30.0) -> ReplayTicket:
        """Sign and send a register_replay `body` for `stream_id` (e.g. a CURSOR_TOO_OLD's ready request)."""
        start = self._deliveries_end()  # before registering: every delivery of the replay is after it
        reply = self.api.command(self.account.sign("register_replay", stream_id, dict(body)), timeout_s=timeout_s)
        return self._ticket(reply, start)

    def _ticket(self, reply: Mapping[str, Any], start: int | None) -> ReplayTicket:
        return ticket_of(reply, self.account.address, start)

    def recover_gap(self, subscriber: Subscriber, err: CursorTooOldError, max_payment_cby: int | None) -> Page:
        """`recover_gap` as this client (the `sdk.GapReplayer` a Subscriber calls)."""
        return recover_gap(subscriber, err, self, max_payment_cby)

    def cancel(self, replay_id: int, *, stream_id: str | None = None) -> dict[str, Any]:
        """Ask to cancel `replay_id` (only its requester can; delivered messages are not recalled).
        The replay's stream is looked up unless given."""
        sid = stream_id or str(self.status(replay_id)["stream_id"])
        return self.api.command(self.account.sign("cancel_replay", sid, {"replay_id": int(replay_id)}))

    def cancel_many(self, replay_ids: list[int] | tuple[int, ...], *,
                    timeout_s: float = 30.0) -> list[dict[str, Any] | WatchtowerError]:
        """Ask to cancel several replays in one call (ICRC-77 icrc77_cancel_replay: a vector of ids in,
        a vector of results out): one signed cancel_replay each, with consecutive nonces, sent together
        to ``POST /v1/commands/batch``. Answers, in order, the cancel's reply or the error that item was
        refused with (REPLAY_NOT_FOUND, UNAUTHORIZED, CANNOT_CANCEL ...). Raises GENERIC_BATCH_ERROR
        when the batch is refused as a whole (nothing was sent)."""
        streams = [str(self.status(int(rid))["stream_id"]) for rid in replay_ids]
        nonces = self._consecutive_nonces(len(streams))
        commands = [self.account.sign("cancel_replay", sid, {"replay_id": int(rid)}, nonce=nonce)
                    for sid, rid, nonce in zip(streams, replay_ids, nonces, strict=True)]
        reply = self.api.request("POST", BATCH_PATH, body={"commands": [c.to_dict() for c in commands],
                                                           "timeout_s": timeout_s},
                                 timeout=max(self.api.timeout, timeout_s + _REPLY_MARGIN_S), commands=True)
        out: list[dict[str, Any] | WatchtowerError] = []
        for item in batch_results(reply, len(commands), "cancels"):
            result = batch_item(item)
            out.append(result if isinstance(result, WatchtowerError) else dict(result or {}))
        return out

    def status(self, replay_id: int) -> dict[str, Any]:
        """The ICRC-77 ReplayStatus of `replay_id` (REPLAY_NOT_FOUND when unknown)."""
        return self.api.request("GET", f"/v1/replays/{int(replay_id)}")

    def list(self, *, mine: bool = False, requester: str | None = None, stream_id: str | None = None,
             status: str | None = None, prev: int | None = None, take: int | None = None) -> dict[str, Any]:
        """One page of ICRC-77 get_replays: ``{"replays": [...], "next": prev of the next page | None}``."""
        who = self.account.address if mine else requester
        return self.api.request("GET", "/v1/replays", query={"requester": who, "stream_id": stream_id,
                                                             "status": status, "prev": prev, "take": take})

    # ------------------------------------------------------------------ data
    def verifier(self, stream_id: str) -> Subscriber:
        """The `Subscriber` whose owner-verified key schedule checks `stream_id`'s messages."""
        from watchtower.client.sdk import Subscriber

        if stream_id not in self._verifiers:
            self._verifiers[stream_id] = Subscriber(self.api, stream_id, expected_owner=self.expected_owner)
        return self._verifiers[stream_id]

    def messages(self, ticket: ReplayTicket, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 on_status: Callable[[dict[str, Any]], None] | None = None) -> Iterator[StreamMessage]:
        """The replay's verified messages, ascending and once each, until it is done (module docstring).

        `on_status` gets every ReplayStatus read while waiting (a progress bar). TIMEOUT when the
        replay is not done within `timeout_s`.
        """
        verifier = self.verifier(ticket.stream_id)
        seen: set[tuple[str, int]] = set()
        status: dict[str, Any] | None = None
        deadline = time.monotonic() + timeout_s
        next_status = 0.0
        with self._deliveries() as reader:
            reader.start_at(ticket.deliveries_offset)
            while True:
                for record in reader.poll(_POLL_S):
                    if record.key != reader.key:
                        continue  # another account's delivery on the same partition
                    msg = self._accept(ticket, verifier, record.headers, record.value)
                    if msg is not None and (msg.stream_id, msg.sequence) not in seen:
                        seen.add((msg.stream_id, msg.sequence))
                        yield msg
                now = time.monotonic()
                if now >= next_status:
                    next_status = now + STATUS_EVERY_S
                    status = self._status_or_none(ticket.replay_id)
                    if status is not None and on_status is not None:
                        on_status(status)
                if status is not None and is_done(status, len(seen)):
                    break
                if now >= deadline:
                    raise RequestTimeoutError(
                        f"replay {ticket.replay_id} is not done after {timeout_s:g}s ({len(seen)} messages read); "
                        f"check `watchtower replay status {ticket.replay_id}` and that the replay worker runs")
        if status is not None and state_of(status) == "errored":
            raise GenericReplayError(f"replay {ticket.replay_id} stopped with an error after {len(seen)} messages: "
                                     f"{status['status']['errored']}; ask the stream's operator, then request the "
                                     f"rest again", details={"replay_id": ticket.replay_id})

    def _status_or_none(self, replay_id: int) -> dict[str, Any] | None:
        try:
            return self.status(replay_id)
        except ReplayNotFoundError:
            return None  # registered a moment ago: the read side has not folded it yet
        except WatchtowerError as err:
            if err.code in ("NOT_READY", "API_UNAVAILABLE", "TIMEOUT"):
                return None
            raise

    def _accept(self, ticket: ReplayTicket, verifier: Subscriber, headers: Headers,
                value: bytes | None) -> StreamMessage | None:
        """The verified message of a delivery of `ticket`'s replay; None for anything else."""
        marker = read_replay_headers(headers)
        if marker is None or marker.replay_id != ticket.replay_id:
            return None  # a live push, or another replay of this account
        msg = decode_message(value or b"")
        if msg.stream_id != ticket.stream_id or not ticket.first <= msg.sequence < ticket.end_exclusive:
            raise InvalidSignatureError(
                f"replay {ticket.replay_id} delivered {msg.stream_id}#{msg.sequence}, outside its plan "
                f"{ticket.stream_id} [{ticket.first}, {ticket.end_exclusive}); it was not accepted. Report it to "
                "the stream's operator.", details={"replay_id": ticket.replay_id})
        verifier.verify(msg)  # INVALID_SIGNATURE for an altered or forged message
        return msg

    def _deliveries(self) -> KeyedPartitionReader:
        """The requester's partition of ``deliveries`` (read_committed; nothing read before `start_at`)."""
        return KeyedPartitionReader(self.bootstrap, self.t_deliveries, self.account.address.encode(),
                                    group_prefix="wt-client-replay")  # the group prefix client ACLs allow

    def _deliveries_end(self) -> int | None:
        with self._deliveries() as reader:
            return reader.end()


# --- CURSOR_TOO_OLD's way back ---------------------------------------------------------------------


def recover_gap(subscriber: Subscriber, err: CursorTooOldError, client: ReplayClient,
                max_payment_cby: int | None) -> Page:
    """Cross a CURSOR_TOO_OLD: send the ready replay request in its details (with the subscriber's
    filter, and `max_payment_cby` as the payment hint when the replay has a price), read the replay
    and answer it as one verified page ending at ``floor - 1``, from which get_since continues.

    Without a filter every sequence of the gap must arrive (MALFORMED_RECORD otherwise); an error
    without a ready request propagates as it is.
    """
    from watchtower.client.sdk import Page

    request = err.details.get("replay")
    if not isinstance(request, Mapping) or not isinstance(request.get("body"), Mapping):
        raise err
    body = dict(request["body"])
    price = int(request.get("price_cby") or 0)
    body["config"] = {**dict(body["config"]), "filter": None if subscriber.filter is None else dict(subscriber.filter),
                      "max_payment_cby": max_payment_cby if price > 0 else 0}
    ticket = client.send(str(request["stream_id"]), body)
    client._verifiers[ticket.stream_id] = subscriber  # the subscriber's own verified key chain
    messages = sorted(client.messages(ticket), key=lambda m: m.sequence)
    cursor, floor = subscriber.cursor, int(body["to"])
    fresh = [m for m in messages if m.sequence > cursor]
    if subscriber.filter is None and [m.sequence for m in fresh] != list(range(cursor + 1, floor)):
        raise MalformedRecordError(f"replay {ticket.replay_id} of {ticket.stream_id} [{cursor + 1}, {floor}) "
                                   f"delivered {len(fresh)} of {floor - cursor - 1} messages; nothing of it was "
                                   "delivered, retry", details={"replay_id": ticket.replay_id})
    plaintexts = tuple(subscriber.plaintext(m) for m in fresh) if subscriber.decrypt else ()
    head = err.details.get("head")
    head = head if isinstance(head, int) else floor - 1
    return Page(subscriber.stream_id, tuple(fresh), head, floor, floor - 1, plaintexts)
