"""Two workers share the partitions; one leaves gracefully mid-run and comes back.

A client publishes to six streams spread over every partition the whole time. Worker B is
stopped with SIGTERM (its partitions move to A) and later started again (they move back). Every
acknowledged publish must be in the log exactly once, every stream numbered 1..N with no gap or
duplicate, every signature valid, and each partition written by one owner at a time.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from waiting import let_time_pass, wait_until
from worker_harness import partition_for, read_all_messages, read_committed_events, wait_for_assignment, workers

from watchtower.gateway.transport import CommandClient
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message, verify_with_schedule
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.topics.catalogue import topic_name

pytestmark = pytest.mark.integration

PARTITIONS = 4
STREAMS = 6
# Publishes acknowledged in each phase before it ends; the phases' boundaries are the rebalances.
PHASE_ACKS = 20 * STREAMS
PHASE_TIMEOUT_S = 300.0


def spread_streams(prefix: str) -> list[str]:
    """STREAMS stream ids covering every partition (murmur2, as the clients place them)."""
    chosen: list[str] = []
    by_partition: dict[int, int] = defaultdict(int)
    i = 0
    while len(chosen) < STREAMS:
        sid = f"rebalance.{prefix}.{i}"
        i += 1
        p = partition_for(sid, PARTITIONS)
        # Fill every partition once before any partition gets a second stream.
        if by_partition[p] < (1 if len(chosen) < PARTITIONS else 2):
            by_partition[p] += 1
            chosen.append(sid)
    return chosen


class Publisher(threading.Thread):
    """Publishes head+1 to every stream, round after round, until stopped; records every future."""

    def __init__(self, client: CommandClient, owner: nacl.signing.SigningKey,
                 publisher: nacl.signing.SigningKey, stream_ids: list[str]) -> None:
        super().__init__(name="publisher", daemon=True)
        self.client, self.owner, self.publisher, self.stream_ids = client, owner, publisher, stream_ids
        self.phase = "both"
        self.futures: list[tuple[str, str, int, Future[dict[str, Any]]]] = []  # phase, stream, sequence, reply
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            seq = 0
            while not self.halt.is_set():
                seq += 1
                for sid in self.stream_ids:
                    msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=1_790_000_000_000 + seq,
                                       kind="tick", payload=f'{{"n":{seq}}}'.encode(), signing_key=self.publisher,
                                       tags={"n": seq})
                    # Nonce 1 created the stream, so publish `seq` is the owner's nonce seq+1.
                    cmd = sign_command(self.owner, "publish", sid, seq + 1, msg.to_json_dict())
                    self.futures.append((self.phase, sid, seq, self.client.submit(cmd)))
                self.client.flush()
                let_time_pass(0.02, "a steady load through the rebalances, not a flood")
        except BaseException as exc:
            self.error = exc

    def wait_acked(self, phase: str, count: int = PHASE_ACKS) -> None:
        """Until `count` publishes submitted in `phase` are answered (or the publisher failed)."""

        def answered() -> bool:
            if sum(1 for p, _s, _q, f in list(self.futures) if p == phase and f.done()) >= count:
                return True
            assert self.error is None, f"the publisher failed: {self.error!r}"
            return False

        wait_until(f"{count} publishes answered in phase {phase}", answered, timeout_s=PHASE_TIMEOUT_S, every_s=0.05)


def test_publishes_survive_a_worker_leaving_and_rejoining(kafka_bootstrap: str, tmp_path: Path) -> None:
    owner, publisher = nacl.signing.SigningKey.generate(), nacl.signing.SigningKey.generate()
    with workers(kafka_bootstrap, partitions=PARTITIONS, log_dir=tmp_path) as w:
        a, b = f"{w.prefix}-a", f"{w.prefix}-b"
        commands = topic_name("commands", w.prefix)
        w.start(a)
        w.start(b)
        client = CommandClient(kafka_bootstrap, prefix=w.prefix)
        stream_ids = spread_streams(w.prefix)
        assert {partition_for(s, PARTITIONS) for s in stream_ids} == set(range(PARTITIONS))
        splits: list[dict[str, frozenset[int]]] = []
        try:
            for sid in stream_ids:
                cfg = {"stream_id": sid, "owner": address_from_public_key(bytes(owner.verify_key)),
                       "publisher_key_hex": bytes(publisher.verify_key).hex(), "ring_buffer_capacity": 10_000}
                client.call(sign_command(owner, "create_stream", sid, 1, cfg), timeout=120)
            splits.append(wait_for_assignment(kafka_bootstrap, commands, members=2, partitions=PARTITIONS))

            pub = Publisher(client, owner, publisher, stream_ids)
            pub.start()
            pub.wait_acked("both")

            # First rebalance: B leaves gracefully mid-run; A takes every partition.
            pub.phase = "b-leaving"
            assert w.terminate(b) == 0, f"worker B did not stop cleanly:\n{w.log(b)}"
            alone = wait_for_assignment(kafka_bootstrap, commands, members=1, partitions=PARTITIONS)
            assert set(alone) == {f"wt-worker-{a}"}
            pub.phase = "a-alone"
            pub.wait_acked("a-alone")

            # Second rebalance: B comes back and takes its share again.
            pub.phase = "b-joining"
            w.start(b)
            splits.append(wait_for_assignment(kafka_bootstrap, commands, members=2, partitions=PARTITIONS))
            pub.phase = "both-again"
            pub.wait_acked("both-again")

            pub.halt.set()
            pub.join(30)
            assert pub.error is None, f"the publisher failed: {pub.error!r}"
            client.flush()
            acked: dict[str, set[int]] = defaultdict(set)
            per_phase: dict[str, int] = defaultdict(int)
            for phase, sid, seq, fut in pub.futures:
                result = fut.result(timeout=120)  # raises the spec error of any refused publish
                assert (result["sequence"], result["head_sequence"], result["floor_sequence"]) == (seq, seq, 1), \
                    f"{sid}#{seq}: {result}"
                acked[sid].add(seq)
                per_phase[phase] += 1
        finally:
            client.close()
        for worker in (a, b):
            assert w.alive(worker), f"worker {worker} died:\n{w.log(worker)}"
            assert "Traceback" not in w.log(worker), f"worker {worker} hit an unexpected error:\n{w.log(worker)}"

        # While both ran, the partitions were split: two members, each with a share, none shared.
        for split in splits:
            assert set(split) == {f"wt-worker-{a}", f"wt-worker-{b}"}, split
            shares = list(split.values())
            assert all(shares), split
            assert not shares[0] & shares[1], split
        # Publishes flowed in every phase, including across both rebalances.
        assert set(per_phase) == {"both", "b-leaving", "a-alone", "b-joining", "both-again"}, per_phase

        # The archive: exactly the acknowledged publishes, each once, 1..N, signatures valid.
        schedule = KeySchedule.initial(bytes(publisher.verify_key))
        by_stream: dict[str, list[int]] = defaultdict(list)
        for m in read_all_messages(kafka_bootstrap, w.prefix):
            assert verify_with_schedule(m, schedule), f"bad signature at {m.stream_id}#{m.sequence}"
            by_stream[m.stream_id].append(m.sequence)
        assert set(by_stream) == set(stream_ids)
        for sid in stream_ids:
            assert by_stream[sid] == list(range(1, len(by_stream[sid]) + 1)), f"{sid}: gap or duplicate"
            assert set(by_stream[sid]) == acked[sid], f"{sid}: the log differs from what was acknowledged"

        # The events: one writer per partition at a time. A second writer on a partition would
        # show as a command applied twice or a sequence that does not advance in log order.
        commands_seen: set[tuple[str, str, int]] = set()
        published: dict[str, list[int]] = defaultdict(list)
        for logged in read_committed_events(kafka_bootstrap, w.prefix):
            e = logged.event
            assert logged.partition == partition_for(e.stream_id, PARTITIONS), f"{e.stream_id} off its partition"
            key = (e.stream_id, e.caller, e.nonce)
            assert key not in commands_seen, f"command {key} applied twice"
            commands_seen.add(key)
            if e.type == "StreamMessagePublished":
                published[e.stream_id].append(int(e.body.sequence))
            else:
                assert e.type == "StreamCreated"
                assert not published[e.stream_id], f"{e.stream_id} created after its first publish"
        for sid in stream_ids:
            assert published[sid] == by_stream[sid], f"{sid}: events and messages disagree"
