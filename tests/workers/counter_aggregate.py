"""Two toy aggregates that exist only in the tests: a counter, and a total it forwards to.

They prove the host contract (:mod:`watchtower.workers.aggregate`): registered next to the stream
actor and the registry, with no change to the host, they get transactions, fencing, request/reply,
forwards, quarantine and snapshots. Their records have their own byte formats (a 4-byte tag and
JSON), so routing by ``decode_*`` is exercised too.

Run as a script, this module is a worker process hosting all four aggregates:
``python counter_aggregate.py BOOTSTRAP WORKER_ID PREFIX``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import cbor2

from watchtower.protocol.errors import MalformedRecordError, UnauthorizedError
from watchtower.workers.aggregate import Context, Forward, Outcome
from watchtower.workers.aggregates import default_aggregates

COUNTER_COMMAND, COUNTER_EVENT = b"CTR1", b"CTE1"
TOTAL_FORWARD, TOTAL_EVENT = b"TOT1", b"TTE1"
TOTAL_KEY = "total"


class Add(NamedTuple):
    counter: str
    add: int
    total: bool = False
    die_once: str | None = None  # a path: the worker kills itself (kill -9) the first time
    pause_ms: int = 0  # a slow decision: the worker sleeps this long deciding it


class Added(NamedTuple):
    key: str
    add: int
    value: int


def counter_command(counter: str, add: int, *, total: bool = False, die_once: str | None = None,
                    pause_ms: int = 0) -> bytes:
    return COUNTER_COMMAND + json.dumps(Add(counter, add, total, die_once, pause_ms)._asdict()).encode()


def _load(value: bytes | None, tag: bytes, what: str) -> dict[str, Any]:
    if not value or not value.startswith(tag):
        raise MalformedRecordError(f"not a {what}")
    try:
        doc = json.loads(value[len(tag):])
    except ValueError:
        raise MalformedRecordError(f"a {what} must be JSON after its tag") from None
    if not isinstance(doc, dict):
        raise MalformedRecordError(f"a {what} is a JSON object")
    return doc


def _snapshot(states: Mapping[str, Any]) -> bytes:
    return bytes(cbor2.dumps({"v": 1, "values": dict(states)}, canonical=True))


def _unsnapshot(data: bytes) -> dict[str, Any]:
    doc = cbor2.loads(data)
    if not isinstance(doc, dict) or doc.get("v") != 1 or not isinstance(doc.get("values"), dict):
        raise MalformedRecordError("not a counter snapshot")
    return {str(k): int(v) for k, v in doc["values"].items()}


class _Summing:
    """What the counter and the total share: an int state, Added events, CBOR snapshots."""

    name = ""
    event_tag = b""

    def initial(self, key: str) -> int:  # noqa: ARG002
        return 0

    def evolve(self, state: int, event: Added) -> int:
        if event.value != state + event.add:
            raise ValueError(f"{event.key} is {state}; adding {event.add} does not make {event.value}")
        return event.value

    def encode_event(self, event: Added) -> bytes:
        return self.event_tag + json.dumps(event._asdict()).encode()

    def event_decoder(self, value: bytes | None) -> Added:
        doc = _load(value, self.event_tag, f"{self.name} event")
        return Added(str(doc["key"]), int(doc["add"]), int(doc["value"]))

    def owns_event(self, event: Added) -> bool:  # noqa: ARG002 - event_decoder already checked the tag
        return True

    def event_key(self, event: Added) -> str:
        return event.key

    def check_event(self, event: Added, now_block_height: int | None) -> None:
        pass

    def encode_snapshot(self, states: Mapping[str, Any]) -> bytes:
        return _snapshot(states)

    def decode_snapshot(self, data: bytes) -> dict[str, Any]:
        return _unsnapshot(data)


class CounterAggregate(_Summing):
    """Counters by name; ``add`` replies the new value, or (``total``) forwards to the total, which replies."""

    name = "counter"
    event_tag = COUNTER_EVENT

    def command_decoder(self, value: bytes | None) -> dict[str, Any]:
        return _load(value, COUNTER_COMMAND, "counter command")

    def accept_command(self, doc: dict[str, Any], *, internal: bool) -> Add:
        if internal:
            raise UnauthorizedError("counter commands come from clients, on the commands topic")
        return Add(str(doc["counter"]), int(doc["add"]), bool(doc.get("total")), doc.get("die_once"),
                   int(doc.get("pause_ms", 0)))

    def key(self, command: Add) -> str:
        return command.counter

    def decide(self, state: int, command: Add, ctx: Context) -> Outcome:  # noqa: ARG002
        if command.die_once and not Path(command.die_once).exists():
            Path(command.die_once).touch()
            os.kill(os.getpid(), signal.SIGKILL)  # mid-batch, with earlier commands already produced
        if command.pause_ms:
            time.sleep(command.pause_ms / 1000)
        event = Added(command.counter, command.add, state + command.add)
        if command.total:
            forward = TOTAL_FORWARD + json.dumps({"add": command.add}).encode()
            return Outcome([event], None, forwards=[Forward(TOTAL_KEY, forward)])
        return Outcome([event], {"value": event.value})


class TotalAggregate(_Summing):
    """One total, fed only by the counter's forwards on ``internal``; it answers the original caller."""

    name = "total"
    event_tag = TOTAL_EVENT

    def command_decoder(self, value: bytes | None) -> dict[str, Any]:
        return _load(value, TOTAL_FORWARD, "total forward")

    def accept_command(self, doc: dict[str, Any], *, internal: bool) -> int:
        if not internal:
            raise UnauthorizedError("totals are forwarded by workers only")
        return int(doc["add"])

    def key(self, command: int) -> str:  # noqa: ARG002
        return TOTAL_KEY

    def decide(self, state: int, command: int, ctx: Context) -> Outcome:  # noqa: ARG002
        return Outcome([Added(TOTAL_KEY, command, state + command)], {"total": state + command})


def main(argv: list[str]) -> None:
    from watchtower.workers.command_processor import CommandProcessor
    from watchtower.workers.snapshots import SnapshotPolicy

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    bootstrap, worker_id, prefix = argv
    every = int(os.environ.get("COUNTER_SNAPSHOT_EVERY", "20000"))
    proc = CommandProcessor(bootstrap, worker_id, prefix=prefix,
                            aggregates=[*default_aggregates(), CounterAggregate(), TotalAggregate()],
                            snapshots=SnapshotPolicy(every_events=every))
    signal.signal(signal.SIGTERM, lambda *_: proc.stop())
    proc.run()


if __name__ == "__main__":
    main(sys.argv[1:])
