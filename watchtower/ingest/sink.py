"""The aggregator's edge to the stream actor: publishes and failure reports go through the normal
signed command path (the command gateway), so sequencing and every publish check stay where they
are.

A publish is signed by the ingestion publisher key, the key the owner delegated with an
owner-signed create or rotation (so the key chain a client verifies shows the delegation); the
command names the owner as its caller, as every publish does (docs/publish-auth.md: a publish is
authorised by its message signature). Each message carries the tag ``ingest_tick``, which is how a
restarted aggregator finds the last tick it published. A failure is ``report_ingest_failure``,
signed by the same key.
"""

from __future__ import annotations

import time
from typing import Any

import nacl.signing

from watchtower.client.account import Account
from watchtower.client.http import ApiClient, ApiUnavailableError
from watchtower.client.keymgr import KeyManagerClient
from watchtower.ingest.aggregator import SinkRefusedError, TransientError
from watchtower.ingest.view import IngestingStream
from watchtower.protocol.addresses import public_key_from_address
from watchtower.protocol.billing import key_epoch_at
from watchtower.protocol.enums import PayloadFormat
from watchtower.protocol.envelope import envelope_aad
from watchtower.protocol.errors import (
    InvalidArgumentError,
    NotReadyError,
    RequestTimeoutError,
    StaleSequenceError,
    WatchtowerError,
)
from watchtower.protocol.ingestion import IngestReason
from watchtower.protocol.ingestion_transform import Payload
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.signing import sign_message

TICK_TAG = "ingest_tick"
_TRANSIENT = (ApiUnavailableError, NotReadyError, RequestTimeoutError)


class ApiSink:
    """Publishes and reports through the HTTP command gateway (`ApiClient`)."""

    def __init__(self, api: ApiClient, publisher: nacl.signing.SigningKey,
                 keymgr: KeyManagerClient | None = None) -> None:
        self.api = api
        self.publisher = publisher
        self.keymgr = keymgr  # paid streams: stream_encrypt, as the stream's active publisher key
        self.identity = Account(publisher)
        self.public_hex = bytes(publisher.verify_key).hex()
        self.heads: dict[str, tuple[int, int]] = {}
        self.nonce = 0

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _TRANSIENT as exc:
            raise TransientError(exc.message) from None
        except OSError as exc:
            raise TransientError(str(exc)) from None

    def _sync(self, stream_id: str) -> tuple[int, int]:
        info = self._call(self.api.get_head, stream_id)
        head = (int(info["head_sequence"]), int(info["signing_key_id"]))
        if info.get("publisher_key") != self.public_hex:
            raise InvalidArgumentError(
                f"stream {stream_id!r}'s current publisher key is not the ingestion key {self.public_hex[:16]}…; the "
                "owner delegates ingestion with rotate_publisher_key to that key")
        self.heads[stream_id] = head
        return head

    def last_ingested_tick(self, stream: IngestingStream) -> int:
        info = self._call(self.api.get_head, stream.stream_id)
        head = int(info["head_sequence"])
        if head == 0:
            return 0
        page = self._call(self.api.get_since, stream.stream_id, head - 1, 1)
        messages = page.get("messages") or []
        tags = messages[-1].get("tags", {}) if messages else {}
        tick = tags.get(TICK_TAG)
        return int(tick) if isinstance(tick, int | float) and not isinstance(tick, bool) else 0

    def _next_nonce(self) -> int:
        self.nonce = max(self.nonce + 1, time.time_ns() // 1000)
        return self.nonce

    def publish(self, stream: IngestingStream, tick: int, timestamp_ms: int, payloads: tuple[Payload, ...]) -> None:
        for payload in payloads:
            for attempt in range(2):
                head, key_id = self.heads.get(stream.stream_id) or self._sync(stream.stream_id)
                body = self._message(stream, head + 1, key_id, tick, timestamp_ms, payload)
                cmd = Command("publish", stream.stream_id, public_key_from_address(stream.owner), self._next_nonce(),
                              body, bytes.fromhex(body["publisher_sig_hex"]))
                try:
                    reply = self._call(self.api.command, cmd)
                except StaleSequenceError:
                    self.heads.pop(stream.stream_id, None)
                    if attempt:
                        raise
                    continue
                except WatchtowerError:
                    self.heads.pop(stream.stream_id, None)
                    raise
                except TransientError:
                    self.heads.pop(stream.stream_id, None)  # it may have landed: re-read before the next one
                    raise
                self.heads[stream.stream_id] = (int(reply["head_sequence"]), key_id)
                break

    def _message(self, stream: IngestingStream, sequence: int, key_id: int, tick: int, timestamp_ms: int,
                 payload: Payload) -> dict[str, Any]:
        """The publish body: a PLAINTEXT message, or on a paid stream the CIPHERTEXT that
        stream_encrypt sealed for the tick's key epoch, with the key manager's receipt."""
        tags = {**payload.tags, TICK_TAG: float(tick)}
        if not stream.paid:
            return sign_message(stream_id=stream.stream_id, sequence=sequence, timestamp_unix_ms=timestamp_ms,
                                kind=payload.kind, payload=payload.payload, signing_key=self.publisher,
                                content_type=payload.content_type, tags=tags, signing_key_id=key_id).to_json_dict()
        if self.keymgr is None:
            raise SinkRefusedError(IngestReason.ENCRYPT_REFUSED, "no key manager is configured (WATCHTOWER_KEYMGR), "
                                                            "and a PLATFORM_MANAGED stream publishes ciphertext only")
        epoch = key_epoch_at(timestamp_ms, stream.key_epoch_blocks)
        aad = envelope_aad(stream_id=stream.stream_id, sequence=sequence, key_epoch=epoch, kind=payload.kind,
                           content_type=payload.content_type)
        try:
            sealed = self._call(self.keymgr.encrypt, self.identity, stream.stream_id, key_epoch=epoch, aad=aad,
                                plaintext=payload.payload)
        except WatchtowerError as exc:
            raise SinkRefusedError(IngestReason.ENCRYPT_REFUSED, f"stream_encrypt: {exc.code}: {exc.message}") from None
        msg = sign_message(stream_id=stream.stream_id, sequence=sequence, timestamp_unix_ms=timestamp_ms,
                           kind=payload.kind, payload=sealed.envelope, signing_key=self.publisher,
                           content_type=payload.content_type, tags=tags, payload_format=PayloadFormat.CIPHERTEXT,
                           key_epoch=sealed.key_epoch, signing_key_id=key_id)
        return {**msg.to_json_dict(), "keymgr_receipt": sealed.keymgr_receipt}

    def report(self, stream: IngestingStream, first: int, last: int, reason: IngestReason, detail: str,
               timestamp_ms: int) -> None:
        cmd = sign_command(self.publisher, "report_ingest_failure", stream.stream_id, self._next_nonce(), {
            "reason": str(reason), "timestamp_unix_ms": timestamp_ms, "first_tick": first, "last_tick": last,
            "detail": detail})
        try:
            self._call(self.api.command, cmd)
        except InvalidArgumentError as exc:
            if "last_failed_tick" not in exc.details:
                raise
            # Already recorded (a restarted aggregator reporting again): nothing to do.
