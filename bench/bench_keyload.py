"""Keyloads and masked payloads (protocol.keyload), each beside its raw libsodium baseline, in one run.

    .venv/bin/python bench/bench_keyload.py [--members 10,1000,10000] [--payload 512] [--seconds 1] [--json FILE]

- **Keyload build** for each member count: the sealed boxes (one X25519 sealed box per member),
  the members digest and the CBOR parts; beside it, the raw cost of the same number of
  ``crypto_box_seal`` calls alone. Reported: build time, parts, total bytes, bytes per member.
- **Opening one's key** in the largest keyload: find the part, binary-search the entry, open the
  sealed box, check the commitment; beside it, one raw ``crypto_box_seal_open``.
- **Checking a whole keyload** (what a writer or a careful subscriber does once per keyload).
- **Masked payloads**: `mask` / `unmask` of a `--payload`-byte message (HKDF of the payload key,
  the AAD's CBOR, XChaCha20-Poly1305) beside raw XChaCha20-Poly1305-IETF of the same bytes with a
  fixed key and AAD. Median and p99 per call over batches, and the ratio.

A script, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import nacl.bindings
import nacl.public

from watchtower.protocol.keyload import (
    Recipient,
    build_keyload,
    check_keyload,
    decode_part,
    mask,
    open_keyload,
    part_for,
    unmask,
)

SID = "bench.private"


def recipients(n: int) -> tuple[list[Recipient], list[nacl.public.PrivateKey]]:
    keys = [nacl.public.PrivateKey.generate() for _ in range(n)]
    return ([Recipient("0x" + os.urandom(32).hex(), 1, bytes(k.public_key)) for k in keys], keys)


def per_call(fn: Callable[[], object], seconds: float, batch: int = 200) -> list[float]:
    """Seconds per call, one figure per batch, for about `seconds`."""
    out: list[float] = []
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop or len(out) < 5:
        t = time.perf_counter()
        for _ in range(batch):
            fn()
        out.append((time.perf_counter() - t) / batch)
    return out


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", default="10,1000,10000")
    ap.add_argument("--payload", type=int, default=512)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--json", dest="json_path", default=None)
    args = ap.parse_args(argv)
    report: dict[str, Any] = {"keyloads": [], "payload_bytes": args.payload}
    largest: tuple[Any, list[Recipient], list[nacl.public.PrivateKey]] | None = None

    build_keyload(SID, recipients(3)[0])  # warm-up: imports and first-call costs out of the figures
    print(f"{'members':>8} {'build ms':>9} {'raw seal ms':>12} {'ratio':>6} {'parts':>6} {'bytes':>10} "
          f"{'B/member':>9} {'check ms':>9}")
    for n in (int(x) for x in args.members.split(",")):
        recips, keys = recipients(n)
        session = os.urandom(32)
        t = time.perf_counter()
        keyload = build_keyload(SID, recips, session_key=session)
        build_s = time.perf_counter() - t
        pubs = [nacl.public.PublicKey(r.public_key) for r in recips]
        t = time.perf_counter()
        for pk in pubs:
            nacl.public.SealedBox(pk).encrypt(session)
        raw_s = time.perf_counter() - t
        t = time.perf_counter()
        parts = [decode_part(part) for part in keyload.parts]
        check_keyload(parts)
        check_s = time.perf_counter() - t
        size = sum(len(part) for part in keyload.parts)
        row = {"members": n, "build_ms": build_s * 1e3, "raw_seal_ms": raw_s * 1e3, "ratio": raw_s / build_s,
               "parts": len(keyload.parts), "bytes": size, "bytes_per_member": size / n,
               "decode_and_check_ms": check_s * 1e3}
        report["keyloads"].append(row)
        print(f"{n:>8} {row['build_ms']:>9.1f} {row['raw_seal_ms']:>12.1f} {row['ratio']:>6.2f} "
              f"{len(keyload.parts):>6} {size:>10,} {row['bytes_per_member']:>9.1f} "
              f"{row['decode_and_check_ms']:>9.1f}")
        largest = (parts, recips, keys)

    assert largest is not None
    parts, recips, keys = largest
    i = len(recips) // 2
    me, my_key = recips[i], bytes(keys[i])
    mine = part_for(parts, me.address)
    assert mine is not None
    entry_sealed = next(sealed for m, sealed in mine.entries if m.address == me.address)
    ours = per_call(lambda: open_keyload(part_for(parts, me.address), me.address, my_key),  # type: ignore[arg-type]
                    args.seconds, batch=50)
    raw = per_call(lambda: nacl.public.SealedBox(nacl.public.PrivateKey(my_key)).decrypt(entry_sealed),
                   args.seconds, batch=50)
    report["open"] = {"us_p50": statistics.median(ours) * 1e6, "us_p99": p(ours, 0.99) * 1e6,
                      "raw_us_p50": statistics.median(raw) * 1e6,
                      "ratio": statistics.median(raw) / statistics.median(ours)}
    print(f"\nopen one's key in a {len(recips):,}-member keyload: p50 {report['open']['us_p50']:.1f} µs, "
          f"p99 {report['open']['us_p99']:.1f} µs; raw sealed-box open p50 {report['open']['raw_us_p50']:.1f} µs; "
          f"ratio {report['open']['ratio']:.2f}")

    plaintext = os.urandom(args.payload)
    key, kid = os.urandom(32), os.urandom(16)
    ctx = {"keyload_id": kid, "stream_id": SID, "sequence": 42, "branch": "main", "kind": "tick",
           "content_type": "application/json"}
    masked = mask(key, plaintext=plaintext, **ctx)
    raw_key, raw_nonce, raw_aad = os.urandom(32), os.urandom(24), os.urandom(80)
    sealed = nacl.bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, raw_aad, raw_nonce, raw_key)
    seal_raw = nacl.bindings.crypto_aead_xchacha20poly1305_ietf_encrypt
    open_raw = nacl.bindings.crypto_aead_xchacha20poly1305_ietf_decrypt
    cases = {
        "mask": (lambda: mask(key, plaintext=plaintext, **ctx),
                 lambda: seal_raw(plaintext, raw_aad, raw_nonce, raw_key)),
        "unmask": (lambda: unmask(key, masked, **ctx),
                   lambda: open_raw(sealed, raw_aad, raw_nonce, raw_key)),
    }
    report["payloads"] = {}
    for name, (ours_fn, raw_fn) in cases.items():
        a, b = [], []
        for _ in range(3):  # alternate, so both see the same machine
            a += per_call(ours_fn, args.seconds / 3)
            b += per_call(raw_fn, args.seconds / 3)
        row = {"us_p50": statistics.median(a) * 1e6, "us_p99": p(a, 0.99) * 1e6,
               "raw_us_p50": statistics.median(b) * 1e6, "raw_us_p99": p(b, 0.99) * 1e6,
               "ratio": statistics.median(b) / statistics.median(a),
               "msgs_per_s": 1 / statistics.median(a), "raw_msgs_per_s": 1 / statistics.median(b)}
        report["payloads"][name] = row
        print(f"{name:>7} {args.payload} B: p50 {row['us_p50']:.1f} µs p99 {row['us_p99']:.1f} µs "
              f"({row['msgs_per_s']:,.0f}/s); raw XChaCha20-Poly1305 p50 {row['raw_us_p50']:.1f} µs "
              f"({row['raw_msgs_per_s']:,.0f}/s); ratio {row['ratio']:.2f}")
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
