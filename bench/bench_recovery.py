"""Recovery benchmark: how long a worker takes to serve after another one was killed with kill -9,
when the partition holds a long log, with snapshots (the latest snapshot plus the events tail).

For each scale (``--scale 1,10``: ``--events`` x scale events), on a fresh embedded KRaft broker:

1. seed one stream's partition with a create and N publish events, written straight to the events
   topic with a raw producer, exactly as the worker writes them (valid, gapless, each message signed
   under the stream's key; the events refer to those messages by hash);
2. start worker A (the stock worker process). It folds the whole partition (no snapshot yet), then
   serves a publish; that batch carries the partition's first snapshot (due: the fold was longer
   than the snapshot period). Reported: A's start -> first reply, i.e. recovery *without* a snapshot;
3. ``kill -9`` A, start worker B and send a publish at once. Reported: kill -> B's reply (this
   includes the group's session timeout, 10 s, before the dead member's partitions move: it does
   not depend on the log) and B's rebuild (from its "rebuilds partitions" to its "rebuilt
   partition" log lines: the snapshot load plus the tail fold), and how many events B folded;
4. with ``--full-fold``, for comparison, the time of a full fold of the partition in this process.

    .venv/bin/python bench/bench_recovery.py                 # 200,000 events
    .venv/bin/python bench/bench_recovery.py --scale 1,10    # and 2,000,000 (long: minutes)

A script, not a test (pytest only collects ``tests/``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import nacl.signing
from confluent_kafka import Producer
from kafka_fixture import embedded_spec
from tqdm import tqdm

from watchtower.gateway.transport import CommandClient
from watchtower.local.broker import LocalKafka
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.events import StreamMessagePublished
from watchtower.protocol.ledger.billing import block_height_at
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.actor import StreamState, decide
from watchtower.protocol.stream.state import Event
from watchtower.schemas.wire import encode_event
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue, topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key
from watchtower.workers.state_loader import load_partitions

_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def seed(bootstrap: str, prefix: str, sid: str, owner: nacl.signing.SigningKey, events: int, partitions: int) -> int:
    """Write a create and ``events`` publishes of ``sid``; return the number of the last nonce used."""
    block = block_height_at(int(time.time() * 1000))
    create = sign_command(owner, "create_stream", sid, 1, {"publisher_key_hex": bytes(owner.verify_key).hex(),
                                                           "ring_buffer_capacity": 1000})
    (created,) = decide(StreamState.initial(sid), create, block_height=block).events
    caller = address_from_public_key(bytes(owner.verify_key))
    producer = Producer({**kafka_config(bootstrap), "enable.idempotence": True, "acks": "all",
                         "linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4", "log_level": 3})
    t_events, partition = topic_name("events", prefix), partition_for_key(sid.encode(), partitions)
    producer.produce(t_events, key=sid.encode(), value=encode_event(created), partition=partition)
    for seq in tqdm(range(1, events + 1), desc=f"seeding {events:,} events", unit="ev", mininterval=1.0):
        msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=1_790_000_000_000 + seq, kind="tick",
                           payload=b'{"n":%d}' % seq, signing_key=owner, signing_key_id=1)
        body = StreamMessagePublished(
            stream_id=sid, version=msg.version, sequence=seq, kind=msg.kind, content_type=msg.content_type,
            payload_format=str(msg.payload_format), payload_hash=msg.payload_hash, key_epoch=msg.key_epoch,
            signing_key_id=msg.signing_key_id, timestamp_unix_ms=msg.timestamp_unix_ms)
        event = Event(stream_id=sid, block_height=block, caller=caller, nonce=seq + 1,
                      digest=hashlib.sha256(b"seed%d" % seq).digest(), reply={"sequence": seq}, body=body)
        while True:
            try:
                producer.produce(t_events, key=sid.encode(), value=encode_event(event), partition=partition)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(300) == 0, "seeding did not finish"
    return events + 1


class Worker:
    def __init__(self, bootstrap: str, prefix: str, worker_id: str, log_dir: Path) -> None:
        self.log_path = log_dir / f"{worker_id}.log"
        env = {**os.environ, "WATCHTOWER_LOG_LEVEL": "INFO"}
        with self.log_path.open("ab") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "watchtower.workers.worker_main", bootstrap, worker_id,
                                          prefix], stdout=subprocess.DEVNULL, stderr=err, env=env,
                                         start_new_session=True)

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def rebuild_s(self) -> tuple[float, int]:
        """Seconds from its last 'rebuilds partitions' line to the last 'rebuilt partition' line after it,
        and the events it folded then."""
        start = end = None
        folded = 0
        for line in self.log_path.read_text(errors="replace").splitlines():
            stamp = _LOG_TIME.match(line)
            if stamp is None:
                continue
            at = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if "rebuilds partitions" in line:
                start, end, folded = at, None, 0
            elif "rebuilt partition" in line and start is not None:
                end = at
                folded += int(re.search(r": (\d+) events folded", line).group(1))  # type: ignore[union-attr]
        if start is None or end is None:
            raise RuntimeError(f"no rebuild in {self.log_path}")
        return end - start, folded


def publish(client: CommandClient, owner: nacl.signing.SigningKey, sid: str, seq: int, nonce: int) -> dict[str, Any]:
    msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=1_790_000_000_000 + seq, kind="tick",
                       payload=b'{"n":%d}' % seq, signing_key=owner, signing_key_id=1)
    return client.call(sign_command(owner, "publish", sid, nonce, msg.to_json_dict()), timeout=600)


def one_scale(bootstrap: str, events: int, partitions: int, log_dir: Path, full_fold: bool) -> dict[str, Any]:
    prefix = f"rec{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, catalogue(prefix, partitions=partitions))
    owner = nacl.signing.SigningKey.generate()
    sid = f"recovery.{prefix}"
    t0 = time.perf_counter()
    nonce = seed(bootstrap, prefix, sid, owner, events, partitions)
    out: dict[str, Any] = {"events": events, "seed_s": time.perf_counter() - t0}
    client = CommandClient(bootstrap, prefix=prefix)
    a = b = None
    try:
        t0 = time.perf_counter()
        a = Worker(bootstrap, prefix, "A", log_dir)
        assert publish(client, owner, sid, events + 1, nonce + 1)["sequence"] == events + 1
        out["a_start_to_first_reply_s"] = time.perf_counter() - t0
        out["a_rebuild_s"], out["a_folded"] = a.rebuild_s()
        time.sleep(1.0)  # let A's group membership settle (its batch with the snapshot is committed)
        t_kill = time.perf_counter()
        a.kill9()
        b = Worker(bootstrap, prefix, "B", log_dir)
        assert publish(client, owner, sid, events + 2, nonce + 2)["sequence"] == events + 2
        out["kill_to_b_first_reply_s"] = time.perf_counter() - t_kill
        out["b_rebuild_s"], out["b_folded"] = b.rebuild_s()
    finally:
        client.close()
        for worker in (a, b):
            if worker is not None:
                worker.stop()
    if not full_fold:
        return out
    t0 = time.perf_counter()
    full = load_partitions(bootstrap, topic_name("events", prefix), [partition_for_key(sid.encode(), partitions)],
                           partitions, timeout_s=3600)
    out["full_fold_in_process_s"] = time.perf_counter() - t0
    out["full_fold_events"] = sum(s.folded for s in full.values())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000, help="events at scale 1 (default 200,000)")
    parser.add_argument("--scale", type=lambda t: [int(x) for x in t.split(",")], default=[1],
                        help="comma-separated multipliers of --events (default 1; e.g. 1,10)")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--full-fold", action="store_true",
                        help="also time a full fold of the partition in this process (as long again as A's)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    # SIGTERM runs the cleanup below (workers and broker stopped) instead of leaving them behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    tmp = Path(tempfile.mkdtemp(prefix="wt-recovery-"))
    lk = LocalKafka(embedded_spec(tmp / "kafka"))
    results = []
    try:
        lk.up()
        for scale in args.scale:
            result = one_scale(lk.spec.bootstrap, args.events * scale, args.partitions, tmp, args.full_fold)
            results.append(result)
            print(json.dumps(result, indent=2), flush=True)
    finally:
        lk.down()
    print(f"\n{'events':>10} | {'A: start->reply (full fold)':>27} | {'B: rebuild (snapshot+tail)':>26} | "
          f"{'B folded':>8} | {'kill -9 -> B reply':>18} | {'full fold here':>14}")
    for r in results:
        print(f"{r['events']:>10,} | {r['a_start_to_first_reply_s']:>26.2f}s | {r['b_rebuild_s']:>25.2f}s | "
              f"{r['b_folded']:>8} | {r['kill_to_b_first_reply_s']:>17.2f}s | " +
              (f"{r['full_fold_in_process_s']:>13.2f}s" if "full_fold_in_process_s" in r else f"{'-':>14}"))
    print(f"logs: {tmp}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
