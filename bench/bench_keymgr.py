"""Benchmark of paid feeds: stream_encrypt / stream_decrypt beside raw XChaCha20-Poly1305, in one run.

    .venv/bin/python bench/bench_keymgr.py [--seconds 2] [--batch 50] [--json PATH] [--plot PATH]

Phase ``crypto`` (no broker): MB/s of plaintext at the largest payload a 16 KiB envelope carries
(16,344 bytes: 16 KiB minus the 24-byte nonce and 16-byte tag), each case beside the floor:

- ``raw aead encrypt`` / ``raw aead decrypt``: `nacl.bindings`' XChaCha20-Poly1305-IETF with a fixed
  key, nonce and AAD, nothing else: what the cipher itself costs;
- ``stream_encrypt``: `envelope.encrypt_for_epoch` (HKDF of the epoch key from the master seed, HKDF
  of the nonce, the CBOR AAD, the seal);
- ``stream_decrypt``: `envelope.decrypt_for_epoch` (the same derivations, the open);
- ``decrypt, key held``: `envelope.decrypt_with_content_key`, what a subscriber holding its
  unsealed epoch key pays per message.

Timing: batches of `--batch` operations, the cases alternated batch by batch so all see the same
machine load (this machine is shared); per-operation figures are batch time / batch size, with the
median and p99 over batches, MB/s from the median, and each case's ratio to its raw floor.

The JSON result goes to ``--json`` (default ``artifacts/bench_keymgr.json``). A script, not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import nacl.bindings

from watchtower.protocol import envelope
from watchtower.protocol.constants import MAX_EFFECTIVE_PLAINTEXT_BYTES

STREAM_ID = "bench-paid-feed"
KEY_EPOCH = 7
SEQUENCE = 42
KIND = "price_batch"
CONTENT_TYPE = "application/octet-stream"
MB = 1_000_000


# ----------------------------------------------------------------------------- statistics
def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of unsorted values; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def alternate(cases: dict[str, Callable[[], object]], seconds: float, batch: int) -> dict[str, list[float]]:
    """Per-operation seconds of each case, one sample per batch, cases interleaved batch by batch."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    deadline = time.perf_counter() + seconds * len(cases)
    while time.perf_counter() < deadline:
        for name, fn in cases.items():
            start = time.perf_counter()
            for _ in range(batch):
                fn()
            samples[name].append((time.perf_counter() - start) / batch)
    return samples


def summarize(per_op_s: list[float], nbytes: int) -> dict[str, float]:
    median = pct(per_op_s, 50)
    return {"batches": len(per_op_s), "median_us": median * 1e6, "p99_us": pct(per_op_s, 99) * 1e6,
            "mb_per_s": nbytes / median / MB}


