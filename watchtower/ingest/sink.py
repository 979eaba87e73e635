"""The aggregator's edge to the stream actor: publishes and failure reports are signed commands on
``ingest.commands`` (the ingestion lane, which the stream workers serve after ``commands``),
produced by the aggregator's own Kafka client (`CommandClient`: one idempotent
producer batching every stream's commands, one reader of its reply partition), so sequencing and
every publish check stay where they are, and a tick costs no HTTP round trip.

A publish is signed by the ingestion publisher key, the key the owner delegated with an
owner-signed create or rotation (so the key chain a client verifies shows the delegation); the
command names the owner as its caller, as every publish does (docs/publish-auth.md: a publish is
authorised by its message signature). Each message is stamped with its tick's block start and
carries the tag ``ingest_tick``. A failure is ``report_ingest_failure``, signed by the same key.

Heads come from the replies, and where none is known yet from the aggregator's fold of ``events``
(`IngestionView`): no read of the API. A publish refused with STALE_SEQUENCE means the head moved
under us (a command of a previous aggregator landed, or the fold lags): `HeadMovedError` tells
the aggregator to wait until its fold has read that far and to decide the tick again from the log.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Mapping
from typing import Any, Final, Protocol

import nacl.signing

from watchtower.http.api_client import ApiUnavailableError
from watchtower.http.keymgr_client import KeyManagerApi
from watchtower.ingest.sink_contract import HeadMovedError, SinkRefusedError, TransientError
from watchtower.ingest.view import IngestingStream, IngestionView
from watchtower.protocol.addresses import public_key_from_address
from watchtower.protocol.confidential.envelope import envelope_aad
from watchtower.protocol.enums import PayloadFormat
from watchtower.protocol.errors import (
    InvalidArgumentError,
    NotReadyError,
    RequestTimeoutError,
    StaleSequenceError,
    WatchtowerError,
)
from watchtower.protocol.ingestion import IngestReason
from watchtower.protocol.ingestion.transform import Payload
from watchtower.protocol.ledger.billing import key_epoch_at
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.signing import sign_message

TICK_TAG: Final = "ingest_tick"
REPLY_TIMEOUT_S: Final = 30.0
"""How long a publish or report waits for the worker's reply before the tick is tried again."""
PAID_THREADS: Final = 16
"""Paid streams' publishes in flight at once (each waits for the key manager's stream_encrypt)."""
_TRANSIENT = (NotReadyError, RequestTimeoutError)


def _cancel_all(futures: list[concurrent.futures.Future[dict[str, Any]]]) -> None:
    # The aggregator gave up waiting: the transport forgets the replies (they may still come).
    for future in futures:
        future.cancel()


