"""The Watchtower stack on the embedded 3-node KRaft cluster, and the broker-failover scenario.

`cluster_stack` starts a 3-node cluster (RF 3, min ISR 2, every node a broker and a KRaft voter)
and the stack on it (stream-actor workers and a projection, as `start_stack` does on one node).

`FailoverRun` is the scenario that `tests/workers/test_broker_failover.py` asserts on and
`bench/bench_failover.py` measures: signed publishes across several streams, sent through the
real command path (the Kafka command transport, one client per publisher thread, a bounded
window of publishes in flight each, as the benches batch them), while two brokers are killed
with SIGKILL one after the other and started again. `check_run` then reads the messages archive
and the projection back and returns what it found; it asserts nothing itself.

Why one broker at a time: with 3 KRaft voters, 2 down loses the metadata quorum and, with
min ISR 2, every partition stops taking writes, which is an outage, not a failover. So the second
broker is killed only after the first one is back *and* every partition has its 3 replicas in
sync again: that is the failure a 3-node cluster promises to absorb without losing a write.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nacl.signing
from api_calls import http
from confluent_kafka.admin import AdminClient
from kafka_fixture import embedded_spec
from stack_fixture import start_stack
from waiting import let_time_pass, wait_until

from watchtower.cli.message_log import read_committed_messages
from watchtower.gateway.transport import CommandClient
from watchtower.local.broker import LocalKafka
from watchtower.local.stack import ServiceSet
from watchtower.projections.rebuild import rebuild_digest
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.signing import sign_message, verify_with_schedule
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage
from watchtower.topics.connection import kafka_config

CAPACITY = 100_000  # every publish stays in its stream's window, so the projection serves them all
PAGE = 500


@contextmanager
def cluster_stack(work_dir: Path, *, workers: int = 2, partitions: int = 3) -> Iterator[tuple[LocalKafka, ServiceSet]]:
    """A running 3-node cluster and a stack (``workers`` workers, one projection) on it."""
    lk = LocalKafka(embedded_spec(work_dir / "cluster", nodes=3))
    try:
        lk.up()
        with start_stack(lk.spec.bootstrap, work_dir / "logs", workers=workers, partitions=partitions) as services:
            yield lk, services
    finally:
        lk.down()


# ----------------------------------------------------------------------------- the cluster's state
def _metadata(bootstrap: str) -> Any:
    return AdminClient(kafka_config(bootstrap, log_level=0)).list_topics(timeout=10)


def busiest_broker(bootstrap: str, prefix: str, exclude: set[int]) -> int:
    """The live broker that leads the most partitions of the stack's topics (the costliest to lose)."""
    md = _metadata(bootstrap)
    leaders: Counter[int] = Counter({b: 0 for b in md.brokers if b not in exclude})
    for name, topic in md.topics.items():
        if name.startswith(prefix + ".") or name.startswith("__"):
            leaders.update(p.leader for p in topic.partitions.values() if p.leader in leaders)
    return leaders.most_common(1)[0][0]


def wait_fully_replicated(bootstrap: str, replicas: int = 3, timeout_s: float = 180.0) -> None:
    """Until every partition of every topic (internal ones included) has ``replicas`` in-sync replicas."""
    short: list[str] = []

    def replicated() -> bool:
        nonlocal short
        try:
            short = [f"{n}/{p.id}" for n, t in _metadata(bootstrap).topics.items() for p in t.partitions.values()
                     if len(p.isrs) < replicas]
        except Exception as exc:  # a metadata request during a failover may fail: ask again
            short = [repr(exc)]
        return not short

    wait_until(lambda: f"{replicas} in-sync replicas everywhere (still under-replicated: {short[:5]})", replicated,
               timeout_s=timeout_s, every_s=0.5)


# ----------------------------------------------------------------------------- publishing
@dataclass
class Publish:
    """One signed publish and what became of it (times are ``time.monotonic()``)."""

    stream_id: str
    sequence: int
    command: Command
    signature: bytes
    submitted: float = 0.0
    answered: float | None = None
    error: str | None = None  # the spec code and message of a refusal

    @property
    def acked(self) -> bool:
        return self.answered is not None and self.error is None


def presign(streams: list[str], per_stream: int, owner: nacl.signing.SigningKey,
            publisher: nacl.signing.SigningKey) -> list[Publish]:
    """Every publish signed up front (signing is not what is measured), round-robin over streams."""
    out = []
    for seq in range(1, per_stream + 1):
        for sid in streams:
            msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=1_790_000_000_000 + seq, kind="tick",
                               payload=seq.to_bytes(8, "big") * 16, signing_key=publisher,
                               content_type="application/octet-stream", tags={"n": seq})
            # Nonce 1 was the stream's create command.
            out.append(Publish(sid, seq, sign_command(owner, "publish", sid, seq + 1, msg.to_json_dict()),
                               msg.publisher_sig))
    return out


