"""Several projection workers answer every read exactly as one worker does, also while they rebalance.

One stack (a stream-actor worker, six partitions) and one reference projection: a single worker
of its own consumer group, so it holds every partition alone (what "one worker answers" means).
Projection workers of the main group then join and leave while a client keeps publishing and
subscribing: p2 joins (N=2), p3 joins (N=3), p2 stops with SIGTERM (N=2), p3 is killed with
SIGKILL (N=1). Throughout, reader threads ask every live worker about every stream and the feed
list: an answer may be 503 NOT_READY, but never STREAM_NOT_FOUND for a created stream, never a
shorter feed list, never a head, subscriber count or key history older than one already served,
never a get_since page other than the published messages, and never any other error. After
each step, once publishing stops and the workers settle, every read through every worker (stream
info, head, get_since pages, key history, subscribers, feeds) equals the reference's answer, and
/v1/health shows the events partitions split between the workers without overlap.
"""

from __future__ import annotations

import itertools
import signal
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import quote

import nacl.signing
import pytest
from api_calls import Caller, http, wait_for
from kafka_fixture import free_ports
from stack_fixture import start_stack
from waiting import let_time_pass

from watchtower.local.stack import ServiceSet
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.signing import sign_message
from watchtower.topics.partitioning import partition_for_key

pytestmark = pytest.mark.integration

PARTITIONS = 6
SETTLE_S = 180.0  # safety net only: how long a step may take before the test gives up


def _get(url: str) -> tuple[int, Any]:
    """(status, JSON body); a refused connection or a non-JSON body is status 0 with the reason."""
    try:
        return http("GET", url)
    except Exception as exc:  # the worker is gone, or answered something that is not JSON
        return 0, repr(exc)


class Feeds:
    """Streams spread over every partition, their publishers, and what was acknowledged."""

    def __init__(self, commands_api: str) -> None:
        self.api = commands_api
        self.owner = Caller(commands_api)
        self.owner_address = address_from_public_key(bytes(self.owner.key.verify_key))
        self.keys: dict[str, nacl.signing.SigningKey] = {}
        self.key_ids: dict[str, int] = {}
        self.heads: dict[str, int] = {}
        self.subscribers: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()

    def create(self, count: int) -> None:
        """`count` streams with feed listings, covering every partition first."""
        covered: set[int] = set()
        while len(self.keys) < count:
            sid = f"scale-{uuid.uuid4().hex[:10]}"
            p = partition_for_key(sid.encode(), PARTITIONS)
            if p in covered and len(covered) < PARTITIONS:
                continue
            covered.add(p)
            key = nacl.signing.SigningKey.generate()
            capacity = 5 if not self.keys else 1000  # the first one prunes its window
            self.owner.ok("create_stream", sid, {"publisher_key_hex": bytes(key.verify_key).hex(),
                                                 "ring_buffer_capacity": capacity,
                                                 "feed": {"name": f"feed-{len(self.keys)}", "description": "scale"}})
            self.keys[sid], self.key_ids[sid], self.heads[sid] = key, 1, 0

    def publish(self, sid: str) -> None:
        seq = self.heads[sid] + 1
        msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=1_700_000_000_000 + seq, kind="tick",
                           payload=f'{{"n":{seq}}}'.encode(), signing_key=self.keys[sid],
                           tags={"symbol": "BTC" if seq % 2 else "ETH", "n": seq}, signing_key_id=self.key_ids[sid])
        with self.lock:
            assert self.owner.ok("publish", sid, msg.to_json_dict())["sequence"] == seq
            self.heads[sid] = seq

    def subscribe(self, sid: str) -> None:
        Caller(self.api).ok("subscribe", sid, {"mode": "PULL"})
        with self.lock:
            self.subscribers[sid] += 1

    def rotate(self, sid: str) -> None:
        key = nacl.signing.SigningKey.generate()
        with self.lock:
            self.owner.ok("rotate_publisher_key", sid, {"new_key": bytes(key.verify_key)})
            self.keys[sid], self.key_ids[sid] = key, self.key_ids[sid] + 1

    def round(self, n: int) -> None:
        for sid in self.keys:
            self.publish(sid)
            if n % 3 == 0:
                self.subscribe(sid)


class Traffic(threading.Thread):
    """Publishes and subscribes round after round until stopped."""

    def __init__(self, feeds: Feeds) -> None:
        super().__init__(name="traffic", daemon=True)
        self.feeds, self.halt, self.error = feeds, threading.Event(), None  # type: ignore[var-annotated]

    def run(self) -> None:
        try:
            for n in itertools.count(1):
                if self.halt.is_set():
                    return
                self.feeds.round(n)
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self.halt.set()
        self.join(60)
        assert self.error is None, self.error


