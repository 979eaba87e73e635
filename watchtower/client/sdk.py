"""The Python SDK over the HTTP API: `Publisher`, `Subscriber` and `create_feed`.

A `Publisher` is the optimistic-concurrency writer of one stream (DESIGN §3): it signs each
message for the sequence it expects (head + 1), and a mismatch comes back as STALE_SEQUENCE, never
as a silent renumbering. A `Subscriber` pulls `get_since` pages, verifies every message against
the stream's publisher key schedule, deduplicates by (stream_id, sequence) and keeps its cursor.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import nacl.signing

from watchtower.client.account import Account
from watchtower.client.stream_modes import PushSource, StreamStats, check_stream_args, run_stream
from watchtower.protocol.addresses import require_address
from watchtower.protocol.confidential.envelope import decrypt_with_content_key
from watchtower.protocol.config import StreamConfig
from watchtower.protocol.constants import (
    DEFAULT_CONTENT_TYPE,
    MAX_GET_SINCE_LIMIT,
    MAX_WIRE_UINT64,
    MIN_GET_SINCE_LIMIT,
)
from watchtower.protocol.enums import PayloadFormat
from watchtower.protocol.errors import (
    CursorTooOldError,
    FeedNotFoundError,
    InvalidArgumentError,
    InvalidSignatureError,
    LimitExceededError,
    MalformedRecordError,
    NotReadyError,
    RequestTimeoutError,
    StaleSequenceError,
    StreamNotFoundError,
    UnauthorizedError,
)
from watchtower.protocol.page.proof import ProofEntry, schedule_check, verify_page_proof
from watchtower.protocol.page.rules import check_page_sequences
from watchtower.protocol.signed_command import Command
from watchtower.protocol.signing import sign_message, verify_with_schedule
from watchtower.protocol.stream.filters import parse_filter
from watchtower.protocol.stream.key_chain import key_chain_owner, verify_key_chain
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage, TagValue

DEFAULT_WAIT_MS = 2000
#: How often `Subscriber.stream` in push-with-pull-fallback mode pulls, pushes or not.
DEFAULT_PULL_INTERVAL_S = 5.0


class StreamApi(Protocol):
    """The part of `ApiClient` the SDK uses (anything with these methods will do)."""

    def command(self, cmd: Command, *, timeout_s: float = ...) -> dict[str, Any]: ...

    def get_head(self, stream_id: str) -> dict[str, Any]: ...

    def get_since(
        self,
        stream_id: str,
        cursor: int = ...,
        limit: int = ...,
        *,
        filter: Mapping[str, Any] | None = ...,
        min_head: int | None = ...,
        wait_ms: int | None = ...,
        proof: bool = ...,
    ) -> dict[str, Any]: ...

    def key_schedule(self, stream_id: str) -> KeySchedule: ...

    def feed(self, feed_id: int) -> dict[str, Any]: ...


def new_stream_id() -> str:
    """A fresh random stream id: ``"s-"`` + 16 hex digits (64 random bits)."""
    return "s-" + secrets.token_hex(8)


def create_feed(
    api: StreamApi,
    owner: Account,
    *,
    name: str,
    description: str = "",
    publisher_key_hex: str,
    stream_id: str | None = None,
    timeout_s: float = 30.0,
    **config: Any,
) -> dict[str, Any]:
    """Create a stream owned by `owner` and list it in the registry as feed `name`.

    `config` holds further StreamConfig fields (ring_buffer_capacity, subscription_policy,
    access_mode, paid_stream_config as a dict, …); they are validated here first, so a bad field
    fails before anything is sent. The create_stream body is the full StreamConfig JSON plus
    ``"feed": {"name", "description"}``. Returns the reply: stream_id, owner, feed_id, head, ….
    Reads may trail the acknowledgement briefly: `wait_until_visible` before reading it back.
    """
    for reserved in ("owner", "publisher_key", "publisher_key_hex", "feed"):
        if reserved in config:
            raise InvalidArgumentError(f"create_feed sets {reserved} itself; do not pass it in config")
    sid = stream_id or new_stream_id()
    fields = {**config, "stream_id": sid, "owner": owner.address, "publisher_key_hex": publisher_key_hex}
    paid = fields.get("paid_stream_config")
    governed = isinstance(paid, Mapping) and "protocol_treasury" not in paid
    if isinstance(paid, Mapping) and governed:
        # The deployment fills in its protocol treasury (docs/deployment.md); the creator's address
        # stands in for it only so the rest of the config is validated here.
        fields["paid_stream_config"] = {**paid, "protocol_treasury": owner.address}
    body = StreamConfig.from_dict(fields).to_json_dict()
    if governed:
        del body["paid_stream_config"]["protocol_treasury"]
    body["feed"] = {"name": name, "description": description}
    return api.command(owner.sign("create_stream", sid, body), timeout_s=timeout_s)


def wait_until_visible(
    api: StreamApi,
    stream_id: str,
    *,
    min_head: int = 0,
    signing_key_id: int = 1,
    feed_id: int | None = None,
    timeout_s: float = 10.0,
) -> dict[str, Any]:
    """Wait until the read side shows an acknowledged write; return the stream's get_head.

    Commands are acknowledged by the writer; the HTTP reads come from projections a moment
    later. Call this after create_feed or a key rotation when the next step reads (a Publisher's
    first `sync`, a feed-id lookup). Waits for the stream to exist with head ≥ `min_head` and
    current key id ≥ `signing_key_id` (and for `feed_id` in the registry); TIMEOUT otherwise.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if feed_id is not None:
                api.feed(feed_id)
            info = api.get_head(stream_id)
            if _head_of(info, "get_head") >= min_head and info.get("signing_key_id", 0) >= signing_key_id:
                return info
        except (StreamNotFoundError, FeedNotFoundError, NotReadyError):
            pass
        if time.monotonic() >= deadline:
            raise RequestTimeoutError(
                f"the write to stream {stream_id} was acknowledged, but the read side has not shown it within "
                f"{timeout_s:g}s; it will appear once the projection workers catch up (check `watchtower up`)"
            )
        time.sleep(0.05)


