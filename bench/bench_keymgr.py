"""Benchmark of paid feeds: stream_encrypt / stream_decrypt beside raw XChaCha20-Poly1305, in one run.

    .venv/bin/python bench/bench_keymgr.py [--phases crypto,http,purchases] [--json PATH] [--plot PATH]

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

The live phases share one stack: an embedded KRaft broker, one worker, one projection and the
key manager (as `watchtower up` starts them), a paid stream and a subscriber who bought two epochs.

Phase ``http``: the same 16,344 B plaintext through the key-manager service, ``POST
/v1/keymgr/encrypt`` signed by the stream owner and ``POST /v1/keymgr/decrypt`` signed by the
entitled subscriber, one keep-alive connection each, one request at a time (signing, JSON, HTTP,
the access checks and the crypto), alternated with raw AEAD calls: MB/s and the ratio to raw.
``GET /v1/keymgr/public-key`` on the same connection is the HTTP floor (no signature, no work).

Phase ``purchases``: `--accounts` funded accounts each buy `--purchases` successive epochs of one paid
stream, one purchase in flight per account (an instance keeps only its caller's last nonce), so
`--accounts` is the concurrency. Each purchase is the whole saga: the paid instance's decision,
the payer's debit, both treasury credits and the settlement, answered to the caller. Reported:
purchases/s over the wall time and the per-purchase latency (send to answer) p50/p99. Baseline in
the same run, on the same broker: a raw confluent-kafka transactional producer writing the same
number of records, one transaction per record and one transaction per `--raw-batch` records.

The JSON result goes to ``--json`` (default ``artifacts/bench_keymgr.json``). A script, not a test.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "workers"))

import nacl.bindings
import nacl.signing
from confluent_kafka import Producer
from kafka_fixture import embedded_spec, free_ports
from ledger_load import Account, Sender, paid_stream_body

from watchtower.gateway.transport import CommandClient
from watchtower.keymgr.kek import new_kek_text, read_kek_file
from watchtower.local.broker import LocalKafka
from watchtower.local.stack import ServiceSet
from watchtower.protocol.confidential import envelope
from watchtower.protocol.constants import MAX_EFFECTIVE_PLAINTEXT_BYTES
from watchtower.protocol.ledger.billing import key_epoch_at
from watchtower.protocol.signed_command import sign_command
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import TopicSpec, catalogue
from watchtower.topics.connection import kafka_config

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


def alternate(cases: dict[str, Callable[[], object]], seconds: float, batch: int,
              batches: dict[str, int] | None = None) -> dict[str, list[float]]:
    """Per-operation seconds of each case, one sample per batch (`batches[name]` operations, else
    `batch`), cases interleaved batch by batch."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    deadline = time.perf_counter() + seconds * len(cases)
    while time.perf_counter() < deadline:
        for name, fn in cases.items():
            n = (batches or {}).get(name, batch)
            start = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - start) / n)
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


def print_crypto(res: dict[str, Any], where: str = "in process") -> None:
    print(f"crypto {where}, {res['plaintext_bytes']:,} B plaintext per operation")
    print(f"  {'case':<28}{'median µs':>11}{'p99 µs':>10}{'MB/s':>10}{'vs raw':>9}")
    for name, r in res["cases"].items():
        print(f"  {name:<28}{r['median_us']:>11.1f}{r['p99_us']:>10.1f}{r['mb_per_s']:>10.1f}{r['vs_raw']:>8.3f}x")


# ----------------------------------------------------------------------------- phase: purchases
def dist_ms(seconds: Sequence[float]) -> dict[str, float]:
    ms = [x * 1000 for x in seconds]
    return {"n": len(ms), "p50": pct(ms, 50), "p99": pct(ms, 99), "max": max(ms) if ms else math.nan}


