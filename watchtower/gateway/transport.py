"""Request/reply over Kafka: produce a signed command, wait for its committed reply.

A command is *acknowledged* when its reply is visible to a ``read_committed`` consumer: the
worker writes the reply in the same transaction as the events, so an acknowledged write is a
durable one. If a worker dies mid-batch the command is still in the commands topic; the next
owner re-decides it and the reply arrives later, so callers simply wait (no resend needed).

One `CommandClient` serves a whole process (the gateway shares one between all its requests):
one idempotent producer batches the commands of concurrent callers (``linger.ms``), and one
thread reads the replies from the client's reply partition in batches and completes each
caller's future by correlation id.
"""

from __future__ import annotations

import logging
import random
import threading
import uuid
from concurrent.futures import Future, InvalidStateError
from typing import Any

from watchtower import tracing
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.signed_command import Command
from watchtower.schemas.wire import H_CORRELATION, H_REPLY_PARTITION, decode_reply, encode_command
from watchtower.topics.assigned_reader import AssignedReader
from watchtower.topics.catalogue import topic_name
from watchtower.topics.errors import BrokerError
from watchtower.topics.keyed_writer import KeyedWriter
from watchtower.topics.records import Record

log = logging.getLogger("watchtower.gateway.transport")
#: Most replies taken from the reader in one call.
REPLY_BATCH = 500


class CommandClient:
    """Thread-safe: many callers may ``submit`` concurrently; one thread reads replies."""

    def __init__(self, bootstrap: str, *, prefix: str | None = None, linger_ms: int = 2,
                 topic: str = "commands") -> None:
        """`linger_ms`: how long the producer gathers commands into one request (a service that
        sends hundreds a second trades a few ms for fewer broker requests). `topic`: the catalogue
        role commands go to (the ingestion service sends to its own lane, ``ingest-commands``)."""
        self.t_commands = topic_name(topic, prefix)
        self.t_replies = topic_name("replies", prefix)
        # The partitioner every client shares (`KeyedWriter`): a stream's commands reach the
        # partition, and so the worker, that owns the stream.
        self.producer = KeyedWriter(bootstrap, linger_ms=linger_ms)
        self.replies = AssignedReader(bootstrap, self.t_replies, group_prefix="wt-client", settings={"log_level": 3})
        try:
            # Spreading clients over reply partitions is load balancing, not security.
            self.reply_partition = random.choice(self.replies.partitions())  # noqa: S311
            # Start at the partition's current end, as an explicit offset: replies to commands sent
            # from now on come after it, and the reader is ready without waiting for a first fetch.
            # A just-created topic may have no leader yet: asked again meanwhile.
            high = self.replies.end(self.reply_partition, timeout_s=10.0, retry_s=30.0)
        except BaseException:
            self.replies.close()
            raise
        self.replies.assign({self.reply_partition: high})
        self._pending: dict[str, Future[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._reader = threading.Thread(target=self._read_replies, name="wt-replies", daemon=True)
        self._reader.start()

    def _read_replies(self) -> None:
        # A worker commits the replies of a whole batch in one transaction; take them in one call
        # (up to REPLY_BATCH) instead of one poll each, so a burst is handed out in one pass, and
        # a lone reply at once (`AssignedReader.fetch`: consume(n, timeout) would hold it for the timeout).
        while not self._closed.is_set():
            try:
                batch = self.replies.fetch(REPLY_BATCH, 0.1)
            except BrokerError as exc:  # the reader failed for good: no reply comes any more
                log.error("the reply reader of %s failed: %s", self.t_replies, exc)
                self._closed.wait(1.0)
                continue
            for record in batch:
                if isinstance(record, Record):
                    self._deliver(record.key, record.value)

    def _deliver(self, key: bytes | None, value: bytes | None) -> None:
        corr = (key or b"").decode(errors="replace")
        with self._lock:
            fut = self._pending.pop(corr, None)
        if fut is None or fut.done():
            # A reply nobody waits for any more (the caller gave up, or another client's):
            # expected, not an error.
            log.debug("dropping a reply nobody waits for (correlation %s)", corr)
            return
        try:
            fut.set_result(decode_reply(value))
        except WatchtowerError as err:
            fut.set_exception(err)

    def submit(self, cmd: Command, *, key: str | None = None, poll: bool = True) -> Future[dict[str, Any]]:
        """Send ``cmd``; the future resolves with the result dict or raises the spec error.

        A caller that stops waiting may cancel the future: its reply is then dropped quietly
        when it arrives (the command itself may still be applied; a retry of the same signed
        command is idempotent). BufferError when the producer's queue is full, `BrokerError`
        when the client refused the command (nothing was sent either way).
        """
        corr = uuid.uuid4().hex
        raw: Future[dict[str, Any]] = Future()
        result: Future[dict[str, Any]] = Future()

        def unwrap(f: Future[dict[str, Any]]) -> None:
            if result.done():  # cancelled by a caller that timed out: nothing to deliver
                return
            exc = f.exception()
            reply = None if exc is not None else f.result()
            try:
                if exc is not None:
                    result.set_exception(exc)
                elif reply is not None and reply.get("ok"):
                    result.set_result(reply.get("result", {}))
                else:
                    result.set_exception(WatchtowerError.from_dict((reply or {}).get("error", {})))
            except InvalidStateError:  # cancelled between the check and the set: same case
                log.debug("dropping the late reply to %s", corr)

        def forget(f: Future[dict[str, Any]]) -> None:
            if f.cancelled():
                with self._lock:
                    self._pending.pop(corr, None)

        raw.add_done_callback(unwrap)
        result.add_done_callback(forget)
        with self._lock:
            self._pending[corr] = raw
        # `poll`: a caller that sends many at once polls once for all of them (`poll`).
        self.producer.write(self.t_commands, key=(key or cmd.stream_id).encode(), value=encode_command(cmd),
                            headers=tracing.inject({H_CORRELATION: corr,
                                                    H_REPLY_PARTITION: str(self.reply_partition)}),
                            poll=poll)
        return result

    def poll(self) -> None:
        """Serve the producer's delivery reports (`submit` with ``poll=False`` leaves them to this)."""
        self.producer.poll()

    def call(self, cmd: Command, timeout: float = 30.0) -> dict[str, Any]:
        """Send and wait. Raises the spec error, or TimeoutError when no worker answered in time."""
        fut = self.submit(cmd)
        self.producer.flush(timeout)
        return fut.result(timeout)

    def flush(self, timeout: float = 30.0) -> None:
        self.producer.flush(timeout)

    def close(self) -> None:
        self.producer.flush(10)
        self._closed.set()
        self._reader.join(5)
        self.replies.close()

