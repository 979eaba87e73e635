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

from watchtower.client.http import ApiClient, ApiUnavailableError
from watchtower.ingest.aggregator import TransientError
from watchtower.ingest.view import IngestingStream
from watchtower.protocol.addresses import public_key_from_address
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

    def __init__(self, api: ApiClient, publisher: nacl.signing.SigningKey) -> None:
        self.api = api
        self.publisher = publisher
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
                msg = sign_message(stream_id=stream.stream_id, sequence=head + 1, timestamp_unix_ms=timestamp_ms,
                                   kind=payload.kind, payload=payload.payload, signing_key=self.publisher,
                                   content_type=payload.content_type,
                                   tags={**payload.tags, TICK_TAG: float(tick)}, signing_key_id=key_id)
                cmd = Command("publish", stream.stream_id, public_key_from_address(stream.owner), self._next_nonce(),
                              msg.to_json_dict(), msg.publisher_sig)
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
