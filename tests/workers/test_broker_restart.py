"""kill -9 the broker under load and start it again: every long-running service serves again by itself.

The test runs its own one-broker cluster (it kills the broker) and a whole stack on it: a stream worker, a
projection (the HTTP API), a replay worker, a push delivery worker and the Stream Key Manager, plus a
publisher that keeps a window of signed publishes in flight to a few streams. Once the worker's health
file says ``broker_unreachable`` and the key manager's health says not ready, the broker is started
again on the same ports and data directory. Then:

- publishes are answered again (a probe publish sent right after the broker's return is answered,
  and the publisher makes progress), with a generous deadline as a safety net only;
- the projection answers a read with the probe it did not have before the kill;
- the delivery worker, which pushed to its subscriber before the kill, is still the same process
  afterwards (before the fix it died on a confluent-kafka assertion, `CallState_get`, from a client
  call inside a rebalance callback); that it and the replay worker also keep serving (health file,
  a push and a replay requested after the restart) is pinned, cheaper, by
  `test_the_delivery_and_replay_workers_serve_again_after_the_broker_is_killed_and_restarted`;
- the replay worker completes a replay registered after the restart;
- the key manager serves a key fetch within 30 s of the broker's return, and the very request it
  refused while the broker was away (its nonce is not spent by a NOT_READY), then one that needs an
  account key registered after the restart (its fold of the events topic goes on). Before the fix
  its AdminClient kept a stale leader epoch and answered NOT_READY (FENCED_LEADER_EPOCH) for
  minutes, while its health said ready;
- every acknowledged publish is in the messages log, and each stream's log is exactly 1..N;
- every service is the same process the whole time, and the worker's health file says ``serving``.

The time from the broker's return to the probe's answer is printed (run with ``-s``), not asserted.

The cluster's controller runs in a JVM of its own, as in production. A single node that is broker
and controller at once, killed while a transaction commits, can lose that transaction's markers
when it comes back (it replays its own old registration and serves from it until the registration
expires, then is fenced under its queued markers): Kafka's hanging transaction, which no client can
end and which docs/operations.md leaves to ``kafka-transactions.sh``. The supervisor restarts a
killed broker only once its controller has fenced the old incarnation.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import nacl.public
import nacl.signing
import pytest
from api_calls import http
from confluent_kafka import Message
from deliveries_reader import CommittedDeliveries
from kafka_fixture import embedded_spec, free_ports
from stack_fixture import start_stack
from waiting import let_time_pass, wait_until
from worker_harness import partition_for, read_all_messages, wait_for_health

from watchtower.gateway.transport import CommandClient
from watchtower.keymgr.kek import Kek, new_kek_text
from watchtower.local.broker import LocalKafka
from watchtower.local.stack import ServiceSet
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.confidential.envelope import unwrap_epoch_key
from watchtower.protocol.constants import MAX_UINT32
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message, verify_with_schedule
from watchtower.protocol.stream.key_schedule import KeySchedule

pytestmark = pytest.mark.integration

PARTITIONS = 3
STREAMS = 4
WINDOW = 4  # rounds of publishes in flight at once
DEADLINE_S = 60.0  # safety net for "answered again"; the measured time is reported, not asserted
SERVICES = ("worker-w1", "projection-p1", "replay-r1", "delivery-d1", "keymgr")
PUBLISHER_BOUND_S = 600.0  # a publisher thread gives up a round after this: longer than any of the test's deadlines
KEYMGR_DEADLINE_S = 30.0  # the key manager serves a key fetch again within this of the broker's return


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalKafka]:
    lk = LocalKafka(embedded_spec(tmp_path / "kafka", dedicated_controller=True))
    lk.up()
    try:
        yield lk
    finally:
        lk.down()


class Publisher(threading.Thread):
    """Publishes head+1 to every stream, round after round, with WINDOW rounds in flight."""

    def __init__(self, client: CommandClient, owner: nacl.signing.SigningKey,
                 publisher: nacl.signing.SigningKey, stream_ids: list[str], first: int = 0) -> None:
        """Publishes sequences from `first` + 1 on (nonce = sequence + 1)."""
        super().__init__(name="publisher", daemon=True)
        self.client, self.owner, self.publisher, self.stream_ids = client, owner, publisher, stream_ids
        self.first = first
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
            seq = self.first
            while not self.halt.is_set():
                if len(rounds) >= WINDOW:
                    # Wait for the oldest round, or the halt. The broker may be away for a while: the
                    # test's own deadlines decide, this one (longer than all of them) only bounds the thread.
                    oldest = rounds.pop(0)
                    wait_until("the oldest round's answers, or the halt",
                               lambda oldest=oldest: self.halt.is_set() or all(f.done() for f in oldest),
                               timeout_s=PUBLISHER_BOUND_S, every_s=0.05)
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
                let_time_pass(0.01, "a steady load: a round at most every 10 ms, not a flood")
        except BaseException as exc:
            self.error = exc


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


def http_json(url: str) -> tuple[int, Any]:
    """GET `url`: (status, JSON body); (0, reason) while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 (the local API over http)
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return 0, str(exc)


