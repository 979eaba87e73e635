"""Micro-benchmark of the protocol hot paths against raw libsodium, measured in one run.

    .venv/bin/python bench/bench_protocol.py [--seconds 2] [--batch 200] [--match TEXT] [--json]

Cases (each project operation beside its baseline):
- sign:   `sign_message` (validate fields, SHA-256 the payload, build the signing bytes, ed25519)
          vs raw `nacl.bindings.crypto_sign` on precomputed signing bytes;
- verify: `verify_message` (re-hash the payload, compare, rebuild the bytes, ed25519 verify)
          vs raw `nacl.bindings.crypto_sign_open` on the precomputed signed message;
- filter: `evaluate(ast, headers)` and a `compile_filter(ast)` function on the CIP-7 example
          filter, vs the same test hand-written in Python (there is no libsodium equivalent; the
          hand-written function is the floor);
- decide publish: the stream actor's `decide` on a signed 512-byte publish at head+1 (parse and
          check the message, one ed25519 verify, build the event), and the same preceded by
          `decode_command` of the record as it sits on the commands topic, vs raw
          `nacl.bindings.crypto_sign_open` of that message. The ratio is the share of one core's
          raw verify rate that the writer's pure decision keeps (1.0 would be verify-bound).
- worker record: everything the stream worker does with that record in Python, Kafka aside
          (`CommandDecider._handle`: placement checks, decode and route, decide, evolve, encode the
          event, the message and the reply, hand the three to a producer that discards them), vs
          the same raw verify; the state is put back after each call, so every call decides head+1.

Sign and verify run on a typical price_batch (about 200-byte payload, 3 tags) and on a maximal
16 KiB payload, where SHA-256 of the payload is a visible share of the project's cost.

Timing: operations run in batches of `--batch`; per-op latency is batch time / batch size, and
p50/p99 are over batches. Project and baseline batches alternate, so both see the same machine
load. This is a script, not a test (pytest only collects `tests/`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import nacl.bindings
import nacl.signing

from watchtower.protocol import (
    compile_filter,
    evaluate,
    message_signing_bytes,
    parse_filter,
    sign_message,
    verify_message,
)
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.stream.actor import StreamState, decide, evolve
from watchtower.schemas.wire import H_CORRELATION, H_REPLY_PARTITION, decode_command, encode_command
from watchtower.topics.records import Record
from watchtower.workers.decider import CommandDecider

SEED = bytes(range(32))
SPEC_FILTER = {
    "all": [
        {"field": "kind", "op": "eq", "value": "price_batch"},
        {"field": "tags.symbol", "op": "in", "value": ["BTC", "ETH"]},
        {"field": "tags.venue", "op": "eq", "value": "coinbase"},
        {"field": "tags.confidence", "op": "gte", "value": 0.9},
    ]
}


def _fields(payload: bytes) -> dict[str, Any]:
    return {
        "stream_id": "prices.btc-usd",
        "sequence": 123_456,
        "timestamp_unix_ms": 1_767_225_600_000,
        "kind": "price_batch",
        "content_type": "application/json",
        "tags": {"symbol": "BTC", "venue": "coinbase", "confidence": 0.93},
        "payload": payload,
    }


Case = tuple[str, Callable[[], object], Callable[[], object], str]


def _cases() -> list[Case]:
    signing_key = nacl.signing.SigningKey(SEED)
    public_key, secret_key = nacl.bindings.crypto_sign_seed_keypair(SEED)
    cases: list[Case] = []
    payloads = {
        "typical": b'{"ticks":[' + b",".join(b'{"p":97123.5,"t":1767225600000}' for _ in range(6)) + b"]}",
        "16KiB": bytes(16_384),
    }
    for label, payload in payloads.items():
        fields = _fields(payload)
        msg = sign_message(**fields, signing_key=signing_key)
        data = message_signing_bytes(msg)
        signed = msg.publisher_sig + data

        def project_sign(fields: dict[str, Any] = fields) -> object:
            return sign_message(**fields, signing_key=signing_key)

        def raw_sign(data: bytes = data) -> object:
            return nacl.bindings.crypto_sign(data, secret_key)

        def project_verify(msg: Any = msg) -> object:
            return verify_message(msg, public_key)

        def raw_verify(signed: bytes = signed) -> object:
            return nacl.bindings.crypto_sign_open(signed, public_key)

        cases.append((f"sign ({label}, {len(payload)} B)", project_sign, raw_sign, "libsodium crypto_sign"))
        cases.append((f"verify ({label}, {len(payload)} B)", project_verify, raw_verify, "libsodium crypto_sign_open"))

    ast = parse_filter(SPEC_FILTER)
    headers = sign_message(**_fields(b"{}"), signing_key=signing_key).headers()

    def project_filter() -> object:
        return evaluate(ast, headers)

    def hand_filter() -> object:
        tags = headers["tags"]
        return (
            headers["kind"] == "price_batch"
            and tags.get("symbol") in ("BTC", "ETH")
            and tags.get("venue") == "coinbase"
            and tags.get("confidence", 0) >= 0.9
        )

    compiled = compile_filter(ast)

    def project_compiled() -> object:
        return compiled(headers)

    if not (project_filter() is True and project_compiled() is True and hand_filter() is True):
        raise RuntimeError("the benchmarked filters disagree")
    cases.append(("filter evaluate (spec example)", project_filter, hand_filter, "hand-written Python"))
    cases.append(("filter compiled (spec example)", project_compiled, hand_filter, "hand-written Python"))
    cases.extend(_decide_cases())
    return cases


def _decide_cases() -> list[Case]:
    """decide on a 512 B publish at head+1, alone and after decoding its commands-topic record."""
    owner = nacl.signing.SigningKey(bytes(range(32, 64)))
    publisher = nacl.signing.SigningKey(SEED)
    public_key = bytes(publisher.verify_key)
    stream_id = "prices.btc-usd"
    state = StreamState.initial(stream_id)
    create = sign_command(owner, "create_stream", stream_id, 1, {"publisher_key": public_key})
    for event in decide(state, create, block_height=1).events:
        state = evolve(state, event)
    fields = {**_fields(bytes(range(256)) * 2), "sequence": state.head + 1}
    msg = sign_message(**fields, signing_key=publisher)
    record = encode_command(sign_command(owner, "publish", stream_id, 2, msg.to_json_dict()))
    cmd = decode_command(record)
    signed = msg.publisher_sig + message_signing_bytes(msg)

    def project_decide() -> object:
        return decide(state, cmd, block_height=2)  # type: ignore[arg-type]

    def project_decode_decide() -> object:
        return decide(state, decode_command(record), block_height=2)  # type: ignore[arg-type]

    def raw_verify() -> object:
        return nacl.bindings.crypto_sign_open(signed, public_key)

    if len(project_decide().events) != 1:
        raise RuntimeError("the benchmarked publish was not accepted")
    return [
        ("decide publish (512 B)", project_decide, raw_verify, "libsodium crypto_sign_open"),
        ("decode + decide publish (512 B)", project_decode_decide, raw_verify, "libsodium crypto_sign_open"),
        ("worker record: publish (512 B)", _worker_record(owner, publisher, stream_id, record), raw_verify,
         "libsodium crypto_sign_open"),
    ]


class _Discard:
    """A producer that keeps nothing (the decider's `Sink`); its topics have 6 partitions."""

    produced = 0

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,  # noqa: ARG002
                partition: int = -1, headers: Any = None) -> None:  # noqa: ARG002 (the producer's signature)
        self.produced += 1

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:  # noqa: ARG002
        from types import SimpleNamespace
        return SimpleNamespace(topics={topic: SimpleNamespace(partitions=dict.fromkeys(range(6)))})