def _int_field(data: Mapping[str, Any], name: str, what: str, *, alias: str | None = None) -> int:
    """`data[name]` as an int; `alias` is the field's 0.1 name, read when a 0.1 API omits `name`."""
    value = data.get(name)
    if value is None and alias is not None:
        value = data.get(alias)
    if type(value) is not int:
        raise MalformedRecordError(f"{what} has no integer {name!r}; the API answered {sorted(data)}")
    return value


# CIP-7's field names and the names a 0.1 API answered with (deprecated, kept for one release).
_SPEC_NAMES = (("head_sequence", "head"), ("floor_sequence", "floor"), ("publisher_key", "publisher_key_hex"),
               ("publisher_key", "public_key_hex"))


def with_spec_names(answer: Mapping[str, Any]) -> dict[str, Any]:
    """`answer` with every CIP-7 field name present, filled from its 0.1 name where a 0.1 API
    answered only that (head -> head_sequence, floor -> floor_sequence, publisher_key_hex and
    public_key_hex -> publisher_key)."""
    out = dict(answer)
    for spec, old in _SPEC_NAMES:
        if spec not in out and old in out:
            out[spec] = out[old]
    return out


def _head_of(data: Mapping[str, Any], what: str) -> int:
    return _int_field(data, "head_sequence", what, alias="head")


def _floor_of(data: Mapping[str, Any], what: str) -> int:
    return _int_field(data, "floor_sequence", what, alias="floor")


# --- Publisher -----------------------------------------------------------------------------------


