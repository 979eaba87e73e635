"""The Python SDK over the HTTP API: `Publisher`, `Subscriber` and `create_feed`.

A `Publisher` is the optimistic-concurrency writer of one stream (DESIGN §3): it signs each
message for the sequence it expects (head + 1), and a mismatch comes back as STALE_SEQUENCE, never
as a silent renumbering. `create_feed` creates and lists a stream; `wait_until_visible` waits for
the read side to show an acknowledged write. The reading side, `Subscriber`, lives in
`client.subscriber` and is named here too: this module is the SDK's front door, and applications
import both from it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any

import nacl.signing

from watchtower.client.account import Account
from watchtower.client.stream_api import StreamApi, head_of, int_field
from watchtower.client.subscriber import Page, Subscriber
from watchtower.protocol.config import StreamConfig
from watchtower.protocol.constants import DEFAULT_CONTENT_TYPE, MAX_WIRE_UINT64
from watchtower.protocol.errors import (
    FeedNotFoundError,
    InvalidArgumentError,
    InvalidSignatureError,
    NotReadyError,
    RequestTimeoutError,
    StaleSequenceError,
    StreamNotFoundError,
    UnauthorizedError,
)
from watchtower.protocol.signed_command import Command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.message import TagValue


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
            if head_of(info, "get_head") >= min_head and info.get("signing_key_id", 0) >= signing_key_id:
                return info
        except (StreamNotFoundError, FeedNotFoundError, NotReadyError):
            pass
        if time.monotonic() >= deadline:
            raise RequestTimeoutError(
                f"the write to stream {stream_id} was acknowledged, but the read side has not shown it within "
                f"{timeout_s:g}s; it will appear once the projection workers catch up (check `watchtower up`)"
            )
        time.sleep(0.05)



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
        key_id = int_field(info, "signing_key_id", "get_head")
        if current != mine:
            raise InvalidSignatureError(
                f"this publisher key (public {mine[:16]}…) is not the current publisher key of stream "
                f"{self.stream_id} (signing key {key_id}, public {str(current)[:16]}…); load the key file "
                f"that holds key {key_id}"
            )
        head = head_of(info, "get_head")
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
        self._head = head_of(reply, "the publish reply")
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
        self._key_id = int_field(reply, "signing_key_id", "the rotate reply")
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


__all__ = [
    "Page",
    "Publisher",
    "Subscriber",
    "announce_key_epoch",
    "announce_key_epoch_command",
    "create_feed",
    "new_stream_id",
    "wait_until_visible",
]