MINTER = nacl.signing.SigningKey(b"\x6d" * 32)
READER = nacl.signing.SigningKey(b"\x72" * 32)
FIRST_KEY = nacl.public.PrivateKey(b"\x61" * 32)
SECOND_KEY = nacl.public.PrivateKey(b"\x62" * 32)
UNTIL_EPOCH = 2


class PaidReader:
    """A PLATFORM_MANAGED stream and a reader entitled to its key epochs 0..UNTIL_EPOCH with an
    X25519 key, made through the workers; its epoch-key fetches go to the stack's key manager."""

    def __init__(self, stack: ServiceSet, client: CommandClient, owner: nacl.signing.SigningKey,
                 stream_id: str) -> None:
        self.stack, self.client, self.stream_id = stack, client, stream_id
        self.account = address_from_public_key(bytes(READER.verify_key))
        self._nonces = 0
        # key_epoch_blocks at its maximum keeps the current key epoch at 0 for the whole test.
        client.call(sign_command(owner, "create_stream", stream_id, 1, {
            "publisher_key_hex": bytes(owner.verify_key).hex(), "access_mode": "PLATFORM_MANAGED",
            "paid_stream_config": {"fee_per_key_epoch_cby": 10, "protocol_fee_bps": 100,
                                   "publisher_treasury": address_from_public_key(bytes(owner.verify_key)),
                                   "key_epoch_blocks": MAX_UINT32}}), timeout=120)
        client.call(sign_command(MINTER, "mint_cby", "cby:supply", 1, {"to": self.account, "amount_cby": 1_000}),
                    timeout=DEADLINE_S)
        # The paid stream is registered by a forward from the stream's writer; until then it is refused.
        wait_until("the paid stream's registration (acquire_epoch_access accepted)",
                   lambda: self.command("acquire_epoch_access", f"paid:{stream_id}",
                                        {"stream_id": stream_id, "target_key_epoch": UNTIL_EPOCH}) or True,
                   timeout_s=DEADLINE_S, every_s=0.2, retry_on=(WatchtowerError,))
        self.register_key(FIRST_KEY)

    def command(self, method: str, instance: str, body: dict[str, Any]) -> dict[str, Any]:
        self._nonces += 1
        return self.client.call(sign_command(READER, method, instance, self._nonces, body), timeout=DEADLINE_S)

    def register_key(self, key: nacl.public.PrivateKey) -> None:
        self.command("register_account_key", f"acct:{self.account}",
                     {"scheme": "X25519", "public_key": bytes(key.public_key)})

    def request(self, **extra: Any) -> dict[str, Any]:
        """A signed epoch-key request (the microsecond clock as its nonce, as the SDK signs it)."""
        body = {"account": self.account, "from_key_epoch": 0, "to_key_epoch": UNTIL_EPOCH, **extra}
        return {"command": sign_command(READER, "fetch_epoch_keys", self.stream_id, time.time_ns() // 1_000,
                                        body).to_dict()}

    def fetch(self, request: dict[str, Any]) -> tuple[int, Any]:
        return http("POST", f"{self.stack.keymgr_url}/v1/keymgr/epoch-keys", request)

    def fetch_until_served(self, request: dict[str, Any], deadline: float) -> None:
        """Send `request` until it is served (by monotonic time `deadline`); only NOT_READY may refuse it meanwhile."""
        answer: Any = None

        def served() -> bool:
            nonlocal answer
            status, answer = self.fetch(request)
            if status == 200:
                self.opens(answer, FIRST_KEY)
                return True
            assert answer["error"]["code"] == "NOT_READY", answer
            return False

        wait_until(lambda: f"the key manager to serve a key fetch within {KEYMGR_DEADLINE_S:g}s of the broker's "
                           f"return (last: {answer}); its log tail:\n{tail(self.stack, 'keymgr', 40)}",
                   served, timeout_s=max(0.0, deadline - time.monotonic()), every_s=0.5)

    def opens(self, answer: dict[str, Any], key: nacl.public.PrivateKey) -> None:
        assert [k["key_epoch"] for k in answer["keys"]] == list(range(UNTIL_EPOCH + 1)), answer
        for sealed in answer["keys"]:
            assert len(unwrap_epoch_key(bytes.fromhex(sealed["sealed_key_hex"]), bytes(key))) == 32

    def health(self) -> dict[str, Any]:
        status, body = http_json(f"{self.stack.keymgr_url}/v1/health")
        return body if status == 200 and isinstance(body, dict) else {}