class Publisher:
    """Publishes to `stream_id` as `owner`, signing messages with `publisher_key`.

    The head is read once (`sync`) and then advanced from each acknowledged publish, so a steady
    publisher makes one HTTP call per message. Not thread-safe: one Publisher per writer.
    """

    def __init__(
        self,
        api: StreamApi,
        owner: Account,
        stream_id: str,
        publisher_key: nacl.signing.SigningKey,
        *,
        timeout_s: float = 30.0,
    ) -> None:
        self.api = api
        self.owner = owner
        self.stream_id = stream_id
        self.timeout_s = timeout_s
        self._key = publisher_key
        self._key_id: int | None = None
        self._head: int | None = None
        # The last signed command sent; after a TIMEOUT resend it with `api.command` (idempotent).
        self.last_command: Command | None = None

    @property
    def head(self) -> int | None:
        """The head this publisher believes the stream has (None until `sync` or the first publish)."""
        return self._head

    @property
    def signing_key_id(self) -> int | None:
        """The schedule id of the publisher key (None until synced)."""
        return self._key_id

    @property
    def publisher_key(self) -> nacl.signing.SigningKey:
        """The key messages are signed with (secret: never print it)."""
        return self._key

    def sync(self) -> int:
        """Read the stream's head and current key id; returns the head.

        Raises UNAUTHORIZED when `owner` does not own the stream and INVALID_SIGNATURE when the
        publisher key is not the stream's current one, before anything is signed.
        """
        return self._sync()[0]

    def _sync(self) -> tuple[int, int]:
        info = self.api.get_head(self.stream_id)
        if info.get("owner") != self.owner.address:
            raise UnauthorizedError(
                f"stream {self.stream_id} is owned by {info.get('owner')}, not {self.owner.address}; "
                f"publish is owner-only, so sign with the owner's account (--account / --key-file)"
            )
        current = info.get("publisher_key", info.get("publisher_key_hex"))
        mine = bytes(self._key.verify_key).hex()
        key_id = _int_field(info, "signing_key_id", "get_head")
        if current != mine:
            raise InvalidSignatureError(
                f"this publisher key (public {mine[:16]}…) is not the current publisher key of stream "
                f"{self.stream_id} (signing key {key_id}, public {str(current)[:16]}…); load the key file "
                f"that holds key {key_id}"
            )
        head = _head_of(info, "get_head")
        self._key_id, self._head = key_id, head
        return head, key_id

    def publish(
        self,
        kind: str,
        payload: bytes,
        tags: Mapping[str, TagValue] | None = None,
        content_type: str = DEFAULT_CONTENT_TYPE,
        *,
        sequence: int | None = None,
    ) -> dict[str, Any]:
        """Sign a PLAINTEXT message for head + 1 and publish it; returns the writer's reply
        (``sequence``, ``head_sequence``, ``floor_sequence``; ``head``/``floor`` are their 0.1 names).

        `sequence` states the expected sequence explicitly instead of head + 1. On STALE_SEQUENCE
        the head is refreshed (from the writer's answer) and the error re-raised: the caller
        decides whether to publish again, re-signed for the new head. On TIMEOUT the head becomes
        unknown and is re-read on the next publish; `last_command` can be resent as it is.
        """
        head, key_id = self._head, self._key_id
        if head is None or key_id is None:
            head, key_id = self._sync()
        self.last_command = self.publish_command(head + 1 if sequence is None else sequence, key_id, kind, payload,
                                                 tags, content_type)
        try:
            reply = self.api.command(self.last_command, timeout_s=self.timeout_s)
        except StaleSequenceError as err:
            current = err.details.get("head")
            if isinstance(current, int) and not isinstance(current, bool):
                self._head = current
            else:
                self.sync()
            raise
        except (RequestTimeoutError, InvalidSignatureError):
            self._head = None
            raise
        self._head = _head_of(reply, "the publish reply")
        return reply

    def publish_command(self, sequence: int, signing_key_id: int, kind: str, payload: bytes,
                        tags: Mapping[str, TagValue] | None, content_type: str) -> Command:
        """The signed publish command of one PLAINTEXT message (a paid feed's publisher encrypts here)."""
        msg = sign_message(
            stream_id=self.stream_id,
            sequence=sequence,
            timestamp_unix_ms=time.time_ns() // 1_000_000,
            kind=kind,
            payload=payload,
            signing_key=self._key,
            content_type=content_type,
            tags=tags,
            signing_key_id=signing_key_id,
        )
        return self.owner.sign("publish", self.stream_id, msg.to_json_dict())

    def rotate_key(self, new_key: nacl.signing.SigningKey) -> dict[str, Any]:
        """Make `new_key` the stream's publisher key from head + 1; later publishes sign with it.

        Returns ``{"old_signing_key_id", "signing_key_id", "effective_sequence"}``. Store the new
        key before calling this: once acknowledged, only it can publish.
        """
        body: dict[str, Any] = {"new_key": bytes(new_key.verify_key)}
        if self._key_id is not None:
            # Signed, the key's id fixes its place in the key chain (docs/key-chain.md).
            body["signing_key_id"] = self._key_id + 1
        cmd = self.owner.sign("rotate_publisher_key", self.stream_id, body)
        self.last_command = cmd
        reply = self.api.command(cmd, timeout_s=self.timeout_s)
        self._key = new_key
        self._key_id = _int_field(reply, "signing_key_id", "the rotate reply")
        return reply

    def announce_key_epoch(self, key_epoch: int) -> dict[str, Any]:
        """CIP-7 ``announce_key_epoch`` (owner only): record that the stream's content keys move to
        `key_epoch` from the current block on (a ``KeyEpochRotated`` event; key epochs never go back).

        Returns ``{"key_epoch", "effective_block_height"}``. UNAUTHORIZED for anyone but the owner,
        INVALID_ARGUMENT for an epoch below the last one announced.
        """
        self.last_command = announce_key_epoch_command(self.owner, self.stream_id, key_epoch)
        return self.api.command(self.last_command, timeout_s=self.timeout_s)