class Publisher(threading.Thread):
    """Submits its publishes in order at ``rate`` msg/s, at most ``inflight`` unanswered at once."""

    def __init__(self, client: CommandClient, items: list[Publish], rate: float, inflight: int) -> None:
        super().__init__(name="failover-publisher", daemon=True)
        self.client, self.items, self.rate = client, items, rate
        self.slots = threading.BoundedSemaphore(inflight)
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            t0 = time.monotonic()
            for i, item in enumerate(self.items):
                delay = t0 + i / self.rate - time.monotonic()
                if delay > 0:
                    let_time_pass(delay, "the publishes go out at `rate`, before, during and after the kills")
                # A full window waits for answers: that is the stall a client sees during a failover.
                while not self.slots.acquire(timeout=0.2):
                    if self.halt.is_set():
                        return
                item.submitted = time.monotonic()
                self.client.submit(item.command).add_done_callback(self._answer(item))
        except BaseException as exc:
            self.error = exc

    def _answer(self, item: Publish) -> Any:
        def done(fut: Future[dict[str, Any]]) -> None:
            exc = fut.exception()
            if exc is not None:
                code = exc.code if isinstance(exc, WatchtowerError) else type(exc).__name__
                item.error = f"{code}: {exc}"
            item.answered = time.monotonic()
            self.slots.release()
        return done


