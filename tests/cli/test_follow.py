"""``watchtower feed ID follow`` and ``feed ID subscribe --follow`` as real processes against a stack.

The CLI prints verified messages live through Server-Sent Events from the API and catches up with
get_since: history from ``--cursor`` first, then live messages, each once and in order; with the
event stream unreachable it falls back to pull and still prints every message.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from kafka_fixture import free_ports
from stack_fixture import start_stack
from waiting import wait_until

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.sdk import Publisher, create_feed, wait_until_visible
from watchtower.client.subscriber import Subscriber
from watchtower.local.stack import ServiceSet
from watchtower.protocol.stream.message import StreamMessage

pytestmark = pytest.mark.integration


class Cli:
    """A `watchtower` process whose stdout lines are read as they come."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "watchtower.cli", *args], env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def read(self, n: int, timeout_s: float = 120) -> list[str]:
        out: list[str] = []

        def read_n() -> bool:
            if len(out) < n:
                with contextlib.suppress(queue.Empty):
                    out.append(self.lines.get(timeout=1.0))
            return len(out) >= n

        wait_until(lambda: f"{n} lines (read {len(out)}: {out}; stderr so far: {self._stderr_if_done()})", read_n,
                   timeout_s=timeout_s, every_s=0)
        return out

    def finish(self, timeout_s: float = 60) -> str:
        """Wait for the exit (status 0) and answer stderr."""
        _, err = self.proc.communicate(timeout=timeout_s)
        assert self.proc.returncode == 0, err
        return err

    def _stderr_if_done(self) -> str:
        return "(running)" if self.proc.poll() is None else (self.proc.stderr.read() if self.proc.stderr else "")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceSet]:
    """The module's stack, with the push delivery worker (`subscribe --mode push` needs it)."""
    with start_stack(kafka_bootstrap, tmp_path_factory.mktemp("follow-logs"), replay=False,
                     delivery=True) as services:
        yield services


@pytest.fixture
def feed(stack: ServiceSet, tmp_path: Path) -> dict[str, Any]:
    api = ApiClient(stack.api_url)
    owner = Account(nacl.signing.SigningKey.generate(), name="owner", home=tmp_path)
    key = nacl.signing.SigningKey.generate()
    reply = create_feed(api, owner, name="follow-me", publisher_key_hex=bytes(key.verify_key).hex())
    wait_until_visible(api, reply["stream_id"], feed_id=reply["feed_id"])
    env = {**os.environ, "WATCHTOWER_HOME": str(tmp_path), "WATCHTOWER_API": stack.api_url}
    env.pop("WATCHTOWER_ACCOUNT", None)
    return {"api": api, "owner": owner, "stream_id": reply["stream_id"], "feed_id": reply["feed_id"], "env": env,
           "publisher": Publisher(api, owner, reply["stream_id"], key)}


def publish(feed: dict[str, Any], n: int) -> None:
    for _ in range(n):
        seq = (feed["publisher"].head or 0) + 1
        feed["publisher"].publish("tick", json.dumps({"n": seq}).encode(), {"n": seq})


def verified(feed: dict[str, Any], lines: list[str]) -> list[int]:
    """The sequences printed, each checked against the stream's key schedule."""
    checker = Subscriber(feed["api"], feed["stream_id"])
    seqs = []
    for line in lines:
        msg = StreamMessage.from_json_dict(json.loads(line))
        checker.verify(msg)
        seqs.append(msg.sequence)
    return seqs


def test_follow_prints_history_then_live_events_once_each_in_order(feed: dict[str, Any]) -> None:
    publish(feed, 5)
    wait_until_visible(feed["api"], feed["stream_id"], min_head=5)
    cli = Cli(["feed", str(feed["feed_id"]), "follow", "--cursor", "2", "--count", "8", "--json",
               "--pull-interval", "60"], feed["env"])
    try:
        history = cli.read(3)
        publish(feed, 5)
        live = cli.read(5)
        err = cli.finish()
    finally:
        cli.kill()
    assert verified(feed, history + live) == list(range(3, 11))
    assert "8 verified message(s)" in err
    # The messages published after the history arrived through the event stream, not only by pulls.
    assert " 0 live" not in err, err


def test_follow_falls_back_to_pull_when_the_event_stream_is_unreachable(feed: dict[str, Any]) -> None:
    nowhere = f"http://127.0.0.1:{free_ports(1)[0]}"
    cli = Cli(["feed", str(feed["feed_id"]), "follow", "--gateway", nowhere, "--cursor", "0", "--count", "4",
               "--json"], feed["env"])
    try:
        publish(feed, 4)
        lines = cli.read(4)
        err = cli.finish()
    finally:
        cli.kill()
    assert verified(feed, lines) == [1, 2, 3, 4]
    assert "0 live, 4 pulled" in err


def test_subscribe_push_with_pull_fallback_then_follow(feed: dict[str, Any]) -> None:
    subprocess.run([sys.executable, "-m", "watchtower.cli", "account", "new", "reader"], env=feed["env"], check=True,
                   capture_output=True, timeout=60)
    publish(feed, 2)
    cli = Cli(["feed", str(feed["feed_id"]), "subscribe", "--mode", "push-with-pull-fallback", "--cursor", "0",
               "--follow", "--count", "5", "--pull-interval", "1", "--account", "reader", "--json"], feed["env"])
    try:
        reply = json.loads(cli.read(1)[0])
        assert (reply["mode"], reply["status"]) == ("PUSH_WITH_PULL_FALLBACK", "ACTIVE")
        first = cli.read(2)
        publish(feed, 3)
        rest = cli.read(3)
        cli.finish()
    finally:
        cli.kill()
    assert verified(feed, first + rest) == [1, 2, 3, 4, 5]


def test_subscribe_push_then_follow_prints_the_pushes(feed: dict[str, Any]) -> None:
    """Push alone: the delivery worker pushes, the API's event stream carries them, nothing is pulled."""
    subprocess.run([sys.executable, "-m", "watchtower.cli", "account", "new", "pusher"], env=feed["env"], check=True,
                   capture_output=True, timeout=60)
    cli = Cli(["feed", str(feed["feed_id"]), "subscribe", "--mode", "push", "--follow", "--count", "3",
               "--account", "pusher", "--json"], feed["env"])
    try:
        reply = json.loads(cli.read(1)[0])
        assert (reply["mode"], reply["status"]) == ("PUSH", "ACTIVE")
        publish(feed, 3)
        lines = cli.read(3)
        err = cli.finish()
    finally:
        cli.kill()
    assert verified(feed, lines) == [1, 2, 3]
    assert "3 live, 0 pulled" in err
