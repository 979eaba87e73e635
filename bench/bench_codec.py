"""Micro-benchmark of the record codec on the worker's hot path, before and after, in one run.

    .venv/bin/python bench/bench_codec.py [--seconds 1] [--batch 200] [--json]

Records (what a worker handles per publish): a signed publish command of a 512-byte message
(decoded on the commands topic), its StreamMessagePublished event (encoded by the writer, decoded
by every fold) and its reply. Cases, each beside its baselines:

- ``before`` (commands only): the JSON envelope the commands codec replaced
  (``json.dumps({"v": 1, ...})`` / ``json.loads`` + ``Command.from_dict``), reproduced here;
- ``after``: `watchtower.schemas.wire` (msgspec JSON for commands and replies, framed Avro with
  fastavro's schemaless reader/writer and cached parsed schemas for events);
- ``raw json`` / ``raw avro``: ``json.dumps``/``json.loads`` of the same dict, and fastavro's
  schemaless write/read of the same Avro record alone (no Event, no validation): the floors.

Timing: batches of `--batch`, alternated between cases so all see the same machine load; per-record
figures are batch time / batch size, median and p99 over batches. A script, not a test.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import fastavro
import nacl.signing

from watchtower.protocol.signed_command import Command, sign_command, to_tagged_json
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream import state as stream_state
from watchtower.protocol.stream.actor import StreamState, decide
from watchtower.protocol.stream.state import Event
from watchtower.schemas import codec, events
from watchtower.schemas.wire import (
    decode_command,
    decode_event,
    decode_reply,
    encode_command,
    encode_event,
    encode_reply,
)

OWNER = nacl.signing.SigningKey(b"\x01" * 32)
PUBLISHER = nacl.signing.SigningKey(b"\x02" * 32)
SID = "bench-stream"


@functools.cache
def records() -> tuple[Command, Event, dict[str, Any]]:
    """A signed publish command, its StreamMessagePublished event and its reply."""
    create = sign_command(OWNER, "create_stream", SID, 1, {"publisher_key": bytes(PUBLISHER.verify_key)})
    state = StreamState.initial(SID)
    for event in decide(state, create, block_height=10).events:
        state = stream_state.evolve(state, event)
    message = sign_message(stream_id=SID, sequence=1, timestamp_unix_ms=1_700_000_000_000, kind="price_batch",
                           payload=b'{"p":"' + b"x" * 504 + b'"}', signing_key=PUBLISHER,
                           tags={"symbol": "BTC", "venue": "x", "px": 1.5})
    publish = sign_command(OWNER, "publish", SID, 2, message.to_json_dict())
    decision = decide(state, publish, block_height=11)
    return publish, decision.events[0], dict(decision.reply)


def cases() -> dict[str, dict[str, Callable[[], object]]]:
    command, event, reply = records()
    cmd_json_old = json.dumps({"v": 1, "command": command.to_dict()}, separators=(",", ":")).encode()
    cmd_new = encode_command(command)
    ev_new = encode_event(event)
    header, parsed = codec.frame(event.type)
    avro_record = events.event_record(event)
    ev_dict = to_tagged_json(avro_record)  # the same record as JSON text would carry it (bytes as hex)
    ev_json = json.dumps(ev_dict, separators=(",", ":")).encode()
    reply_new = encode_reply(True, result=reply)
    cmd_dict = {"v": 1, "command": command.to_dict()}

    def raw_avro_write() -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, avro_record)
        return out.getvalue()

    body = ev_new[codec.HEADER_BYTES:]
    return {
        "command decode": {
            "before": lambda: Command.from_dict(json.loads(cmd_json_old)["command"]),
            "after": lambda: decode_command(cmd_new),
            "raw json": lambda: json.loads(cmd_json_old),
        },
        "command encode": {
            "before": lambda: json.dumps({"v": 1, "command": command.to_dict()}, separators=(",", ":")).encode(),
            "after": lambda: encode_command(command),
            "raw json": lambda: json.dumps(cmd_dict, separators=(",", ":")),
        },
        "event encode": {
            "after": lambda: encode_event(event),
            "raw json": lambda: json.dumps(ev_dict, separators=(",", ":")),
            "raw avro": raw_avro_write,
        },
        "event decode": {
            "after": lambda: decode_event(ev_new),
            "raw json": lambda: json.loads(ev_json),
            "raw avro": lambda: fastavro.schemaless_reader(io.BytesIO(body), parsed),
        },
        "reply decode": {
            "before": lambda: json.loads(reply_new),
            "after": lambda: decode_reply(reply_new),
        },
    } | {"_sizes": {"command json": lambda: len(cmd_new), "event as json": lambda: len(ev_json),
                    "event avro": lambda: len(ev_new), "header": lambda: len(header)}}


def measure(fns: dict[str, Callable[[], object]], seconds: float, batch: int) -> dict[str, dict[str, float]]:
    samples: dict[str, list[float]] = {name: [] for name in fns}
    deadline = time.perf_counter() + seconds * len(fns)
    while time.perf_counter() < deadline:
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(batch):
                fn()
            samples[name].append((time.perf_counter() - start) / batch * 1e6)
    out = {}
    for name, per_op in samples.items():
        per_op.sort()
        out[name] = {"median_us": statistics.median(per_op), "p99_us": per_op[min(len(per_op) - 1,
                                                                                   int(len(per_op) * 0.99))],
                     "per_s": 1e6 / statistics.median(per_op)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="seconds per case")
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    all_cases = cases()
    sizes = {name: fn() for name, fn in all_cases.pop("_sizes").items()}
    results = {op: measure(fns, args.seconds, args.batch) for op, fns in all_cases.items()}
    if args.json:
        print(json.dumps({"sizes_bytes": sizes, "results": results}, indent=2))
        return 0
    print("record sizes (bytes):", ", ".join(f"{k} {v}" for k, v in sizes.items()))
    print(f"{'operation':<16}{'case':<10}{'median µs':>11}{'p99 µs':>9}{'records/s':>12}{'vs first':>11}")
    for op, res in results.items():
        before = next(iter(res.values()))["median_us"]  # "before" where there is one, else "after"
        for name, r in res.items():
            print(f"{op:<16}{name:<10}{r['median_us']:>11.2f}{r['p99_us']:>9.2f}{r['per_s']:>12,.0f}"
                  f"{before / r['median_us']:>10.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