def buy_all(sender: Sender, accounts: list[Account], stream_id: str, first_target: int,
            purchases: int) -> tuple[float, list[float], int]:
    """Every account buys `purchases` successive epochs; (wall seconds, latencies, refusals)."""
    latencies: list[float] = []
    refusals = [0]
    lock = threading.Lock()

    def one_account(account: Account) -> None:
        for k in range(purchases):
            answer = sender.send(account.acquire(stream_id, first_target + k))
            with lock:
                latencies.append(answer.seconds)
                refusals[0] += 0 if answer.ok else 1

    threads = [threading.Thread(target=one_account, args=(a,)) for a in accounts]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, latencies, refusals[0]


def raw_transactions(bootstrap: str, topic: str, n: int, per_txn: int, size: int = 300) -> dict[str, Any]:
    """A raw transactional producer writing `n` records, `per_txn` per transaction: records/s and
    the per-transaction commit latency."""
    producer = Producer(kafka_config(bootstrap, **{"transactional.id": f"bench-raw-{uuid.uuid4().hex}",
                                                   "enable.idempotence": True, "acks": "all", "linger.ms": 2}))
    producer.init_transactions(30)
    value = os.urandom(size)
    latencies = []
    t0 = time.perf_counter()
    for start in range(0, n, per_txn):
        t = time.perf_counter()
        producer.begin_transaction()
        for i in range(start, min(n, start + per_txn)):
            producer.produce(topic, key=f"k{i % 64}".encode(), value=value)
        producer.commit_transaction(30)
        latencies.append(time.perf_counter() - t)
    wall = time.perf_counter() - t0
    return {"records": n, "per_txn": per_txn, "records_per_s": n / wall, "txn_latency_ms": dist_ms(latencies)}


@dataclass
class Running:
    """The stack the live phases share: broker, worker, projection and key manager."""

    bootstrap: str
    prefix: str
    services: ServiceSet
    sender: Sender
    owner: Account
    subscriber: Account  # bought epochs `epoch` .. `epoch + 1` of `stream_id`
    stream_id: str
    epoch: int


@contextmanager
def running_stack(args: argparse.Namespace) -> Iterator[Running]:
    """Start everything `watchtower up` starts, fund the owner, create a paid stream and make one
    purchase (which also waits until the paid instance has heard of the stream)."""
    tmp = Path(tempfile.mkdtemp(prefix="wt-bench-keymgr-"))
    minter, owner, subscriber = Account(), Account(), Account()
    kek_file = tmp / "kek.key"
    kek_file.write_text(new_kek_text())
    kek_file.chmod(0o600)
    os.environ["WATCHTOWER_CBY_MINTER"] = minter.address  # inherited by the worker
    os.environ["WATCHTOWER_KEYMGR_PUBLIC_KEY"] = read_kek_file(kek_file).receipt_public_key().hex()
    os.environ.setdefault("WATCHTOWER_PROTOCOL_TREASURY", "0x" + "7e" * 32)
    lk = LocalKafka(embedded_spec(tmp / "kafka"))
    services: ServiceSet | None = None
    client: CommandClient | None = None
    try:
        lk.up()
        bootstrap, prefix = lk.spec.bootstrap, f"bench{uuid.uuid4().hex[:8]}"
        ensure_topics(bootstrap, catalogue(prefix, partitions=args.partitions))
        services = ServiceSet(bootstrap, prefix, tmp / "logs", api_port=free_ports(1)[0])
        services.start_worker("w1")
        services.start_projection("p1")
        services.start_keymgr(free_ports(1)[0], kek_file)
        services.wait_ready()
        services.wait_keymgr()
        client = CommandClient(bootstrap, prefix=prefix)
        sender = Sender(client, attempt_timeout_s=120.0, give_up_s=600.0)
        for account in (owner, subscriber):
            sender.ok(minter.mint(account.address, 10**12))
        stream_id = f"bench-paid-{uuid.uuid4().hex[:8]}"
        sender.ok(owner.sign("create_stream", stream_id, paid_stream_body(owner, owner.key, fee=100, bps=250)))
        epoch = key_epoch_at(int(time.time() * 1000), 3600)
        warm = subscriber.acquire(stream_id, epoch + 1)
        deadline = time.monotonic() + 120
        while not (answer := sender.send(warm)).ok:
            if answer.code != "NOT_PLATFORM_MANAGED_STREAM" or time.monotonic() > deadline:
                raise RuntimeError(f"the warm-up purchase was refused: {answer.code}: {answer.message}")
            time.sleep(0.2)
        yield Running(bootstrap, prefix, services, sender, owner, subscriber, stream_id, epoch)
    finally:
        if client is not None:
            client.close()
        if services is not None:
            services.stop()
        lk.down()
        shutil.rmtree(tmp, ignore_errors=True)