@dataclass
class FailoverRun:
    """Publish ``streams`` x ``per_stream`` messages while killing (-9) and restarting two brokers.

    The first broker is killed once ``kill_first_at`` of the publishes are answered, and started
    again ``down_s`` later; the second once ``kill_second_at`` are answered and the cluster is
    fully replicated again. Each victim is the live broker leading the most of the stack's
    partitions at that moment. ``timeline`` holds (monotonic time, what happened).
    """

    lk: LocalKafka
    services: ServiceSet
    streams: int = 10
    per_stream: int = 2_000
    publishers: int = 2
    rate: float = 250.0
    inflight: int = 200
    down_s: float = 5.0
    kill_first_at: float = 0.15
    kill_second_at: float = 0.5
    answer_timeout_s: float = 300.0
    publisher_key: nacl.signing.SigningKey = field(default_factory=nacl.signing.SigningKey.generate)
    items: list[Publish] = field(default_factory=list)
    stream_ids: list[str] = field(default_factory=list)
    timeline: list[tuple[float, str]] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)

    def note(self, what: str) -> float:
        now = time.monotonic()
        self.timeline.append((now, what))
        return now

    def answered(self) -> int:
        return sum(1 for p in self.items if p.answered is not None)

    def run(self) -> None:
        bootstrap, prefix = self.lk.spec.bootstrap, self.services.prefix
        owner = nacl.signing.SigningKey.generate()
        self.stream_ids = [f"failover.{prefix}.{i}" for i in range(self.streams)]
        setup = CommandClient(bootstrap, prefix=prefix)
        try:
            body = {"publisher_key_hex": bytes(self.publisher_key.verify_key).hex(), "ring_buffer_capacity": CAPACITY}
            futures = [setup.submit(sign_command(owner, "create_stream", sid, 1, body)) for sid in self.stream_ids]
            setup.flush()
            for f in futures:
                f.result(120)
        finally:
            setup.close()
        self.items = presign(self.stream_ids, self.per_stream, owner, self.publisher_key)
        clients = [CommandClient(bootstrap, prefix=prefix) for _ in range(self.publishers)]
        mine = [[p for p in self.items if self.stream_ids.index(p.stream_id) % self.publishers == k]
                for k in range(self.publishers)]
        threads = [Publisher(c, items, self.rate / self.publishers, self.inflight // self.publishers)
                   for c, items in zip(clients, mine, strict=True)]
        try:
            self.note("publishing starts")
            for t in threads:
                t.start()
            self._fail_over(self.kill_first_at, threads)
            wait_fully_replicated(bootstrap)
            self.note("every partition has 3 in-sync replicas again")
            self._fail_over(self.kill_second_at, threads)
            wait_fully_replicated(bootstrap)
            self.note("every partition has 3 in-sync replicas again")
            for t in threads:
                t.join(self.answer_timeout_s + len(self.items) / self.rate)
            self.note("every publish submitted")
            wait_until(lambda: f"an answer to every publish ({self.answered()} of {len(self.items)})",
                       lambda: self.answered() >= len(self.items), timeout_s=self.answer_timeout_s, every_s=0.2)
            self.note("publishing ends")
        finally:
            for t in threads:
                t.halt.set()
            for c in clients:
                c.close()
        errors = [t.error for t in threads if t.error is not None]
        if errors:
            raise RuntimeError(f"a publisher failed: {errors[0]!r}")

    def _fail_over(self, at: float, threads: list[Publisher]) -> None:
        """Kill -9 the busiest broker once ``at`` of the publishes are answered; restart it."""
        def answered_enough() -> bool:
            if self.answered() >= at * len(self.items):
                return True
            if not any(t.is_alive() for t in threads):
                raise AssertionError(f"the publishers stopped with only {self.answered()} of {len(self.items)} "
                                     "publishes answered before a kill")
            return False

        wait_until(lambda: f"{at:.0%} of the publishes answered before a kill ({self.answered()} of {len(self.items)})",
                   answered_enough, timeout_s=self.answer_timeout_s + len(self.items) / self.rate, every_s=0.1)
        victim = busiest_broker(self.lk.spec.bootstrap, self.services.prefix, set())
        self.lk.kill_node(victim, signal.SIGKILL)
        self.killed.append(victim)
        self.note(f"kill -9 broker {victim}")
        let_time_pass(self.down_s, "the broker stays down this long while the publishes go on")
        self.note(f"restart broker {victim}")
        self.lk.up()
        self.note(f"broker {victim} answers again")


# ----------------------------------------------------------------------------- checking
def _ready_answer(url: str) -> tuple[int, Any] | None:
    """GET `url`, or None on 503 NOT_READY (a payload is still being read back from the log)."""
    answer = http("GET", url)
    return None if answer[0] == 503 else answer


def projection_messages(api: str, sid: str, head: int) -> list[dict[str, Any]]:
    """Every message of ``sid`` up to ``head`` through get_since pages."""
    out: list[dict[str, Any]] = []
    cursor = 0
    while cursor < head:
        url = f"{api}/v1/streams/{sid}/messages?cursor={cursor}&limit={PAGE}"
        status, page = wait_until(f"get_since {sid} cursor {cursor} to answer other than 503 NOT_READY",
                                  lambda url=url: _ready_answer(url), timeout_s=10, every_s=0.2)
        if status != 200:
            raise AssertionError(f"get_since {sid} cursor {cursor}: HTTP {status} {page}")
        out.extend(page["messages"])
        if int(page["next_cursor"]) <= cursor:
            break
        cursor = int(page["next_cursor"])
    return out


def _sequence_report(sequences: list[int], acked: set[int], signed: dict[int, bytes],
                     messages: list[StreamMessage], schedule: KeySchedule) -> dict[str, Any]:
    """Gaps/duplicates, acknowledged-but-missing, signature problems of one stream's messages."""
    return {"count": len(sequences),
            "gapless": sequences == list(range(1, len(sequences) + 1)),
            "acked_missing": sorted(acked - set(sequences)),
            "bad_signatures": [m.sequence for m in messages if not verify_with_schedule(m, schedule)],
            "not_ours": [m.sequence for m in messages if signed.get(m.sequence) != m.publisher_sig]}


def check_run(run: FailoverRun, timeout_s: float = 300.0) -> dict[str, Any]:
    """Read the archive and the projection back; figures per stream and the digests. Judges nothing
    itself: it waits (up to `timeout_s` each) for the projection to reach the archive's heads and for
    the live digest to equal the rebuild's, and fails only when one of those never happens."""
    bootstrap, prefix, api = run.lk.spec.bootstrap, run.services.prefix, run.services.api_url
    schedule = KeySchedule.initial(bytes(run.publisher_key.verify_key))
    acked: dict[str, set[int]] = defaultdict(set)
    signed: dict[str, dict[int, bytes]] = defaultdict(dict)
    for p in run.items:
        signed[p.stream_id][p.sequence] = p.signature
        if p.acked:
            acked[p.stream_id].add(p.sequence)
    archive: dict[str, list[StreamMessage]] = defaultdict(list)
    for m in read_committed_messages(bootstrap, prefix=prefix):
        archive[m.stream_id].append(m)
    heads = {sid: len(archive[sid]) for sid in run.stream_ids}

    def caught_up() -> bool:
        for sid, head in heads.items():
            status, body = http("GET", f"{api}/v1/streams/{sid}/head")
            if status != 200 or body["head_sequence"] != head:
                return False
        return True

    wait_until(f"the projection to reach the archive's heads {heads}", caught_up, timeout_s=timeout_s, every_s=0.5)
    report: dict[str, Any] = {"archive": {}, "projection": {}, "heads": heads}
    for sid in run.stream_ids:
        logged = archive[sid]
        report["archive"][sid] = _sequence_report([m.sequence for m in logged], acked[sid], signed[sid], logged,
                                                  schedule)
        served = [StreamMessage.from_json_dict(d) for d in projection_messages(api, sid, heads[sid])]
        report["projection"][sid] = _sequence_report([m.sequence for m in served], acked[sid], signed[sid], served,
                                                     schedule)
    offline = rebuild_digest(bootstrap, prefix)
    live: dict[str, Any] = {}

    def same_digest() -> bool:
        nonlocal live
        _status, live = http("GET", f"{api}/v1/admin/digest")
        return bool(live.get("digest") == offline["digest"])

    wait_until(lambda: f"the live digest to equal the rebuild's {offline['digest']} (live: {live})", same_digest,
               timeout_s=timeout_s, every_s=0.5)
    report["digest"] = {"live": live.get("digest"), "rebuild": offline["digest"], "counts": offline["counts"],
                        "live_quarantined": live.get("quarantined"), "rebuild_quarantined": offline["quarantined"]}
    report["acked"] = sum(len(v) for v in acked.values())
    report["present"] = sum(heads.values())
    report["errors"] = Counter(p.error.split(":")[0] for p in run.items if p.error)
    report["unanswered"] = sum(1 for p in run.items if p.answered is None)
    return report
