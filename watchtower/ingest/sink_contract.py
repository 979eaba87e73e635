"""What the aggregator asks of its sink, and how a sink answers.

The aggregator decides each tick; a `Sink` carries the decision to the stream actor (the Kafka
command client in `sink` is the deployed one; tests use fakes). A publish or report in flight is a
`Flight`, its outcome a future: success, or one of the errors below, which tell the aggregator what
to do with the tick: `TransientError` keep it and try again, `HeadMovedError` wait until its fold of
``events`` has read up to the head the sink saw, then decide again from the log, and
`SinkRefusedError` report it as failed with the given reason. Any other error is a bug in the sink.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future
from typing import Any, Protocol

from watchtower.ingest.view import IngestingStream
from watchtower.protocol.ingestion import IngestReason
from watchtower.protocol.ingestion.records import IngestTask
from watchtower.protocol.ingestion.transform import Payload


class TransientError(Exception):
    """The sink could not act now (no reply in time, key manager down): keep the tick and try again."""


class HeadMovedError(TransientError):
    """The stream's head is not where the sink thought (STALE_SEQUENCE): a command sent earlier,
    perhaps by a previous aggregator, landed. The tick is decided again once the events fold has
    read up to `head`, from what the log then says was finished."""

    def __init__(self, head: int) -> None:
        super().__init__(f"the stream's head moved to {head}; waiting for the events fold to read it")
        self.head = head


class SinkRefusedError(Exception):
    """The sink refused for good before publishing (e.g. stream_encrypt refused): an IngestFailed `reason`."""

    def __init__(self, reason: IngestReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class Sink(Protocol):
    """Where decisions go: the stream actor, through the command path."""

    def last_ingested_tick(self, stream: IngestingStream) -> int: ...

    def publish(self, stream: IngestingStream, tick: int, timestamp_ms: int, payloads: tuple[Payload, ...]) -> None: ...

    def report(self, stream: IngestingStream, first: int, last: int, reason: IngestReason, detail: str,
               timestamp_ms: int) -> None: ...

    def forget_head(self, stream_id: str) -> None:
        """Drop what the sink believes the stream's head is (a command may have landed unseen)."""


@dataclasses.dataclass(slots=True)
class Flight:
    """A stream's publish or report on its way: at most one per stream."""

    stream: IngestingStream
    task: IngestTask
    kind: str  # "publish" or "report"
    future: Future[None]
    started: float  # monotonic
    reason: IngestReason | None = None  # a report's
    answered: float | None = None
    """When its answer came (monotonic; set by the future's callback): its round trip, for the window."""


def submitted(sink: Sink, kind: str, *args: Any) -> Future[None]:
    """The sink's `submit_publish`/`submit_report` when it has them; else its blocking
    `publish`/`report` called now, its outcome in a finished future."""
    submit = getattr(sink, f"submit_{kind}", None)
    if submit is not None:
        return submit(*args)
    future: Future[None] = Future()
    try:
        getattr(sink, kind)(*args)
    except Exception as exc:
        future.set_exception(exc)
    else:
        future.set_result(None)
    return future


__all__ = ["Flight", "HeadMovedError", "Sink", "SinkRefusedError", "TransientError", "submitted"]
