"""A projection worker restarted while another serves: reads of every stream keep being answered.

Two projection workers of one group split the partitions. One of them is stopped (SIGTERM, as an
orchestrator's rolling restart does) and started again under the same worker name. Throughout,
a reader asks for every stream's head, first through the worker that stays up, then through the
restarted one, and records what it got:

- every answer is a 200 or a 503 NOT_READY carrying ``Retry-After`` (never another error, never a
  request left hanging);
- the streams whose partitions the staying worker held before the restart are answered with a 200
  throughout: it keeps serving what it holds (static membership: a worker that comes back under its
  name within the session timeout takes its own partitions back, and a rebalance, if one happens,
  does not stop the partitions that stay put);
- the restarted worker's own streams are answered with a 200 throughout too: the staying worker
  folds them as their standby and answers for their owner while it is away or still folding;
- afterwards the restarted worker holds partitions again and answers every stream itself.

The longest time each stream went without a 200 is printed, not asserted: it depends on the machine.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from api_calls import Caller
from stack_fixture import start_stack
from waiting import let_time_pass, wait_until

from watchtower.protocol.signing import sign_message
from watchtower.topics.partitioning import partition_for_key

pytestmark = pytest.mark.integration

PARTITIONS = 4
#: Long enough for a worker on a loaded CI machine to exit and start again within it.
SESSION_TIMEOUT_MS = "20000"
READ_TIMEOUT_S = 30.0  # a read still unanswered after this counts as hanging


def _read(url: str) -> tuple[int, dict[str, Any] | str, str | None]:
    """(status, JSON body or the reason, Retry-After header); status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=READ_TIMEOUT_S) as resp:  # noqa: S310 (local API)
            return resp.status, json.loads(resp.read()), resp.headers.get("Retry-After")
    except urllib.error.HTTPError as exc:
        try:
            body: dict[str, Any] | str = json.loads(exc.read())
        except ValueError:
            body = "not JSON"
        return exc.code, body, exc.headers.get("Retry-After")
    except (OSError, ValueError) as exc:  # refused while the worker restarts, or a timeout
        return 0, repr(exc), None


class Reads(threading.Thread):
    """Asks for every stream's head through `urls` (in order) until stopped, and records the answers."""

    def __init__(self, streams: list[str], urls: list[str]) -> None:
        super().__init__(name="reads", daemon=True)
        self.streams, self.urls = streams, urls
        self.halt = threading.Event()
        self.statuses: Counter[str] = Counter()
        self.wrong: list[str] = []
        self.not_answered: Counter[str] = Counter()  # reads of a stream that no worker answered with a 200
        self.longest_gap: dict[str, float] = dict.fromkeys(streams, 0.0)
        self.last_ok: dict[str, float] = {}

    def run(self) -> None:
        while not self.halt.is_set():
            for sid in self.streams:
                self._read_stream(sid)
            let_time_pass(0.05, "the reads go on at a steady pace through the restarts")

    def _read_stream(self, sid: str) -> None:
        answered = False
        for url in self.urls:
            status, body, retry_after = _read(f"{url}/v1/streams/{sid}/head")
            if status == 200:
                self.statuses["200"] += 1
                answered = True
                break
            if status == 0 and url == self.urls[-1]:
                self.statuses["refused (restarting)"] += 1  # the restarted worker is down: allowed
                continue
            code = body.get("error", {}).get("code") if isinstance(body, dict) else None
            if status == 503 and code == "NOT_READY" and retry_after is not None and retry_after.isdigit():
                self.statuses["503 NOT_READY"] += 1
                continue
            self.wrong.append(f"{url} head of {sid}: {status} {body} (Retry-After {retry_after!r})")
        now = time.monotonic()
        if answered:
            if sid in self.last_ok:
                self.longest_gap[sid] = max(self.longest_gap[sid], now - self.last_ok[sid])
            self.last_ok[sid] = now
        else:
            self.not_answered[sid] += 1

    def stop(self) -> None:
        self.halt.set()
        self.join(READ_TIMEOUT_S * 4)