# ----------------------------------------------------------------------------- phase: crypto
def crypto_cases(size: int) -> tuple[dict[str, Callable[[], object]], dict[str, str]]:
    """The timed callables and, for each, the raw floor it is compared with."""
    seed = os.urandom(32)
    plaintext = os.urandom(size)
    actor_nonce = 1
    aad = envelope.envelope_aad(stream_id=STREAM_ID, sequence=SEQUENCE, key_epoch=KEY_EPOCH, kind=KIND,
                                content_type=CONTENT_TYPE)
    raw_key, raw_nonce = os.urandom(32), os.urandom(24)
    raw_ct = nacl.bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, aad, raw_nonce, raw_key)
    sealed = envelope.encrypt_for_epoch(master_seed=seed, stream_id=STREAM_ID, key_epoch=KEY_EPOCH,
                                        actor_nonce=actor_nonce, sequence=SEQUENCE, kind=KIND,
                                        content_type=CONTENT_TYPE, plaintext=plaintext)
    content_key = envelope.derive_content_key(seed, STREAM_ID, KEY_EPOCH)
    opened = envelope.decrypt_for_epoch(master_seed=seed, stream_id=STREAM_ID, key_epoch=KEY_EPOCH,
                                        sequence=SEQUENCE, kind=KIND, content_type=CONTENT_TYPE, envelope=sealed)
    assert opened == plaintext, "stream_decrypt does not invert stream_encrypt"
    assert len(sealed) == size + 40

    def stream_encrypt() -> bytes:
        return envelope.encrypt_for_epoch(master_seed=seed, stream_id=STREAM_ID, key_epoch=KEY_EPOCH,
                                          actor_nonce=actor_nonce, sequence=SEQUENCE, kind=KIND,
                                          content_type=CONTENT_TYPE, plaintext=plaintext)

    def stream_decrypt() -> bytes:
        return envelope.decrypt_for_epoch(master_seed=seed, stream_id=STREAM_ID, key_epoch=KEY_EPOCH,
                                          sequence=SEQUENCE, kind=KIND, content_type=CONTENT_TYPE, envelope=sealed)

    def decrypt_key_held() -> bytes:
        return envelope.decrypt_with_content_key(content_key=content_key, stream_id=STREAM_ID,
                                                 key_epoch=KEY_EPOCH, sequence=SEQUENCE, kind=KIND,
                                                 content_type=CONTENT_TYPE, envelope=sealed)

    cases: dict[str, Callable[[], object]] = {
        "raw aead encrypt": lambda: nacl.bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(
            plaintext, aad, raw_nonce, raw_key),
        "stream_encrypt": stream_encrypt,
        "raw aead decrypt": lambda: nacl.bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(
            raw_ct, aad, raw_nonce, raw_key),
        "stream_decrypt": stream_decrypt,
        "decrypt, key held": decrypt_key_held,
    }
    floors = {"raw aead encrypt": "raw aead encrypt", "stream_encrypt": "raw aead encrypt",
              "raw aead decrypt": "raw aead decrypt", "stream_decrypt": "raw aead decrypt",
              "decrypt, key held": "raw aead decrypt"}
    return cases, floors


def phase_crypto(seconds: float, batch: int, size: int) -> dict[str, Any]:
    cases, floors = crypto_cases(size)
    for fn in cases.values():  # warm every path (imports, caches) before timing
        fn()
    samples = alternate(cases, seconds, batch)
    out = {name: summarize(per_op, size) for name, per_op in samples.items()}
    for name, floor in floors.items():
        out[name]["vs_raw"] = out[name]["mb_per_s"] / out[floor]["mb_per_s"]
        out[name]["raw"] = floor  # type: ignore[assignment]
    return {"plaintext_bytes": size, "cases": out}


def print_crypto(res: dict[str, Any]) -> None:
    print(f"crypto, {res['plaintext_bytes']:,} B plaintext per operation")
    print(f"  {'case':<20}{'median µs':>11}{'p99 µs':>10}{'MB/s':>10}{'vs raw':>9}")
    for name, r in res["cases"].items():
        print(f"  {name:<20}{r['median_us']:>11.1f}{r['p99_us']:>10.1f}{r['mb_per_s']:>10.1f}{r['vs_raw']:>8.2f}x")


# ----------------------------------------------------------------------------- main
def plot(report: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = report["crypto"]["cases"]
    names = list(cases)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.barh(names, [cases[n]["mb_per_s"] for n in names],
            color=["#999999" if n.startswith("raw") else "#3366aa" for n in names])
    ax.set_xlabel(f"MB/s of plaintext ({report['crypto']['plaintext_bytes']:,} B per operation)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per crypto case")
    parser.add_argument("--batch", type=int, default=50, help="operations per timed batch")
    parser.add_argument("--size", type=int, default=MAX_EFFECTIVE_PLAINTEXT_BYTES, help="plaintext bytes")
    parser.add_argument("--json", metavar="PATH", default="artifacts/bench_keymgr.json")
    parser.add_argument("--plot", metavar="PATH", help="write the MB/s bars as a PNG to PATH")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"config": {k: v for k, v in vars(args).items() if k not in ("json", "plot")},
                              "cpus": os.cpu_count(), "loadavg": os.getloadavg()}
    report["crypto"] = phase_crypto(args.seconds, args.batch, args.size)
    print_crypto(report["crypto"])
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"wrote {args.json}")
    if args.plot:
        plot(report, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
