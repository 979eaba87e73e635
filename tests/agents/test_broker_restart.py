"""kill -9 the broker under load and start it again: the worker serves again by itself.

The test runs its own single-node broker (it kills it), one worker process and a publisher that
keeps a window of signed publishes in flight to a few streams. Once the worker's health file says
``broker_unreachable``, the broker is started again on the same ports and data directory. Then:

- publishes are answered again (a probe publish sent right after the broker's return is answered,
  and the publisher makes progress), with a generous deadline as a safety net only;
- every acknowledged publish is in the messages log, and each stream's log is exactly 1..N;
- the worker is the same process the whole time, and its health file says ``serving`` again.

The time from the broker's return to the probe's answer is printed (run with ``-s``), not asserted.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from kafka_fixture import embedded_spec
from worker_harness import partition_for, read_all_messages, wait_for_health, workers

from watchtower.client.transport import CommandClient
from watchtower.local.broker import LocalKafka
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.key_schedule import KeySchedule
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message, verify_with_schedule

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 3
STREAMS = 4
WINDOW = 4  # rounds of publishes in flight at once
DEADLINE_S = 60.0  # safety net for "answered again"; the measured time is reported, not asserted


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalKafka]:
    lk = LocalKafka(embedded_spec(tmp_path / "kafka"))
    lk.up()
    try:
        yield lk
    finally:
        lk.down()


class Publisher(threading.Thread):
    """Publishes head+1 to every stream, round after round, with WINDOW rounds in flight."""

    def __init__(self, client: CommandClient, owner: nacl.signing.SigningKey,
                 publisher: nacl.signing.SigningKey, stream_ids: list[str]) -> None:
        super().__init__(name="publisher", daemon=True)
        self.client, self.owner, self.publisher, self.stream_ids = client, owner, publisher, stream_ids
        self.futures: list[tuple[str, int, Future[dict[str, Any]]]] = []
        self.answered_at: list[float] = []  # monotonic time of every answer, in arrival order
        self.halt = threading.Event()
        self.error: BaseException | None = None
        self._lock = threading.Lock()

    def answered(self) -> int:
        with self._lock:
            return len(self.answered_at)

    def answered_since(self, t: float) -> int:
        with self._lock:
            return sum(1 for a in self.answered_at if a >= t)

    def _on_answer(self, _fut: Future[dict[str, Any]]) -> None:
        with self._lock:
            self.answered_at.append(time.monotonic())

    def run(self) -> None:
        try:
            rounds: list[list[Future[dict[str, Any]]]] = []
            seq = 0
            while not self.halt.is_set():
                if len(rounds) >= WINDOW:
                    # Wait for the oldest round; the broker may be away for a while, so no timeout
                    # here (the test's own deadline decides), only a check of the halt flag.
                    for fut in rounds.pop(0):
                        while not fut.done() and not self.halt.is_set():
                            time.sleep(0.05)
                    continue
                seq += 1
                this_round = []
                for sid in self.stream_ids:
                    msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=1_790_000_000_000 + seq,
                                       kind="tick", payload=f'{{"n":{seq}}}'.encode(), signing_key=self.publisher,
                                       tags={"n": seq})
                    fut = self.client.submit(sign_command(self.owner, "publish", sid, seq + 1, msg.to_json_dict()))
                    fut.add_done_callback(self._on_answer)
                    self.futures.append((sid, seq, fut))
                    this_round.append(fut)
                rounds.append(this_round)
                self.client.producer.poll(0)
                time.sleep(0.01)
        except BaseException as exc:
            self.error = exc


def wait_until(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout:g}s")
        time.sleep(0.1)


def spread_streams(prefix: str) -> list[str]:
    """STREAMS stream ids covering every partition."""
    chosen: list[str] = []
    i = 0
    while len(chosen) < STREAMS:
        sid = f"restart.{prefix}.{i}"
        i += 1
        covered = {partition_for(s, PARTITIONS) for s in chosen}
        if partition_for(sid, PARTITIONS) not in covered or len(covered) == PARTITIONS:
            chosen.append(sid)
    return chosen


def test_worker_serves_again_after_the_broker_is_killed_and_restarted(own_broker: LocalKafka,
                                                                      tmp_path: Path) -> None:
    bootstrap = own_broker.spec.bootstrap
    owner, publisher = nacl.signing.SigningKey.generate(), nacl.signing.SigningKey.generate()
    health = tmp_path / "worker-health.json"
    with workers(bootstrap, partitions=PARTITIONS, log_dir=tmp_path) as w:
        worker = "restart"
        w.start(worker, env={"WATCHTOWER_HEALTH_FILE": str(health), "WATCHTOWER_LOG_LEVEL": "INFO"})
        pid = w.pid(worker)
        client = CommandClient(bootstrap, prefix=w.prefix)
        stream_ids = spread_streams(w.prefix)
        probe_sid = f"restart.{w.prefix}.probe"
        try:
            for sid in [*stream_ids, probe_sid]:
                cfg = {"stream_id": sid, "owner": address_from_public_key(bytes(owner.verify_key)),
                       "publisher_key_hex": bytes(publisher.verify_key).hex(), "ring_buffer_capacity": 100_000}
                client.call(sign_command(owner, "create_stream", sid, 1, cfg), timeout=120)
            wait_for_health(health, lambda h: h["state"] == "serving", timeout=30)

            pub = Publisher(client, owner, publisher, stream_ids)
            pub.start()
            wait_until("100 answered publishes", lambda: pub.answered() >= 100, timeout=60)

            # kill -9 mid-load; restart once the worker has noticed.
            own_broker.kill_node(1, signal.SIGKILL)
            killed = time.monotonic()
            down = wait_for_health(health, lambda h: h["state"] == "broker_unreachable", timeout=30)
            assert down["pid"] == pid
            noticed = time.monotonic() - killed
            own_broker.up()
            returned = time.monotonic()

            # A probe sent right after the broker's return: its answer is "serving again".
            probe = sign_message(stream_id=probe_sid, sequence=1, timestamp_unix_ms=1_790_000_000_001,
                                 kind="tick", payload=b'{"probe":1}', signing_key=publisher)
            probe_reply = client.submit(sign_command(owner, "publish", probe_sid, 2, probe.to_json_dict()))
            client.flush()
            try:
                assert probe_reply.result(timeout=DEADLINE_S)["sequence"] == 1
            except TimeoutError:
                pytest.fail(f"no answer {DEADLINE_S:g}s after the broker returned; worker log tail:\n"
                            f"{''.join(w.log(worker).splitlines(True)[-20:])}")
            served_after = time.monotonic() - returned
            print(f"\nworker reported broker_unreachable {noticed:.2f}s after the kill; the broker was back "
                  f"{returned - killed:.1f}s after the kill; the probe publish was answered {served_after:.2f}s "
                  "after the broker's return")

            wait_until("100 more answered publishes", lambda: pub.answered_since(returned) >= 100, timeout=DEADLINE_S)
            pub.halt.set()
            pub.join(30)
            assert pub.error is None, f"the publisher failed: {pub.error!r}"
            client.flush()
            acked: dict[str, set[int]] = defaultdict(set)
            for sid, seq, fut in pub.futures:
                result = fut.result(timeout=DEADLINE_S)  # raises the spec error of any refused publish
                assert result["sequence"] == seq, f"{sid}#{seq}: {result}"
                acked[sid].add(seq)
        finally:
            client.close()

        assert w.alive(worker), f"the worker died:\n{w.log(worker)}"
        assert w.pid(worker) == pid, "the worker was restarted"
        final = json.loads(health.read_text())
        assert final["state"] == "serving", final
        assert final["pid"] == pid

        schedule = KeySchedule.initial(bytes(publisher.verify_key))
        by_stream: dict[str, list[int]] = defaultdict(list)
        for m in read_all_messages(bootstrap, w.prefix):
            assert verify_with_schedule(m, schedule), f"bad signature at {m.stream_id}#{m.sequence}"
            by_stream[m.stream_id].append(m.sequence)
        assert by_stream[probe_sid] == [1]
        for sid in stream_ids:
            seqs = by_stream[sid]
            assert seqs == list(range(1, len(seqs) + 1)), f"{sid}: gap or duplicate in {seqs}"
            assert set(seqs) == acked[sid], f"{sid}: the log differs from what was acknowledged"