def _health(url: str) -> dict[str, Any]:
    status, body, _ = _read(f"{url}/v1/health")
    return body if status == 200 and isinstance(body, dict) else {}


def _split(urls: list[str]) -> dict[str, list[int]] | None:
    """Each worker's partitions, once both are ready (their standbys caught up too) and together
    hold every partition once."""
    shares = {url: _health(url) for url in urls}
    if not all(h.get("ready") and h.get("standby") and not h.get("standby_catching_up") for h in shares.values()):
        return None
    parts = {url: list(h["partitions"]) for url, h in shares.items()}
    owned = sorted(p for share in parts.values() for p in share)
    return parts if owned == list(range(PARTITIONS)) and all(parts.values()) else None


def test_reads_keep_being_answered_while_a_projection_worker_restarts(
        kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHTOWER_SESSION_TIMEOUT_MS", SESSION_TIMEOUT_MS)
    with start_stack(kafka_bootstrap, tmp_path, partitions=PARTITIONS, projections=2) as stack:
        stay, again = stack.urls["projection-p1"], stack.urls["projection-p2"]
        owner = Caller(stay)
        streams: dict[int, str] = {}
        while len(streams) < PARTITIONS:  # one stream on every partition
            sid = f"roll-{uuid.uuid4().hex[:10]}"
            streams.setdefault(partition_for_key(sid.encode(), PARTITIONS), sid)
        for sid in streams.values():
            key = nacl.signing.SigningKey.generate()
            owner.ok("create_stream", sid, {"publisher_key_hex": bytes(key.verify_key).hex()})
            for seq in (1, 2):
                msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=1_700_000_000_000 + seq,
                                   kind="tick", payload=b"{}", signing_key=key)
                owner.ok("publish", sid, msg.to_json_dict())
        shares = wait_until("both workers to serve their share", lambda: _split([stay, again]), timeout_s=120)
        wait_until("every stream to be readable through both workers",
                   lambda: all(_read(f"{u}/v1/streams/{s}/head")[0] == 200
                               for u in (stay, again) for s in streams.values()), timeout_s=60)
        held = {sid for p, sid in streams.items() if p in shares[stay]}

        reads = Reads(list(streams.values()), [stay, again])
        reads.start()
        try:
            wait_until("a first round of reads", lambda: reads.statuses["200"] >= 2 * len(streams), timeout_s=60)
            stopped = time.monotonic()
            proc = stack.procs.pop("projection-p2")
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            stack.start_projection("p2", port=int(again.rsplit(":", 1)[1]))
            started = time.monotonic()
            after = wait_until("the restarted worker to serve its share again", lambda: _split([stay, again]),
                               timeout_s=120)
            wait_until("the restarted worker to answer every stream itself",
                       lambda: all(_read(f"{again}/v1/streams/{s}/head")[0] == 200 for s in streams.values()),
                       timeout_s=60)
            served = time.monotonic()
            seen = reads.statuses["200"]
            wait_until("a round of reads after the restart", lambda: reads.statuses["200"] >= seen + len(streams),
                       timeout_s=60)
        finally:
            reads.stop()
        print(f"\nrestart: down {started - stopped:.1f}s, serving its share again {served - started:.1f}s after "
              f"its start; shares before {shares}, after {after}\n"
              f"longest time without a 200 per stream (s): "
              f"{ {s: round(g, 1) for s, g in reads.longest_gap.items()} }\n"
              f"reads no worker answered, per stream: {dict(reads.not_answered)}; answers: {dict(reads.statuses)}")
        assert not reads.wrong, "\n".join(reads.wrong[:20])
        assert not {s for s in held if reads.not_answered[s]}, (
            f"the worker that stayed up stopped answering streams of partitions it held {shares[stay]}: "
            f"{ {s: reads.not_answered[s] for s in held} }")
        assert not reads.not_answered, (
            f"streams of the restarted worker's partitions {shares[again]} went unanswered, though the worker "
            f"that stayed up stands by for them: {dict(reads.not_answered)}")
        assert after[again], "the restarted worker holds no partition"
