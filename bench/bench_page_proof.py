"""Cost of a proven filtered get_since page against a plain one, beside raw libsodium.

    .venv/bin/python bench/bench_page_proof.py [--reps 40] [--sizes 100,1000] [--payload-bytes N] [--json]

For each scanned range of `size` messages (3 tags; by default a typical 203-byte price_batch
payload, or `--payload-bytes` of payload) and each filter selectivity (1%, 10%, 50% of the range
matches ``tags.symbol == BTC``):

- page bytes: the JSON answer as the API sends it, plain and with ``proof=true``, beside the
  unfiltered page of the same range (what a client that trusts nobody would fetch otherwise);
- server: split the range into page (and proof) from the payload cache's served forms, exactly as
  `Projection.get_since` does, and encode the answer to JSON bytes;
- client: what `Subscriber.poll_page` does with the bytes: decode the JSON, parse and verify every
  page message under the key schedule, check the page's sequences, and (proven) `verify_page_proof`,
  which parses and verifies the skipped entries;
- baseline: raw `crypto_sign_open` of the signatures the client checks (the page's for a plain
  page, the whole range's for a proven one) on precomputed signed bytes: the floor of any client.

Times are per page, p50 and p99 over `--reps` repetitions; plain, proven and baselines alternate
so all see the same machine load. A range of 1,000 exceeds get_since's limit of 500; it is measured
to show how the cost scales. This is a script, not a test (pytest only collects `tests/`).
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

from watchtower.protocol.page.proof import entry_json, proof_of, schedule_check, verify_page_proof
from watchtower.protocol.page.rules import check_page_sequences
from watchtower.protocol.signing import message_signing_bytes, sign_message, verify_with_schedule
from watchtower.protocol.stream.filters import compile_filter, parse_filter
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage

SEED = bytes(range(32))
STREAM = "prices.btc-usd"
FILTER = {"field": "tags.symbol", "op": "eq", "value": "BTC"}
PAYLOAD = b'{"ticks":[' + b",".join(b'{"p":97123.5,"t":1767225600000}' for _ in range(6)) + b"]}"
SELECTIVITIES = (0.01, 0.10, 0.50)


def _range(size: int, selectivity: float, payload: bytes) -> list[StreamMessage]:
    """Sequences 1..size; exactly round(size * selectivity) are BTC, spread evenly."""
    key = nacl.signing.SigningKey(SEED)
    hits = max(1, round(size * selectivity))
    btc = {round(i * size / hits) + 1 for i in range(hits)}
    return [sign_message(stream_id=STREAM, sequence=s, timestamp_unix_ms=1_767_225_600_000 + s, kind="price_batch",
                         payload=payload, signing_key=key,
                         tags={"symbol": "BTC" if s in btc else "ETH", "venue": "coinbase", "confidence": 0.93})
            for s in range(1, size + 1)]


def _server(served: list[tuple[dict[str, Any], dict[str, Any]]], proof: bool, flt: object = FILTER) -> bytes:
    """`Projection.get_since`'s split of the range (the payload cache's served forms) and the JSON answer."""
    match = compile_filter(parse_filter(flt))
    messages, skipped = [], []
    for headers, data in served:
        if match(headers):
            messages.append(data)
        elif proof:
            skipped.append(entry_json(data))
    size = len(served)
    page: dict[str, Any] = {"stream_id": STREAM, "messages": messages, "head_sequence": size, "floor_sequence": 1,
                            "head": size, "floor": 1, "next_cursor": size}
    if proof:
        page["proof"] = proof_of(skipped)
    return json.dumps(page, separators=(",", ":")).encode()


def _client(body: bytes, schedule: KeySchedule, proof: bool) -> int:
    """What `Subscriber.poll_page` does with an answer: decode, verify, check the sequences (and the proof)."""
    raw = json.loads(body)
    received = [StreamMessage.from_json_dict(item) for item in raw["messages"]]
    for msg in received:
        if not verify_with_schedule(msg, schedule):
            raise RuntimeError(f"#{msg.sequence} does not verify")
    next_cursor = raw["next_cursor"]
    if proof:
        verify_page_proof(STREAM, 0, next_cursor, received, raw["proof"], FILTER, schedule_check(schedule))
    check_page_sequences(STREAM, [m.sequence for m in received], cursor=0, limit=max(1, next_cursor),
                         next_cursor=next_cursor, head=raw["head_sequence"], filtered=True)
    return len(received)


def _raw_verify(signed: list[bytes], public_key: bytes) -> None:
    for item in signed:
        nacl.bindings.crypto_sign_open(item, public_key)


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


def _pct(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def measure(size: int, selectivity: float, reps: int, payload: bytes = PAYLOAD) -> dict[str, Any]:
    messages = _range(size, selectivity, payload)
    public_key = bytes(nacl.signing.SigningKey(SEED).verify_key)
    schedule = KeySchedule.initial(public_key)
    served = [(m.headers(), m.to_json_dict()) for m in messages]
    plain_body, proven_body = _server(served, False), _server(served, True)
    matched = _client(plain_body, schedule, False)
    if _client(proven_body, schedule, True) != matched:
        raise RuntimeError("plain and proven pages disagree")
    signed_all = [m.publisher_sig + message_signing_bytes(m) for m in messages]
    btc = {m.sequence for m in messages if m.tags["symbol"] == "BTC"}
    signed_page = [s for m, s in zip(messages, signed_all, strict=True) if m.sequence in btc]
    runs: dict[str, list[float]] = {k: [] for k in ("server_plain", "server_proven", "client_plain", "client_proven",
                                                     "sodium_page", "sodium_range")}
    for _ in range(reps):
        runs["server_plain"].append(_timed(lambda: _server(served, False)))
        runs["server_proven"].append(_timed(lambda: _server(served, True)))
        runs["client_plain"].append(_timed(lambda: _client(plain_body, schedule, False)))
        runs["client_proven"].append(_timed(lambda: _client(proven_body, schedule, True)))
        runs["sodium_page"].append(_timed(lambda: _raw_verify(signed_page, public_key)))
        runs["sodium_range"].append(_timed(lambda: _raw_verify(signed_all, public_key)))
    out: dict[str, Any] = {"size": size, "selectivity": selectivity, "matched": matched,
                           "bytes_plain": len(plain_body), "bytes_proven": len(proven_body),
                           "bytes_unfiltered": len(_server(served, False, None)), "payload_bytes": len(payload)}
    for name, samples in runs.items():
        out[f"{name}_p50_ms"], out[f"{name}_p99_ms"] = _pct(samples)
    return out


def _table(rows: list[dict[str, Any]]) -> str:
    head = ("| range | match | page bytes plain → proven (unfiltered) | server ms p50/p99 plain → proven "
            "| client ms p50/p99 plain → proven | libsodium ms p50 page / range |")
    lines = [head, "|" + "---|" * 6]
    for r in rows:
        lines.append(
            f"| {r['size']} | {r['selectivity']:.0%} ({r['matched']}) "
            f"| {r['bytes_plain']:,} → {r['bytes_proven']:,} ({r['bytes_unfiltered']:,}) "
            f"| {r['server_plain_p50_ms']:.2f}/{r['server_plain_p99_ms']:.2f} → "
            f"{r['server_proven_p50_ms']:.2f}/{r['server_proven_p99_ms']:.2f} "
            f"| {r['client_plain_p50_ms']:.2f}/{r['client_plain_p99_ms']:.2f} → "
            f"{r['client_proven_p50_ms']:.2f}/{r['client_proven_p99_ms']:.2f} "
            f"| {r['sodium_page_p50_ms']:.2f} / {r['sodium_range_p50_ms']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--payload-bytes", type=int, default=None, help="payload size (default: a 203 B batch)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = parser.parse_args(argv)
    payload = PAYLOAD if args.payload_bytes is None else b"x" * args.payload_bytes
    rows = [measure(int(size), sel, args.reps, payload) for size in args.sizes.split(",") for sel in SELECTIVITIES]
    print(f"payload {len(payload)} B, {args.reps} repetitions per cell")
    print(json.dumps(rows, indent=2) if args.json else _table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