class Readers(threading.Thread):
    """Reads every stream and the feed list through every live worker; records every wrong answer."""

    def __init__(self, feeds: Feeds) -> None:
        super().__init__(name="readers", daemon=True)
        self.feeds = feeds
        self.urls: list[str] = []
        self.halt = threading.Event()
        self.seen: dict[tuple[str, str], int] = defaultdict(int)  # (stream, field) -> highest value served
        self.wrong: list[str] = []
        self.answers: dict[int, int] = defaultdict(int)
        self.rounds = 0

    def use(self, urls: list[str]) -> None:
        """Read through `urls` from now on; returns once no round through the old list is under way."""
        self.urls = urls
        start = self.rounds
        wait_for(lambda: self.rounds >= start + 2 or not self.is_alive(), 120, "the readers to switch workers")

    def run(self) -> None:
        while not self.halt.is_set():
            self.rounds += 1
            for url in list(self.urls):
                for sid in list(self.feeds.keys):
                    self._check_stream(url, sid)
                self._check_feeds(url)

    def _judge(self, url: str, what: str, status: int, body: Any) -> bool:
        """True for a 200; a 503 NOT_READY is allowed; anything else is wrong."""
        self.answers[status] += 1
        if status == 200:
            return True
        error = body.get("error") if isinstance(body, dict) else None
        if status == 503 and isinstance(error, dict) and error.get("code") == "NOT_READY":
            return False
        self.wrong.append(f"{url} {what}: {status} {body}")
        return False

    def _monotonic(self, url: str, sid: str, field: str, value: int, before: int) -> None:
        if value < before:
            self.wrong.append(f"{url} {sid} {field} went back to {value} after {before} was served")
        key = (sid, field)
        self.seen[key] = max(self.seen[key], value)

    def _check_stream(self, url: str, sid: str) -> None:
        before = {f: self.seen[(sid, f)] for f in ("head", "subscribers", "keys")}
        status, info = _get(f"{url}/v1/streams/{sid}")
        if self._judge(url, f"info {sid}", status, info):
            self._monotonic(url, sid, "head", info["head"], before["head"])
            self._monotonic(url, sid, "subscribers", info["subscribers"], before["subscribers"])
        status, keys = _get(f"{url}/v1/streams/{sid}/keys")
        if self._judge(url, f"keys {sid}", status, keys):
            self._monotonic(url, sid, "keys", len(keys["entries"]), before["keys"])
        cursor = max(before["head"] - 3, 0)
        status, page = _get(f"{url}/v1/streams/{sid}/messages?cursor={cursor}&limit=3")
        if status == 410 and page["error"]["code"] == "CURSOR_TOO_OLD":  # the ring of 5 moved on meanwhile
            facts = page["error"]["details"]
            if facts["cursor"] != cursor or facts["floor"] - 1 <= cursor:
                self.wrong.append(f"{url} messages {sid} after {cursor}: CURSOR_TOO_OLD with {facts}")
            self._monotonic(url, sid, "head", facts["head"], before["head"])
            self.answers[status] += 1
        elif self._judge(url, f"messages {sid}", status, page):
            self._monotonic(url, sid, "head", page["head"], before["head"])
            got = [(m["stream_id"], m["sequence"], bytes.fromhex(m["payload_inline_hex"])) for m in page["messages"]]
            want = [(sid, n, f'{{"n":{n}}}'.encode()) for n in range(cursor + 1, min(cursor + 3, page["head"]) + 1)]
            if got != want:
                self.wrong.append(f"{url} messages {sid} after {cursor}: {got} instead of {want}")

    def _check_feeds(self, url: str) -> None:
        status, body = _get(f"{url}/v1/feeds")
        if self._judge(url, "feeds", status, body) and len(body["feeds"]) != len(self.feeds.keys):
            self.wrong.append(f"{url} feeds: {len(body['feeds'])} listed, {len(self.feeds.keys)} exist")

    def stop(self) -> None:
        self.halt.set()
        self.join(120)


def _snapshot(url: str, feeds: Feeds) -> dict[str, Any]:
    """Every read the API offers, for every stream, through `url`."""
    out: dict[str, Any] = {}
    btc = quote('{"field": "tags.symbol", "op": "eq", "value": "BTC"}')
    for sid, head in feeds.heads.items():
        for name, path in {
            "info": "", "head": "/head", "keys": "/keys", "keys-page": "/keys?from=2&limit=1",
            "key-at-1": "/keys/at/1", f"key-at-{head}": f"/keys/at/{head}",
            "since-0": "/messages?cursor=0&limit=500", "since-tail": f"/messages?cursor={max(head - 3, 0)}&limit=2",
            "since-btc": f"/messages?cursor={max(head - 4, 0)}&limit=4&filter={btc}",
            "subscribers": "/subscribers", "active": "/subscribers?active_only=true",
        }.items():
            out[f"{sid} {name}"] = _get(f"{url}/v1/streams/{sid}{path}")
    for name, path in {"feeds": "/v1/feeds", "mine": f"/v1/feeds?owner={feeds.owner_address}",
                       "feed-1": "/v1/feeds/1", "feed-missing": "/v1/feeds/999"}.items():
        out[name] = _get(f"{url}{path}")
    return out