class _Caller:
    """The ingestion publisher key as the key manager's caller: each request is a command signed by
    it with the next microsecond nonce, ``max(last + 1, time_ns() // 1000)``."""

    def __init__(self, key: nacl.signing.SigningKey) -> None:
        self.key = key
        self.last = 0
        self._lock = threading.Lock()

    def sign(self, method: str, stream_id: str, body: Mapping[str, Any], nonce: int | None = None) -> Command:
        if nonce is None:
            with self._lock:
                self.last = nonce = max(self.last + 1, time.time_ns() // 1000)
        return sign_command(self.key, method, stream_id, nonce, body)


class Commands(Protocol):
    """What the sink needs of the command transport (`gateway.transport.CommandClient`)."""

    def submit(self, cmd: Command, *, key: str | None = None,
               poll: bool = True) -> concurrent.futures.Future[dict[str, Any]]: ...


class KafkaSink:
    """Publishes and reports as signed commands on the ingestion lane (see the module docstring).

    Thread-safe for different streams at once; the aggregator drives each stream from one thread
    at a time, in tick order."""

    def __init__(self, commands: Commands, view: IngestionView, publisher: nacl.signing.SigningKey,
                 keymgr: KeyManagerApi | None = None, *, reply_timeout_s: float = REPLY_TIMEOUT_S) -> None:
        self.commands = commands
        self.view = view
        self.publisher = publisher
        self.keymgr = keymgr  # paid streams: stream_encrypt, as the stream's active publisher key
        self.identity = _Caller(publisher)  # the key manager's caller: the same key, its own nonces
        self.public_key = bytes(publisher.verify_key)
        self.reply_timeout_s = reply_timeout_s
        self.heads: dict[str, tuple[int, int]] = {}
        self.nonce = 0
        self._nonce_lock = threading.Lock()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=PAID_THREADS, thread_name_prefix="ingest-paid")

    def _send(self, cmd: Command) -> dict[str, Any]:
        future = self.commands.submit(cmd)
        try:
            return future.result(self.reply_timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TransientError(f"no reply to {cmd.method} on {cmd.stream_id} in {self.reply_timeout_s:g} s "
                                 "(is a stream worker running?)") from None
        except _TRANSIENT as exc:
            raise TransientError(exc.message) from None
        except OSError as exc:
            raise TransientError(str(exc)) from None

    def _head(self, stream_id: str) -> tuple[int, int]:
        known = self.heads.get(stream_id)
        if known is not None:
            return known
        folded = self.view.head(stream_id)
        if folded is None:
            raise TransientError(f"stream {stream_id} is not in the events fold yet")
        head, key_id, key = folded
        if key != self.public_key:
            raise InvalidArgumentError(
                f"stream {stream_id!r}'s current publisher key is not the ingestion key {self.public_key.hex()[:16]}…; "
                "the owner delegates ingestion with rotate_publisher_key to that key")
        return head, key_id

    def forget_head(self, stream_id: str) -> None:
        self.heads.pop(stream_id, None)

    def submit_publish(self, stream: IngestingStream, tick: int, timestamp_ms: int,
                       payloads: tuple[Payload, ...]) -> concurrent.futures.Future[None]:
        """`publish` without waiting: a future of its outcome (the same exceptions). An OPEN stream's
        messages are signed and sent at once, head + 1 onwards, in one go; a paid stream's go
        through the key manager first, on a thread of `pool`."""
        if stream.paid:
            return self.pool.submit(self.publish, stream, tick, timestamp_ms, payloads)
        out: concurrent.futures.Future[None] = concurrent.futures.Future()
        sid = stream.stream_id
        try:
            head, key_id = self._head(sid)
            commands = []
            for i, payload in enumerate(payloads, start=1):
                body = self._message(stream, head + i, key_id, tick, timestamp_ms, payload)
                commands.append(Command("publish", sid, public_key_from_address(stream.owner), self._next_nonce(),
                                        body, bytes.fromhex(body["publisher_sig_hex"])))
        except Exception as exc:  # before anything was sent
            out.set_exception(exc)
            return out
        replies = [self.commands.submit(cmd, poll=False) for cmd in commands]
        left = [len(replies)]
        lock = threading.Lock()

        def answered(_: concurrent.futures.Future[dict[str, Any]]) -> None:
            with lock:
                left[0] -= 1
                if left[0]:
                    return
            # Every answer is in (this runs on the reply reader's thread: keep it short).
            if out.done():
                return  # the aggregator gave up waiting (cancelled)
            for reply in replies:
                exc = reply.exception()
                if exc is None:
                    continue
                self.heads.pop(sid, None)
                if isinstance(exc, StaleSequenceError):
                    moved = exc.details.get("head") if isinstance(exc.details, dict) else None
                    exc = HeadMovedError(int(moved) if isinstance(moved, int) else head + 1)
                elif isinstance(exc, _TRANSIENT):
                    exc = TransientError(exc.message)
                out.set_exception(exc)
                return
            self.heads[sid] = (int(replies[-1].result()["head_sequence"]), key_id)
            out.set_result(None)

        for reply in replies:
            reply.add_done_callback(answered)
        out.add_done_callback(lambda f: _cancel_all(replies) if f.cancelled() else None)
        return out

    def submit_report(self, stream: IngestingStream, first: int, last: int, reason: IngestReason, detail: str,
                      timestamp_ms: int) -> concurrent.futures.Future[None]:
        """`report` without waiting: a future of its outcome (the same exceptions)."""
        cmd = sign_command(self.publisher, "report_ingest_failure", stream.stream_id, self._next_nonce(), {
            "reason": str(reason), "timestamp_unix_ms": timestamp_ms, "first_tick": first, "last_tick": last,
            "detail": detail})
        out: concurrent.futures.Future[None] = concurrent.futures.Future()

        def answered(reply: concurrent.futures.Future[dict[str, Any]]) -> None:
            if out.done():
                return  # the aggregator gave up waiting (cancelled)
            exc = reply.exception()
            if isinstance(exc, InvalidArgumentError) and "last_failed_tick" in exc.details:
                exc = None  # already recorded (a restarted aggregator reporting again)
            elif isinstance(exc, _TRANSIENT):
                exc = TransientError(exc.message)
            if exc is None:
                out.set_result(None)
            else:
                out.set_exception(exc)

        reply = self.commands.submit(cmd, poll=False)
        reply.add_done_callback(answered)
        out.add_done_callback(lambda f: reply.cancel() if f.cancelled() else None)
        return out

    def last_ingested_tick(self, stream: IngestingStream) -> int:
        """The tick the stream's newest message finished, as far as the events fold has read."""
        return self.view.last_published_tick.get(stream.stream_id, 0)

    def _next_nonce(self) -> int:
        with self._nonce_lock:
            self.nonce = max(self.nonce + 1, time.time_ns() // 1000)
            return self.nonce

    def publish(self, stream: IngestingStream, tick: int, timestamp_ms: int, payloads: tuple[Payload, ...]) -> None:
        sid = stream.stream_id
        for payload in payloads:
            head, key_id = self._head(sid)
            body = self._message(stream, head + 1, key_id, tick, timestamp_ms, payload)
            cmd = Command("publish", sid, public_key_from_address(stream.owner), self._next_nonce(),
                          body, bytes.fromhex(body["publisher_sig_hex"]))
            try:
                reply = self._send(cmd)
            except StaleSequenceError as exc:
                self.heads.pop(sid, None)
                moved = exc.details.get("head") if isinstance(exc.details, dict) else None
                raise HeadMovedError(int(moved) if isinstance(moved, int) else head + 1) from None
            except (WatchtowerError, TransientError):
                self.heads.pop(sid, None)  # it may have landed: the next attempt starts from the log
                raise
            self.heads[sid] = (int(reply["head_sequence"]), key_id)

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
            sealed = self._encrypt(self.keymgr.encrypt, self.identity, stream.stream_id, key_epoch=epoch, aad=aad,
                                plaintext=payload.payload)
        except WatchtowerError as exc:
            raise SinkRefusedError(IngestReason.ENCRYPT_REFUSED, f"stream_encrypt: {exc.code}: {exc.message}") from None
        msg = sign_message(stream_id=stream.stream_id, sequence=sequence, timestamp_unix_ms=timestamp_ms,
                           kind=payload.kind, payload=sealed.envelope, signing_key=self.publisher,
                           content_type=payload.content_type, tags=tags, payload_format=PayloadFormat.CIPHERTEXT,
                           key_epoch=sealed.key_epoch, signing_key_id=key_id)
        return {**msg.to_json_dict(), "keymgr_receipt": sealed.keymgr_receipt}

    @staticmethod
    def _encrypt(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ApiUnavailableError, *_TRANSIENT) as exc:
            raise TransientError(exc.message) from None
        except OSError as exc:
            raise TransientError(str(exc)) from None

    def report(self, stream: IngestingStream, first: int, last: int, reason: IngestReason, detail: str,
               timestamp_ms: int) -> None:
        cmd = sign_command(self.publisher, "report_ingest_failure", stream.stream_id, self._next_nonce(), {
            "reason": str(reason), "timestamp_unix_ms": timestamp_ms, "first_tick": first, "last_tick": last,
            "detail": detail})
        try:
            self._send(cmd)
        except InvalidArgumentError as exc:
            if "last_failed_tick" not in exc.details:
                raise
            # Already recorded (a restarted aggregator reporting again): nothing to do.