@pytest.mark.slow
def test_every_service_serves_again_after_the_broker_is_killed_and_restarted(own_broker: LocalKafka,
                                                                             tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream worker under publish load, and the projection, the replay worker, the push
    delivery worker and the key manager beside it: after ``kill -9`` of the broker and its restart
    every one is the same process, and each does its job again (publishes acknowledged, reads
    answered with what was published after the restart, a replay registered after the restart
    completed, a message published after the restart pushed, epoch keys fetched)."""
    bootstrap = own_broker.spec.bootstrap
    owner, publisher = nacl.signing.SigningKey.generate(), nacl.signing.SigningKey.generate()
    kek_file = tmp_path / "kek.key"
    kek_file.write_text(new_kek_text())
    kek_file.chmod(0o600)
    kek = Kek(bytes.fromhex(kek_file.read_text()))
    monkeypatch.setenv("WATCHTOWER_KEYMGR_PUBLIC_KEY", kek.receipt_public_key().hex())
    monkeypatch.setenv("WATCHTOWER_CBY_MINTER", address_from_public_key(bytes(MINTER.verify_key)))
    with start_stack(bootstrap, tmp_path / "logs", workers=1, partitions=PARTITIONS, projections=1,
                     replay=True, delivery=True) as stack:
        health = stack.health_file("worker-w1")
        stack.start_keymgr(free_ports(1)[0], kek_file)  # it reads the events topic while the streams are made
        pids = stack.pids()
        assert set(pids) == set(SERVICES), pids
        client = CommandClient(bootstrap, prefix=stack.prefix)
        stream_ids = spread_streams(stack.prefix)
        probe_sid = f"restart.{stack.prefix}.probe"
        try:
            paid = PaidReader(stack, client, owner, f"restart.{stack.prefix}.paid")
            stack.wait_keymgr()
            assert paid.fetch(paid.request())[0] == 200
            for sid in [*stream_ids, probe_sid]:
                cfg = {"stream_id": sid, "owner": address_from_public_key(bytes(owner.verify_key)),
                       "publisher_key_hex": bytes(publisher.verify_key).hex(), "ring_buffer_capacity": 100_000}
                client.call(sign_command(owner, "create_stream", sid, 1, cfg), timeout=120)
            # A stream with one PUSH subscriber, for the delivery worker.
            push_sid = f"restart.{stack.prefix}.push"
            client.call(sign_command(owner, "create_stream", push_sid, 1, {
                "publisher_key_hex": bytes(publisher.verify_key).hex(), "max_push_deliveries_per_block": 10}),
                timeout=120)
            client.call(sign_command(nacl.signing.SigningKey.generate(), "subscribe", push_sid, 1, {"mode": "PUSH"}),
                        timeout=120)
            wait_for_health(health, lambda h: h["state"] == "serving", timeout=30)
            push_and_wait(client, stack, owner, publisher, push_sid, 1)

            pub = Publisher(client, owner, publisher, stream_ids)
            pub.start()
            wait_until("100 answered publishes", lambda: pub.answered() >= 100, timeout_s=60)

            # kill -9 mid-load; restart once the worker and the key manager have noticed.
            own_broker.kill_node(1, signal.SIGKILL)
            killed = time.monotonic()
            down = wait_for_health(health, lambda h: h["state"] == "broker_unreachable", timeout=30)
            assert down["pid"] == pids["worker-w1"]
            noticed = time.monotonic() - killed
            wait_until("the key manager's health to say not ready", lambda: paid.health().get("ready") is False,
                       timeout_s=30)
            assert paid.health()["reason"], paid.health()
            # Refused while the broker is away; its nonce stays unspent, so this very request is served later.
            refused_request = paid.request()
            status, refused = paid.fetch(refused_request)
            assert (status, refused["error"]["code"]) == (503, "NOT_READY"), refused
            own_broker.up()
            returned = time.monotonic()

            # A probe sent right after the broker's return: its answer is "serving again".
            probe = sign_message(stream_id=probe_sid, sequence=1, timestamp_unix_ms=1_790_000_000_001,
                                 kind="tick", payload=b'{"probe":1}', signing_key=publisher)
            probe_reply = client.submit(sign_command(owner, "publish", probe_sid, 2, probe.to_json_dict()))
            client.flush()
            # Meanwhile the key manager serves the request it refused, by itself, soon after the broker's return.
            paid.fetch_until_served(refused_request, returned + KEYMGR_DEADLINE_S)
            keys_after = time.monotonic() - returned
            assert paid.health()["ready"] is True, paid.health()
            try:
                assert probe_reply.result(timeout=DEADLINE_S)["sequence"] == 1
            except TimeoutError:
                pytest.fail(f"no answer {DEADLINE_S:g}s after the broker returned; worker log tail:\n"
                            f"{tail(stack, 'worker-w1')}")
            served_after = time.monotonic() - returned
            print(f"\nworker reported broker_unreachable {noticed:.2f}s after the kill; the broker was back "
                  f"{returned - killed:.1f}s after the kill; the probe publish was answered {served_after:.2f}s "
                  f"after the broker's return, the key fetch it refused before was served {keys_after:.2f}s after it")

            # The projection reads what was published after the restart.
            wait_until("the projection to show the probe", lambda: head_of(stack, probe_sid) == 1,
                       timeout_s=DEADLINE_S)
            # The replay worker fulfils a replay registered after the restart (its status is read
            # through the projection, which folds the replay topic).
            registered = client.call(sign_command(owner, "register_replay", probe_sid, 3,
                                                  {"namespace": probe_sid, "from": 1, "to": 2}), timeout=DEADLINE_S)
            replay_url = f"{stack.api_url}/v1/replays/{registered['replay_id']}"
            wait_until("the replay registered after the restart to complete",
                       lambda: (http_json(replay_url)[1] or {}).get("status") == {"completed": 1},
                       timeout_s=DEADLINE_S)

            # The key manager's fold goes on: a key registered after the restart is the one keys are sealed to.
            paid.register_key(SECOND_KEY)
            status, sealed = paid.fetch(paid.request(account_key_id=2))
            assert status == 200, sealed
            paid.opens(sealed, SECOND_KEY)

            wait_until("100 more answered publishes", lambda: pub.answered_since(returned) >= 100,
                       timeout_s=DEADLINE_S)
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

        # Every service is the process it was before the kill, and none hit a client assertion.
        for name in SERVICES:
            assert stack.procs[name].poll() is None, f"{name} died:\n{tail(stack, name)}"
            assert "Assertion" not in tail(stack, name, 200), f"{name}:\n{tail(stack, name)}"
        assert stack.pids() == pids, "a service was restarted"
        final = json.loads(health.read_text())
        assert final["state"] == "serving", final
        assert final["pid"] == pids["worker-w1"]

        schedule = KeySchedule.initial(bytes(publisher.verify_key))
        by_stream: dict[str, list[int]] = defaultdict(list)
        for m in read_all_messages(bootstrap, stack.prefix):
            if m.stream_id == push_sid:
                continue
            assert verify_with_schedule(m, schedule), f"bad signature at {m.stream_id}#{m.sequence}"
            by_stream[m.stream_id].append(m.sequence)
        assert by_stream[probe_sid] == [1]
        for sid in stream_ids:
            seqs = by_stream[sid]
            assert seqs == list(range(1, len(seqs) + 1)), f"{sid}: gap or duplicate in {seqs}"
            assert set(seqs) == acked[sid], f"{sid}: the log differs from what was acknowledged"


def push_and_wait(client: CommandClient, stack: ServiceSet, owner: nacl.signing.SigningKey,
                  publisher: nacl.signing.SigningKey, stream_id: str, sequence: int) -> None:
    """Publish `sequence` to the push stream and wait for its push to the stream's subscriber."""
    msg = sign_message(stream_id=stream_id, sequence=sequence, timestamp_unix_ms=1_790_000_000_000 + sequence,
                       kind="tick", payload=b'{"push":1}', signing_key=publisher)
    assert client.call(sign_command(owner, "publish", stream_id, sequence + 1, msg.to_json_dict()),
                       timeout=DEADLINE_S)["sequence"] == sequence
    reader = CommittedDeliveries(stack.bootstrap, stack.prefix)  # a fresh one: it never saw the outage
    try:
        wait_until(lambda: f"a push of {stream_id}#{sequence}; delivery worker log tail:\n"
                           f"{tail(stack, 'delivery-d1', 40)}",
                   lambda: any(push_of(m) == (stream_id, sequence) for m in reader.records(0.5)),
                   timeout_s=DEADLINE_S, every_s=0)
    finally:
        reader.close()


def push_of(m: Message) -> tuple[str, int] | None:
    """(stream, sequence) of a push delivery record, None for any other record (a replay's)."""
    headers = {k: (v or b"").decode() for k, v in (m.headers() or [])}
    if headers.get("wt:push") != "1":
        return None
    return headers["wt:push:stream"], int(headers["wt:push:sequence"])


def head_of(stack: ServiceSet, stream_id: str) -> int | None:
    status, body = http_json(f"{stack.api_url}/v1/streams/{stream_id}/head")
    return int(body["head"]) if status == 200 and isinstance(body, dict) and "head" in body else None


def tail(stack: ServiceSet, name: str, lines: int = 20) -> str:
    try:
        text = (stack.log_dir / f"{name}.log").read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    # librdkafka's own reconnect lines (``%3|...``) would bury what the service said.
    return "".join([line for line in text.splitlines(True) if not line.startswith("%")][-lines:])



def test_the_delivery_and_replay_workers_serve_again_after_the_broker_is_killed_and_restarted(
        own_broker: LocalKafka, tmp_path: Path) -> None:
    """The push delivery worker and the replay worker, each with transactions behind it and pushes
    flowing when the broker is killed (``kill -9``) and started again: afterwards each one's health
    file keeps being written, a message published after the restart is pushed to its subscriber,
    and a replay registered after the restart completes. Before the fix the delivery worker hung
    in ``send_offsets_to_transaction`` for minutes after the restart (its health file stopped)."""
    bootstrap = own_broker.spec.bootstrap
    owner, publisher = nacl.signing.SigningKey.generate(), nacl.signing.SigningKey.generate()
    with start_stack(bootstrap, tmp_path / "logs", workers=1, partitions=PARTITIONS, projections=1,
                     replay=True, delivery=True) as stack:
        pids = stack.pids()
        client = CommandClient(bootstrap, prefix=stack.prefix)
        push_sid = f"restart.{stack.prefix}.push"
        try:
            client.call(sign_command(owner, "create_stream", push_sid, 1, {
                "publisher_key_hex": bytes(publisher.verify_key).hex(), "ring_buffer_capacity": 100_000,
                "max_push_deliveries_per_block": 1000}), timeout=120)
            client.call(sign_command(nacl.signing.SigningKey.generate(), "subscribe", push_sid, 1, {"mode": "PUSH"}),
                        timeout=120)
            wait_for_health(stack.health_file("worker-w1"), lambda h: h["state"] == "serving", timeout=30)
            push_and_wait(client, stack, owner, publisher, push_sid, 1)
            # A replay completed before the kill: the replay worker has committed transactions too.
            replay_sid = f"restart.{stack.prefix}.replay"
            client.call(sign_command(owner, "create_stream", replay_sid, 1, {
                "publisher_key_hex": bytes(publisher.verify_key).hex()}), timeout=120)
            first = sign_message(stream_id=replay_sid, sequence=1, timestamp_unix_ms=1_790_000_000_001,
                                 kind="tick", payload=b'{"n":1}', signing_key=publisher)
            client.call(sign_command(owner, "publish", replay_sid, 2, first.to_json_dict()), timeout=DEADLINE_S)
            replay_and_wait(client, stack, owner, replay_sid, 3)

            # Publishes keep coming (so the delivery worker commits a transaction every block) when
            # the broker is killed.
            pub = Publisher(client, owner, publisher, [push_sid], first=1)
            pub.start()
            wait_until("20 answered publishes", lambda: pub.answered() >= 20, timeout_s=60)
            own_broker.kill_node(1, signal.SIGKILL)
            wait_for_health(stack.health_file("worker-w1"), lambda h: h["state"] == "broker_unreachable",
                            timeout=30)
            own_broker.up()
            returned = time.monotonic()
            wait_until("10 publishes answered after the restart", lambda: pub.answered_since(returned) >= 10,
                       timeout_s=DEADLINE_S)
            pub.halt.set()
            pub.join(30)
            assert pub.error is None, f"the publisher failed: {pub.error!r}"
            client.flush()
            last = max(fut.result(timeout=DEADLINE_S)["sequence"] for _sid, _seq, fut in pub.futures)

            # Requested after the restart, both are carried out.
            push_and_wait(client, stack, owner, publisher, push_sid, last + 1)
            replay_and_wait(client, stack, owner, replay_sid, 4)
            # And each health file is still being written (at most once a second while serving).
            for name in ("delivery-d1", "replay-r1"):
                path = stack.health_file(name)
                seen = json.loads(path.read_text())
                for _ in range(2):
                    seen = wait_for_health(path, lambda h, before=seen["updated_ms"]: h["updated_ms"] > before,
                                           timeout=30)
                assert seen["state"] == "serving", seen
                assert seen["pid"] == pids[name]
        finally:
            client.close()
        for name in ("delivery-d1", "replay-r1"):
            assert stack.procs[name].poll() is None, f"{name} died:\n{tail(stack, name)}"
        assert stack.pids() == pids, "a service was restarted"


def replay_and_wait(client: CommandClient, stack: ServiceSet, owner: nacl.signing.SigningKey, stream_id: str,
                    nonce: int) -> None:
    """Register a replay of the stream's first message (with `nonce`) and wait for it to complete."""
    registered = client.call(sign_command(owner, "register_replay", stream_id, nonce,
                                          {"namespace": stream_id, "from": 1, "to": 2}), timeout=DEADLINE_S)
    replay_url = f"{stack.api_url}/v1/replays/{registered['replay_id']}"
    wait_until(lambda: f"replay {registered['replay_id']} to complete; replay worker log tail:\n"
                       f"{tail(stack, 'replay-r1', 40)}",
               lambda: (http_json(replay_url)[1] or {}).get("status") == {"completed": 1},
               timeout_s=DEADLINE_S, every_s=0.2)