def _settled(urls: list[str], feeds: Feeds) -> bool:
    for url in urls:
        for sid, head in feeds.heads.items():
            status, info = _get(f"{url}/v1/streams/{sid}")
            if status != 200 or info["head"] != head or info["subscribers"] != feeds.subscribers[sid]:
                return False
    return True


def _shares(urls: list[str]) -> dict[str, list[int]] | None:
    """Each worker's events partitions, once all are ready and they split 0..P-1 without overlap."""
    shares = {}
    for url in urls:
        status, health = _get(f"{url}/v1/health")
        if status != 200 or not health.get("ready"):
            return None
        shares[url] = health["partitions"]
    owned = [p for share in shares.values() for p in share]
    if sorted(owned) != list(range(PARTITIONS)) or not all(shares.values()):
        return None
    return shares


def _expect_same_answers(urls: list[str], reference: str, feeds: Feeds) -> None:
    wait_for(lambda: _settled([*urls, reference], feeds), SETTLE_S, "every worker to fold every write")
    want = _snapshot(reference, feeds)
    assert want["feeds"][0] == 200
    # A single fresh worker must list every feed too: with Faust changelog tables the group's
    # first assignment could come before the registry changelog existed, and every registry write
    # then failed and was skipped.
    assert len(want["feeds"][1]["feeds"]) == len(feeds.keys), want["feeds"]
    for url in urls:
        got = _snapshot(url, feeds)
        diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
        assert not diff, f"{url} answers differently from one worker: {diff}"


def _stop(stack: ServiceSet, name: str, sig: int) -> None:
    proc = stack.procs.pop(name)
    proc.send_signal(sig)
    proc.wait(60)


def test_reads_through_any_of_n_workers_equal_one_workers_during_and_after_rebalances(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    with start_stack(kafka_bootstrap, tmp_path, partitions=PARTITIONS) as stack:
        p2_port, p3_port, ref_port = free_ports(3)
        p1, p2, p3 = stack.api_url, f"http://127.0.0.1:{p2_port}", f"http://127.0.0.1:{p3_port}"
        reference = f"http://127.0.0.1:{ref_port}"
        stack.start_projection("reference", port=ref_port, generation=2)  # its own group: one worker
        stack.wait_ready(api_url=reference)

        feeds = Feeds(reference)
        feeds.create(PARTITIONS)
        for n in range(1, 9):
            feeds.round(n)
        feeds.rotate(next(iter(feeds.keys)))
        feeds.round(9)
        _expect_same_answers([p1], reference, feeds)

        readers = Readers(feeds)
        readers.urls = [p1]
        readers.start()
        timings: dict[str, float] = {}  # from the change until every worker serves its share
        catch_up: dict[str, list[float | None]] = {}  # per worker: its last assignment until it served
        answering: dict[str, float] = {}  # from the change until every worker's HTTP API answers
        try:
            def step(name: str, workers: list[str], change: Any) -> None:
                traffic = Traffic(feeds)
                traffic.start()
                started = time.monotonic()
                change()
                wait_for(lambda: all(_get(f"{u}/v1/health")[0] in (200, 503) for u in workers), SETTLE_S,
                         f"{name}: every worker to answer")
                answering[name] = round(time.monotonic() - started, 1)
                readers.use(workers)
                shares = wait_for(lambda: _shares(workers), SETTLE_S, f"{name}: partitions split over {workers}")
                timings[name] = round(time.monotonic() - started, 1)
                catch_up[name] = [_get(f"{u}/v1/health")[1].get("caught_up_in_s") for u in workers]
                let_time_pass(2, "writes and reads go on across the settled assignment too")
                traffic.stop()
                assert len(shares) == len(workers)
                _expect_same_answers(workers, reference, feeds)

            def join(name: str, port: int) -> Any:
                return lambda: stack.start_projection(name, port=port)

            step("p2 joins", [p1, p2], join("p2", p2_port))
            step("p3 joins", [p1, p2, p3], join("p3", p3_port))
            readers.use([p1, p3])  # p2 leaves: stop asking it first
            step("p2 stops (SIGTERM)", [p1, p3], lambda: _stop(stack, "projection-p2", signal.SIGTERM))
            readers.use([p1])
            step("p3 dies (SIGKILL)", [p1], lambda: _stop(stack, "projection-p3", signal.SIGKILL))
        finally:
            readers.stop()
        print(f"\nrebalance until every worker serves again (s): {timings}\n"
              f"of which until a joining worker's API answers (s): {answering}\n"
              f"of which folding the log after the last assignment (s, per worker): {catch_up}\n"
              f"reads by status: {dict(readers.answers)}")
        assert not readers.wrong, "\n".join(readers.wrong[:40])
        assert readers.answers[200] > 0