def _worker_record(owner: nacl.signing.SigningKey, publisher: nacl.signing.SigningKey, stream_id: str,
                   publish: bytes) -> Callable[[], object]:
    """The stream worker's whole Python path for one publish record, its state put back after each call."""
    decider = CommandDecider("bench", clock_ms=lambda: 1_767_225_600_000)
    decider.producer = sink = _Discard()
    partition = decider._partition_of(stream_id)
    decider._states[partition] = {a.name: {} for a in decider.aggregates}
    headers = [(H_CORRELATION, b"c" * 16), (H_REPLY_PARTITION, b"0")]
    ctx = decider._context()
    create = sign_command(owner, "create_stream", stream_id, 1, {"publisher_key": bytes(publisher.verify_key)})
    decider._handle(Record(decider.t_commands, partition, 0, stream_id.encode(), encode_command(create),
                           headers, 0), {}, ctx)
    states = decider._states[partition]["stream"]
    created = dict(states)
    record = Record(decider.t_commands, partition, 1, stream_id.encode(), publish, headers, 0)

    def handle() -> object:
        decider._handle(record, {}, ctx)
        states.clear()
        states.update(created)
        return sink

    rejected, produced = decider.stats.rejected, sink.produced
    handle()
    if decider.stats.rejected != rejected or sink.produced - produced != 3:  # its event, message and reply
        raise RuntimeError("the benchmarked publish was not accepted by the worker path "
                           f"({sink.produced - produced} records)")
    return handle