def phase_purchases(run: Running, args: argparse.Namespace) -> dict[str, Any]:
    accounts = [Account() for _ in range(args.accounts)]
    for account in accounts:  # the owner holds 10**12 CBY: it funds the buyers by transfer
        run.sender.ok(run.owner.transfer(account.address, 10**9))
    wall, latencies, refusals = buy_all(run.sender, accounts, run.stream_id, run.epoch + 2, args.purchases)
    n = len(latencies)
    raw_topic = f"{run.prefix}.bench.raw-txn"
    ensure_topics(run.bootstrap, [TopicSpec("bench", raw_topic, args.partitions, 3_600_000)])
    return {
        "accounts": args.accounts, "purchases": n, "refused": refusals, "resends": run.sender.resends,
        "purchases_per_s": n / wall, "latency_ms": dist_ms(latencies),
        "raw_txn_per_record": raw_transactions(run.bootstrap, raw_topic, n, 1),
        "raw_txn_batched": raw_transactions(run.bootstrap, raw_topic, n, args.raw_batch),
    }


# ----------------------------------------------------------------------------- phase: keymgr HTTP
class KeymgrHttp:
    """Signed requests to the key manager over one keep-alive connection."""

    def __init__(self, url: str, account: Account) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        self.account, self.last = account, 0

    def get(self, path: str) -> dict[str, Any]:
        self.conn.request("GET", path)
        resp = self.conn.getresponse()
        return dict(json.loads(resp.read()))

    def post(self, route: str, method: str, stream_id: str, body: dict[str, Any]) -> dict[str, Any]:
        self.last = max(self.last + 1, time.time_ns() // 1_000)  # the service wants clock nonces
        cmd = sign_command(self.account.key, method, stream_id, self.last, body)
        self.conn.request("POST", f"/v1/keymgr/{route}", json.dumps({"command": cmd.to_dict()}),
                          {"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        reply = json.loads(resp.read())
        if resp.status != 200:
            raise RuntimeError(f"{route}: {resp.status} {reply}")
        return dict(reply)


def phase_http(run: Running, args: argparse.Namespace) -> dict[str, Any]:
    """stream_encrypt by the owner and stream_decrypt by the entitled subscriber through the
    service, at `--size` bytes, alternated request by request, beside raw AEAD timed in between."""
    assert run.services.keymgr_url is not None
    sid, epoch = run.stream_id, run.epoch + 1
    aad = envelope.envelope_aad(stream_id=sid, sequence=1, key_epoch=epoch, kind=KIND, content_type=CONTENT_TYPE)
    plaintext = os.urandom(args.size)
    enc, dec = KeymgrHttp(run.services.keymgr_url, run.owner), KeymgrHttp(run.services.keymgr_url, run.subscriber)
    sealed = bytes.fromhex(enc.post("encrypt", "stream_encrypt", sid, {"key_epoch": epoch, "aad": aad,
                                                                        "plaintext": plaintext})["envelope_hex"])
    key, nonce = os.urandom(32), os.urandom(24)
    raw_ct = nacl.bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, aad, nonce, key)

    def decrypt() -> object:
        opened = dec.post("decrypt", "stream_decrypt", sid, {"beneficiary_account": run.subscriber.address,
                                                             "key_epoch": epoch, "aad": aad, "envelope": sealed})
        assert bytes.fromhex(opened["plaintext_hex"]) == plaintext
        return opened

    cases: dict[str, Callable[[], object]] = {
        "raw aead encrypt": lambda: nacl.bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(
            plaintext, aad, nonce, key),
        "http stream_encrypt": lambda: enc.post("encrypt", "stream_encrypt", sid,
                                                {"key_epoch": epoch, "aad": aad, "plaintext": plaintext}),
        "raw aead decrypt": lambda: nacl.bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(raw_ct, aad, nonce, key),
        "http stream_decrypt": decrypt,
        "http GET public-key (floor)": lambda: enc.get("/v1/keymgr/public-key"),
    }
    # Raw AEAD in batches (a single call is below the timer's resolution), HTTP one request a time.
    samples = alternate(cases, args.http_seconds, 1, {"raw aead encrypt": 50, "raw aead decrypt": 50})
    out = {name: summarize(per_op, args.size) for name, per_op in samples.items()}
    out["http GET public-key (floor)"]["vs_raw"] = math.nan
    for name in ("http stream_encrypt", "http stream_decrypt"):
        floor = name.replace("http stream_", "raw aead ")
        out[name]["vs_raw"] = out[name]["mb_per_s"] / out[floor]["mb_per_s"]
        out[name]["raw"] = floor  # type: ignore[assignment]
    for name in ("raw aead encrypt", "raw aead decrypt"):
        out[name]["vs_raw"] = 1.0
    return {"plaintext_bytes": args.size, "cases": out}


def print_purchases(r: dict[str, Any]) -> None:
    lat = r["latency_ms"]
    print(f"purchases through the workers: {r['purchases']:,} by {r['accounts']} accounts "
          f"({r['refused']} refused, {r['resends']} resends)")
    print(f"  {'case':<34}{'per s':>10}{'p50 ms':>9}{'p99 ms':>9}")
    print(f"  {'acquire_epoch_access (whole saga)':<34}{r['purchases_per_s']:>10,.0f}"
          f"{lat['p50']:>9.1f}{lat['p99']:>9.1f}")
    for key, label in (("raw_txn_per_record", "raw txn, 1 record each"), ("raw_txn_batched", "raw txn, batched")):
        raw = r[key]
        name = label if raw["per_txn"] == 1 else f"raw txn, {raw['per_txn']} records each"
        print(f"  {name:<34}{raw['records_per_s']:>10,.0f}{raw['txn_latency_ms']['p50']:>9.1f}"
              f"{raw['txn_latency_ms']['p99']:>9.1f}")
    ratio = r["purchases_per_s"] / r["raw_txn_per_record"]["records_per_s"]
    print(f"  purchases/s vs raw txn per record: {ratio:.2f}x")


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
    parser.add_argument("--phases", default="crypto,http,purchases", help="comma-separated: crypto, http, purchases")
    parser.add_argument("--http-seconds", type=float, default=5.0, help="seconds per HTTP case")
    parser.add_argument("--accounts", type=int, default=32, help="purchasing accounts (the concurrency)")
    parser.add_argument("--purchases", type=int, default=30, help="purchases per account")
    parser.add_argument("--raw-batch", type=int, default=100, help="records per raw batched transaction")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--json", metavar="PATH", default="artifacts/bench_keymgr.json")
    parser.add_argument("--plot", metavar="PATH", help="write the MB/s bars as a PNG to PATH")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"config": {k: v for k, v in vars(args).items() if k not in ("json", "plot")},
                              "cpus": os.cpu_count(), "loadavg": os.getloadavg()}
    phases = set(args.phases.split(","))
    if "crypto" in phases:
        report["crypto"] = phase_crypto(args.seconds, args.batch, args.size)
        print_crypto(report["crypto"])
    if phases & {"http", "purchases"}:
        with running_stack(args) as run:
            if "http" in phases:
                report["http"] = phase_http(run, args)
                print_crypto(report["http"], "through the key-manager service (HTTP, signed requests)")
            if "purchases" in phases:
                report["purchases"] = phase_purchases(run, args)
                print_purchases(report["purchases"])
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"wrote {args.json}")
    if args.plot and "crypto" in report:
        plot(report, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
