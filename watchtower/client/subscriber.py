"""The SDK's reader: `Subscriber`, which reads a stream verified, deduplicated and in order.

A `Subscriber` pulls `get_since` pages over the HTTP API, verifies every message against the
stream's publisher key schedule (trusted only once its key chain verifies from the owner),
deduplicates by (stream_id, sequence) and keeps its cursor: a page that fails any check delivers
nothing and leaves the cursor where it was. It can also decrypt a paid feed's payloads with the
account's epoch keys, cross a CURSOR_TOO_OLD by replaying the gap, and take pushes
(`client.stream_modes`). It never imports a Kafka client: replay and push come in as objects.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from watchtower.client.stream_api import StreamApi, floor_of, head_of
from watchtower.client.stream_modes import PushSource, StreamStats, check_stream_args, run_stream
from watchtower.protocol.addresses import require_address
from watchtower.protocol.confidential.envelope import decrypt_with_content_key
from watchtower.protocol.constants import MAX_GET_SINCE_LIMIT, MIN_GET_SINCE_LIMIT
from watchtower.protocol.enums import PayloadFormat
from watchtower.protocol.errors import (
    CursorTooOldError,
    InvalidArgumentError,
    InvalidSignatureError,
    LimitExceededError,
    MalformedRecordError,
)
from watchtower.protocol.page.proof import ProofEntry, schedule_check, verify_page_proof
from watchtower.protocol.page.rules import check_page_sequences
from watchtower.protocol.signing import verify_with_schedule
from watchtower.protocol.stream.filters import parse_filter
from watchtower.protocol.stream.key_chain import key_chain_owner, verify_key_chain
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage

DEFAULT_WAIT_MS = 2000
#: How often `Subscriber.stream` in push-with-pull-fallback mode pulls, pushes or not.
DEFAULT_PULL_INTERVAL_S = 5.0


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
        head = head_of(raw, "get_since")
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
        return Page(self.stream_id, tuple(fresh), head, floor_of(raw, "get_since"), self._cursor, plaintexts)

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