def announce_key_epoch_command(owner: Account, stream_id: str, key_epoch: int) -> Command:
    """The owner's signed ``announce_key_epoch`` for `stream_id` (`announce_key_epoch` sends it)."""
    if isinstance(key_epoch, bool) or not isinstance(key_epoch, int) or not 0 <= key_epoch <= MAX_WIRE_UINT64:
        raise InvalidArgumentError(f"key_epoch must be an integer in 0..{MAX_WIRE_UINT64}, got {key_epoch!r}")
    return owner.sign("announce_key_epoch", stream_id, {"key_epoch": key_epoch})


def announce_key_epoch(api: StreamApi, owner: Account, stream_id: str, key_epoch: int, *,
                       timeout_s: float = 30.0) -> dict[str, Any]:
    """CIP-7 ``announce_key_epoch`` without a publisher key (owner only): the stream's content keys
    move to `key_epoch` from the current block on. Returns ``{"key_epoch", "effective_block_height"}``;
    UNAUTHORIZED for anyone but the owner, INVALID_ARGUMENT below the last epoch announced."""
    return api.command(announce_key_epoch_command(owner, stream_id, key_epoch), timeout_s=timeout_s)


# --- Subscriber ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Page:
    """One verified `get_since` page: new messages (ascending) and the stream's window after it."""

    stream_id: str
    messages: tuple[StreamMessage, ...]
    head_sequence: int
    floor_sequence: int
    next_cursor: int
    #: With ``Subscriber(decrypt=True)``: each message's plaintext (a PLAINTEXT payload as it is,
    #: a CIPHERTEXT one decrypted with its epoch key), in the order of `messages`; else empty.
    plaintexts: tuple[bytes, ...] = ()

    @property
    def head(self) -> int:
        """Deprecated 0.1 name of `head_sequence`."""
        return self.head_sequence

    @property
    def floor(self) -> int:
        """Deprecated 0.1 name of `floor_sequence`."""
        return self.floor_sequence


class EpochKeySource(Protocol):
    """Where a decrypting Subscriber gets epoch content keys (`client.paid.EpochKeyRing`)."""

    def content_key(self, stream_id: str, key_epoch: int) -> bytes: ...


class GapReplayer(Protocol):
    """What crosses a CURSOR_TOO_OLD by replaying the gap (`client.replay.ReplayClient`, which reads
    Kafka; the SDK core itself never imports a Kafka client)."""

    def recover_gap(self, subscriber: Subscriber, err: CursorTooOldError, max_payment_cby: int | None) -> Page:
        """The gap below the window as one verified page ending at the floor − 1."""
        ...


