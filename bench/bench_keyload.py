"""Keyloads and masked payloads (protocol.confidential.keyload), each beside its raw libsodium baseline, in one run.

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
- **Publish and read paths, confidential beside plain** (each a message per call, in one process):
  the publisher (mask, then sign: what `ConfidentialPublisher.publish` does before its request,
  beside signing the plaintext), the writer (the stream actor's `decide` and `evolve` of a publish
  on a confidential stream, keyload rule included, beside the same on a plain private stream),
  and the member (verify the signature, then unmask, beside verify alone). The Kafka legs in
  between carry the same bytes either way (a masked payload is 40 bytes longer); their cost beside
  raw Kafka is `bench/bench_stream_actor.py`'s.

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
import nacl.signing

from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.confidential.keyload import (
    KEYLOAD_KIND,
    Recipient,
    build_keyload,
    check_keyload,
    decode_part,
    mask,
    open_keyload,
    part_for,
    unmask,
)
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message, verify_message
from watchtower.protocol.stream.actor import StreamState, decide, evolve
from watchtower.protocol.stream.message import StreamMessage

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


def _stream(confidential: bool) -> tuple[Any, Any, Any]:
    """A private stream (confidential or not) in the stream actor, its owner and publisher keys."""
    owner, publisher = nacl.signing.SigningKey.generate(), nacl.signing.SigningKey.generate()
    body: dict[str, Any] = {"publisher_key_hex": bytes(publisher.verify_key).hex(),
                            "subscription_policy": "PRIVATE_ALLOWLIST"}
    if confidential:
        body["confidential"] = True
    state = StreamState.initial(SID)
    for event in decide(state, sign_command(owner, "create_stream", SID, 1, body), block_height=1).events:
        state = evolve(state, event)
    return state, owner, publisher


def _publish_commands(state: Any, owner: Any, publisher: Any, payloads: list[bytes], tags: dict[str, Any],
                      first_nonce: int, kind: str = "tick") -> list[Any]:
    msgs = [sign_message(stream_id=SID, sequence=state.head + 1 + i, timestamp_unix_ms=1_700_000_000_000,
                         kind=kind, payload=payload, tags=tags, signing_key=publisher, signing_key_id=1)
            for i, payload in enumerate(payloads)]
    return [sign_command(owner, "publish", SID, first_nonce + i, m.to_json_dict()) for i, m in enumerate(msgs)]


def _write_rate(state: Any, commands: list[Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    for n, cmd in enumerate(commands):
        for event in decide(state, cmd, block_height=10 + n).events:
            state = evolve(state, event)
    return len(commands) / (time.perf_counter() - t), state


def paths(size: int, seconds: float, writes: int = 2000) -> dict[str, Any]:
    """Publisher, writer and member costs per message, confidential beside plain (module docstring)."""
    member = nacl.public.PrivateKey.generate()
    session, kid = os.urandom(32), os.urandom(16)
    conf_state, conf_owner, conf_pub = _stream(True)
    keyload = build_keyload(SID, [Recipient(address_from_public_key(bytes(conf_owner.verify_key)), 1,
                                            bytes(member.public_key))], session_key=session, keyload_id=kid)
    plaintext = os.urandom(size)
    signer = nacl.signing.SigningKey.generate()
    tags = {"wt.keyload": kid.hex(), "wt.branch": "main"}

    def sign(payload: bytes, t: dict[str, Any] | None) -> StreamMessage:
        return sign_message(stream_id=SID, sequence=42, timestamp_unix_ms=1_700_000_000_000, kind="tick",
                            payload=payload, tags=t, signing_key=signer, signing_key_id=1)

    ctx: dict[str, Any] = {"keyload_id": kid, "stream_id": SID, "sequence": 42, "branch": "main", "kind": "tick",
                           "content_type": "application/json"}
    plain_msg, masked_msg = sign(plaintext, None), sign(mask(session, plaintext=plaintext, **ctx), tags)
    public = bytes(signer.verify_key)
    out: dict[str, Any] = {}
    legs = {
        "publisher": (lambda: sign(mask(session, plaintext=plaintext, **ctx), tags), lambda: sign(plaintext, None)),
        "member": (lambda: verify_message(masked_msg, public) and unmask(session, masked_msg.payload_inline, **ctx),
                   lambda: verify_message(plain_msg, public)),
    }
    for name, (conf_fn, plain_fn) in legs.items():
        a, b = [], []
        for _ in range(3):
            a += per_call(conf_fn, seconds / 3, batch=100)
            b += per_call(plain_fn, seconds / 3, batch=100)
        out[name] = {"msgs_per_s": 1 / statistics.median(a), "plain_msgs_per_s": 1 / statistics.median(b),
                     "us_p50": statistics.median(a) * 1e6, "us_p99": p(a, 0.99) * 1e6,
                     "plain_us_p50": statistics.median(b) * 1e6, "plain_us_p99": p(b, 0.99) * 1e6,
                     "ratio": statistics.median(b) / statistics.median(a)}
    # The writer: decide + evolve per publish, on states that fold as a worker's would.
    conf_state = _write_rate(conf_state, _publish_commands(
        conf_state, conf_owner, conf_pub, list(keyload.parts), {"wt.keyload": kid.hex()}, 2, KEYLOAD_KIND))[1]
    masked_payloads = [mask(session, plaintext=plaintext, **{**ctx, "sequence": conf_state.head + 1 + i})
                       for i in range(writes)]
    conf_cmds = _publish_commands(conf_state, conf_owner, conf_pub, masked_payloads, tags, 100)
    plain_state, plain_owner, plain_pub = _stream(False)
    plain_cmds = _publish_commands(plain_state, plain_owner, plain_pub, [plaintext] * writes, {}, 100)
    plain_rate, _ = _write_rate(plain_state, plain_cmds)
    conf_rate, _ = _write_rate(conf_state, conf_cmds)
    out["writer"] = {"msgs_per_s": conf_rate, "plain_msgs_per_s": plain_rate, "ratio": conf_rate / plain_rate,
                     "us_p50": 1e6 / conf_rate, "plain_us_p50": 1e6 / plain_rate}
    print(f"\npublish and read paths, {size} B messages (confidential beside plain, one message per call):")
    for name, row in out.items():
        print(f"{name:>10}: {row['msgs_per_s']:>9,.0f}/s ({row['us_p50']:.1f} µs)  "
              f"plain {row['plain_msgs_per_s']:>9,.0f}/s ({row['plain_us_p50']:.1f} µs)  ratio {row['ratio']:.2f}")
    return out


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
    ctx: dict[str, Any] = {"keyload_id": kid, "stream_id": SID, "sequence": 42, "branch": "main", "kind": "tick",
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
    report["paths"] = paths(args.payload, args.seconds)
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