def _batch(fn: Callable[[], object], size: int) -> float:
    start = time.perf_counter()
    for _ in range(size):
        fn()
    return (time.perf_counter() - start) / size


def _summary(per_op: list[float]) -> dict[str, float]:
    ordered = sorted(per_op)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    mean = statistics.fmean(per_op)
    return {"ops_per_s": 1.0 / mean, "p50_us": statistics.median(per_op) * 1e6, "p99_us": p99 * 1e6}


def run(seconds: float, batch: int, match: str = "") -> list[dict[str, Any]]:
    results = []
    for name, project, baseline, baseline_name in _cases():
        if match not in name:
            continue
        project_fn, baseline_fn = project, baseline
        _batch(project_fn, batch)  # warm caches (VerifyKey, encoded texts) before timing
        _batch(baseline_fn, batch)
        timings: dict[str, list[float]] = {"project": [], "baseline": []}
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(timings["project"]) < 5:
            timings["project"].append(_batch(project_fn, batch))
            timings["baseline"].append(_batch(baseline_fn, batch))
        ours, theirs = _summary(timings["project"]), _summary(timings["baseline"])
        results.append(
            {
                "case": name,
                "baseline": baseline_name,
                "batches": len(timings["project"]),
                "batch_size": batch,
                "project": ours,
                "raw": theirs,
                "ratio": ours["ops_per_s"] / theirs["ops_per_s"],
            }
        )
    return results


def _table(results: list[dict[str, Any]]) -> str:
    header = (
        f"{'case':<34} {'ops/s':>10} {'p50 µs':>8} {'p99 µs':>8} | "
        f"{'raw ops/s':>10} {'p50 µs':>8} {'p99 µs':>8} | {'ratio':>6}  baseline"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        p, b = r["project"], r["raw"]
        lines.append(
            f"{r['case']:<34} {p['ops_per_s']:>10,.0f} {p['p50_us']:>8.2f} {p['p99_us']:>8.2f} | "
            f"{b['ops_per_s']:>10,.0f} {b['p50_us']:>8.2f} {b['p99_us']:>8.2f} | {r['ratio']:>6.3f}  {r['baseline']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per case (default 2)")
    parser.add_argument("--batch", type=int, default=200, help="operations per timed batch (default 200)")
    parser.add_argument("--match", default="", help="run only the cases whose name contains TEXT")
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    args = parser.parse_args(argv)
    results = run(args.seconds, args.batch, args.match)
    if args.json:
        print(json.dumps({"python": sys.version.split()[0], "results": results}, indent=2))
    else:
        print(_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