class Subscriber:
    """Reads `stream_id` from `cursor` (the last consumed sequence), verified and deduplicated.

    `filter` is the CIP-7 filter DSL (validated here: INVALID_FILTER); the API applies it. Every
    message is checked against the publisher key schedule (fetched once, refreshed when a
    message needs a newer key); one that does not verify raises INVALID_SIGNATURE and the cursor
    stays before its page. Each page must carry exactly the sequences it claims
    (`page_rules.check_page_sequences`): a gap, a reordering or a sequence outside the page is
    MALFORMED_RECORD and nothing of that page is delivered. CURSOR_TOO_OLD propagates: resume from
    its ``details["floor"] - 1``.

    The key schedule is trusted only after its key chain verifies (`key_chain.verify_key_chain`):
    every key must come with the owner's signed create or rotate command, so a forged rotation is
    refused here (INVALID_SIGNATURE naming the key) even if it reached the log or the API. The
    owner is `expected_owner` when given; otherwise the owner of the first verified chain is pinned,
    and a later chain of another owner is refused.

    `proof`: with a filter, ask every page with its completeness proof and check it
    (`page_proof.verify_page_proof`): the skipped sequences' signed headers must verify under the
    schedule and must not match the filter, and page plus proof must cover the page's range exactly.
    A page that fails raises (MALFORMED_RECORD or INVALID_SIGNATURE), delivers nothing, and leaves
    the cursor where it was. Without a filter a page skips nothing, so no proof is asked.

    `decrypt` (a paid feed): every delivered message's plaintext is put in `Page.plaintexts`, a
    CIPHERTEXT payload opened locally with its epoch key from `epoch_keys` — only after its
    signature verified. A key the account is not entitled to raises ENTITLEMENT_REQUIRED, an
    envelope that does not open DECRYPTION_FAILED; either way nothing of the page is delivered.

    `replay_on_cursor_too_old` (with `replay_client`, a `client.replay.ReplayClient` of the reading
    account): a cursor that fell out of the ring window is not an error. The subscriber sends the
    ready ICRC-77 replay request the CURSOR_TOO_OLD carries (with its filter, and
    `replay_max_payment_cby` as what it accepts to pay on a priced stream: without it a priced
    replay is PAYMENT_REQUIRED), reads the replayed, verified messages and returns them as one
    page ending at the floor − 1; the next page continues with get_since, so nothing is missed.
    """

    def __init__(
        self,
        api: StreamApi,
        stream_id: str,
        cursor: int = 0,
        filter: Mapping[str, Any] | None = None,
        *,
        proof: bool = False,
        expected_owner: str | None = None,
        decrypt: bool = False,
        epoch_keys: EpochKeySource | None = None,
        replay_on_cursor_too_old: bool = False,
        replay_max_payment_cby: int | None = None,
        replay_client: GapReplayer | None = None,
    ) -> None:
        if type(cursor) is not int or cursor < 0:
            raise InvalidArgumentError(f"cursor must be an integer ≥ 0, got {cursor!r}")
        if replay_on_cursor_too_old and replay_client is None:
            raise InvalidArgumentError("replay_on_cursor_too_old=True needs replay_client=ReplayClient(account, api, "
                                       "bootstrap): the replay is requested and read as your account")
        self.replay_on_cursor_too_old = replay_on_cursor_too_old
        self.replay_max_payment_cby = replay_max_payment_cby
        self._replay_client = replay_client
        if decrypt and epoch_keys is None:
            raise InvalidArgumentError("decrypt=True needs epoch_keys (an EpochKeyRing of the entitled account)")
        parse_filter(filter)
        self.decrypt = decrypt
        self._epoch_keys = epoch_keys
        self.api = api
        self.stream_id = stream_id
        self.filter = filter
        self.proof = proof
        self._cursor = cursor
        self._delivered_through = cursor
        self._schedule: KeySchedule | None = None
        self.stream_stats: StreamStats | None = None  # the counters of the last `stream`
        self._owner = None if expected_owner is None else require_address(expected_owner, "expected_owner")

    @property
    def owner(self) -> str | None:
        """The stream owner the key chain is checked against (None until one is expected or pinned)."""
        return self._owner

    @property
    def cursor(self) -> int:
        """The last sequence consumed (pass it back as `cursor` to resume)."""
        return self._cursor

    def key_schedule(self, *, refresh: bool = False) -> KeySchedule:
        """The stream's verified publisher key schedule, fetched once (or again with `refresh`).

        INVALID_SIGNATURE / MALFORMED_RECORD when its key chain does not verify from the owner's
        address (see the class docstring); nothing is trusted then, and the next call fetches again.
        """
        if self._schedule is None or refresh:
            self._schedule = None
            schedule = verify_key_chain(self.stream_id, self.api.key_schedule(self.stream_id), self._owner)
            self._owner = key_chain_owner(schedule)
            self._schedule = schedule
        return self._schedule

    def verify(self, msg: StreamMessage) -> None:
        """Raise INVALID_SIGNATURE unless `msg` belongs to this stream and verifies under its schedule."""
        if msg.stream_id != self.stream_id:
            raise InvalidSignatureError(
                f"the API returned a message of stream {msg.stream_id!r} while reading {self.stream_id!r}; "
                f"it is not part of this stream, so it was rejected"
            )
        if verify_with_schedule(msg, self.key_schedule()):
            return
        # A rotation after the schedule was fetched: the message needs the newer entry.
        if verify_with_schedule(msg, self.key_schedule(refresh=True)):
            return
        entry = self.key_schedule().key_at_sequence(msg.sequence)
        raise InvalidSignatureError(
            f"message {self.stream_id}#{msg.sequence} does not verify under signing key {entry.signing_key_id} "
            f"(in force from sequence {entry.effective_sequence}): it was altered or forged. It was not "
            f"delivered; report it to the stream's operator.",
            details={"stream_id": self.stream_id, "sequence": msg.sequence},
        )

    def poll_page(self, limit: int = 100, *, min_head: int | None = None, wait_ms: int | None = None) -> Page:
        """Fetch, verify and deduplicate the next page; advance the cursor past it.

        `min_head`/`wait_ms` make it a long poll (the API waits for that head). The cursor only
        moves when the whole page verified (and, with `proof` and a filter, its proof).
        """
        if type(limit) is not int or not MIN_GET_SINCE_LIMIT <= limit <= MAX_GET_SINCE_LIMIT:
            raise LimitExceededError(f"limit must be in {MIN_GET_SINCE_LIMIT}..{MAX_GET_SINCE_LIMIT}, got {limit!r}")
        proven = self.proof and self.filter is not None
        # Only a proving subscriber passes `proof`, so any StreamApi without it still serves the rest.
        asked: dict[str, Any] = {"proof": True} if proven else {}
        try:
            raw = self.api.get_since(
                self.stream_id, self._cursor, limit, filter=self.filter, min_head=min_head, wait_ms=wait_ms, **asked
            )
        except CursorTooOldError as err:
            if not self.replay_on_cursor_too_old or self._replay_client is None:
                raise
            return self._replayed(err, self._replay_client)
        items = raw.get("messages")
        if not isinstance(items, list):
            raise MalformedRecordError(f"get_since of {self.stream_id} answered without a 'messages' list")
        head = _head_of(raw, "get_since")
        next_cursor = raw.get("next_cursor")
        if type(next_cursor) is not int:
            raise MalformedRecordError(f"get_since of {self.stream_id} answered without an integer 'next_cursor'")
        received = [StreamMessage.from_json_dict(item) for item in items]
        for msg in received:
            self.verify(msg)
        if proven:
            verify_page_proof(self.stream_id, self._cursor, next_cursor, received, raw.get("proof"), self.filter,
                              self._verify_skipped)
        fresh: list[StreamMessage] = []
        last = self._delivered_through
        for msg in received:
            if msg.sequence == last or msg.sequence in range(1, self._delivered_through + 1):
                continue  # (stream_id, sequence) delivered already: a repeat, not a new message
            fresh.append(msg)
            last = msg.sequence
        check_page_sequences(self.stream_id, [m.sequence for m in fresh], cursor=self._cursor, limit=limit,
                             next_cursor=next_cursor, head=head, filtered=self.filter is not None)
        plaintexts = tuple(self.plaintext(m) for m in fresh) if self.decrypt else ()
        if fresh:
            self._delivered_through = fresh[-1].sequence
        self._cursor = max(self._cursor, next_cursor)
        return Page(self.stream_id, tuple(fresh), head, _floor_of(raw, "get_since"), self._cursor, plaintexts)

    def _replayed(self, err: CursorTooOldError, client: GapReplayer) -> Page:
        """The gap below the window, replayed (`ReplayClient.recover_gap`); the cursor moves past it."""
        page = client.recover_gap(self, err, self.replay_max_payment_cby)
        if page.messages:
            self._delivered_through = page.messages[-1].sequence
        self._cursor = max(self._cursor, page.next_cursor)
        return dataclasses.replace(page, next_cursor=self._cursor)

    def plaintext(self, msg: StreamMessage) -> bytes:
        """The payload of a verified `msg` in clear: decrypted locally when it is CIPHERTEXT."""
        if msg.payload_format != PayloadFormat.CIPHERTEXT or msg.key_epoch is None:
            return msg.payload_inline
        if self._epoch_keys is None:
            raise InvalidArgumentError("this Subscriber has no epoch_keys; create it with decrypt=True, epoch_keys=…")
        return decrypt_with_content_key(
            content_key=self._epoch_keys.content_key(self.stream_id, msg.key_epoch),
            stream_id=self.stream_id, key_epoch=msg.key_epoch, sequence=msg.sequence, kind=msg.kind,
            content_type=msg.content_type, envelope=msg.payload_inline)

    def _verify_skipped(self, entry: ProofEntry) -> bool:
        """A proof entry's signature against the schedule (refreshed once, as `verify` does)."""
        return schedule_check(self.key_schedule())(entry) or schedule_check(self.key_schedule(refresh=True))(entry)

    def advance_to(self, sequence: int) -> None:
        """Record that every message up to `sequence` was handed out (a push path delivered it)."""
        if sequence > self._cursor:
            self._cursor = sequence
        if sequence > self._delivered_through:
            self._delivered_through = sequence

    def poll(self, limit: int = 100) -> list[StreamMessage]:
        """The next verified messages after the cursor (at most `limit`, possibly none)."""
        return list(self.poll_page(limit).messages)

    def follow(
        self,
        *,
        limit: int = 100,
        wait_ms: int = DEFAULT_WAIT_MS,
        idle_timeout_s: float | None = None,
    ) -> Iterator[StreamMessage]:
        """Yield verified messages as they arrive, long-polling the API (``min_head = cursor + 1``).

        Runs until the caller stops iterating, or until no message arrived for `idle_timeout_s`.
        """
        last_activity = time.monotonic()
        while True:
            started = time.monotonic()
            page = self.poll_page(limit, min_head=self._cursor + 1, wait_ms=wait_ms)
            yield from page.messages
            now = time.monotonic()
            if page.messages:
                last_activity = now
                continue
            if idle_timeout_s is not None and now - last_activity >= idle_timeout_s:
                return
            if page.next_cursor >= page.head_sequence and now - started < wait_ms / 2000:
                # The API answered an unreached min_head early; do not spin on it.
                time.sleep(min(0.2, wait_ms / 1000))

    def stream(
        self,
        mode: str = "pull",
        source: PushSource | None = None,
        *,
        pull_interval_s: float = DEFAULT_PULL_INTERVAL_S,
        idle_timeout_s: float | None = None,
        limit: int = MAX_GET_SINCE_LIMIT,
        wait_ms: int = DEFAULT_WAIT_MS,
        poll_s: float = 0.2,
    ) -> Iterator[StreamMessage]:
        """Yield verified messages live in `mode`: ``pull``, ``push`` or ``push-with-pull-fallback``.

        ``pull`` is `follow`. The push modes read `source` (a `client.push.PushConsumer` or a
        `client.sse.SseSource`, which the caller creates and closes), verify every message with
        `verify`, deduplicate by (stream_id, sequence) and hand each out once, ascending.
        ``push-with-pull-fallback`` also catches up with get_since from the cursor at once, every
        `pull_interval_s`, and whenever a pushed message shows a gap below it (with a filter: the
        filtered get_since decides), so the application sees every message even when pushes stall
        or the delivery path dies. ``push`` hands out only what is pushed. Stops when the caller
        stops iterating, or after `idle_timeout_s` without a message; `stream_stats` counts what
        happened (docs/subscribing.md).
        """
        check_stream_args(mode, source, pull_interval_s)
        self.stream_stats = StreamStats()
        return run_stream(self, mode, source, limit=limit, wait_ms=wait_ms, pull_interval_s=pull_interval_s,
                          idle_timeout_s=idle_timeout_s, poll_s=poll_s, stats=self.stream_stats)
