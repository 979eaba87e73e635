"""`Subscriber.stream` in push and push-with-pull-fallback modes, without a server.

The API is the SDK's `FakeApi` (the pure stream aggregate); the push source is a scripted list of
batches, one per `poll`, standing in for `PushConsumer` / `SseSource` (both have their own tests on a
real broker and a real HTTP server). Each script step may publish first, so pushes and pulls race
the way they do live. What is proven: ascending order, exactly once, verification of every pushed
message, gaps closed by a pull at once, catch-up on the timer and while the source is down.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from itertools import islice
from typing import Any

import nacl.signing
import pytest

from watchtower.client.account import Account
from watchtower.client.fake import FakeApi
from watchtower.client.sdk import Publisher
from watchtower.client.subscriber import Subscriber
from watchtower.protocol.errors import FeedNotFoundError, InvalidArgumentError, WatchtowerError
from watchtower.protocol.stream.message import StreamMessage

SID = "s-push"
Step = tuple[int, list[int]]  # (publish this many first, then push these sequences)


class ScriptedSource:
    """Each poll: run the next step (publish, then answer the pushes); afterwards, nothing."""

    def __init__(self, api: FakeApi, publisher: Publisher, steps: list[Step], *,
                 forge: Callable[[StreamMessage], StreamMessage] | None = None) -> None:
        self.api, self.publisher, self.steps = api, publisher, list(steps)
        self.forge = forge
        self.polls = 0
        self.healthy = True
        self.fail_with: WatchtowerError | None = None

    def poll(self, timeout_s: float = 0.5) -> list[StreamMessage]:  # noqa: ARG002 (PushSource's)
        self.polls += 1
        if self.fail_with is not None:
            raise self.fail_with
        if not self.steps:
            return []
        publish, pushes = self.steps.pop(0)
        for _ in range(publish):
            n = (self.publisher.head or 0) + 1
            self.publisher.publish("tick", json.dumps({"n": n}).encode(), {"n": n, "even": n % 2 == 0})
        archive = self.api.messages.get(SID, {})
        out = [archive[s] for s in pushes]
        return [self.forge(m) if self.forge is not None else m for m in out]


@pytest.fixture
def api(tmp_path: Any) -> tuple[FakeApi, Publisher]:
    fake = FakeApi()
    owner = Account(nacl.signing.SigningKey.generate(), name="owner", home=tmp_path)
    key = nacl.signing.SigningKey.generate()
    fake.command(owner.sign("create_stream", SID, {"publisher_key_hex": bytes(key.verify_key).hex(),
                                                   "ring_buffer_capacity": 1000}))
    publisher = Publisher(fake, owner, SID, key)
    publisher.sync()
    return fake, publisher


def run(sub: Subscriber, mode: str, source: Any, *, count: int | None = None, **kw: Any) -> list[int]:
    kw.setdefault("idle_timeout_s", 0.3)
    kw.setdefault("poll_s", 0.0)
    stream = sub.stream(mode, source, **kw)
    return [m.sequence for m in (islice(stream, count) if count is not None else stream)]


def test_fallback_hands_out_every_sequence_once_in_order_despite_repeats_gaps_and_reordering(
        api: tuple[FakeApi, Publisher]) -> None:
    fake, publisher = api
    # 4 and 8..10 are never pushed; 2, 5 and 7 are pushed twice; 3 arrives before 1.
    source = ScriptedSource(fake, publisher, [(3, [3, 1, 2]), (0, [2]), (4, [5, 7, 6, 7, 5]), (3, [])])
    sub = Subscriber(fake, SID)
    got = run(sub, "push-with-pull-fallback", source, pull_interval_s=0.05)
    assert got == list(range(1, 11))
    stats = sub.stream_stats
    assert stats is not None
    assert stats.delivered == 10
    assert stats.duplicates >= 3
    assert stats.pushed >= 3  # 1, 2 and 3 are released from pushes; 4 is pulled, and with it 5..7
    assert stats.pushed + stats.pulled == 10


def test_fallback_closes_a_gap_at_once_without_waiting_for_the_timer(api: tuple[FakeApi, Publisher]) -> None:
    fake, publisher = api
    source = ScriptedSource(fake, publisher, [(0, []), (5, [1, 2]), (0, [5])])
    sub = Subscriber(fake, SID)
    got = run(sub, "push-with-pull-fallback", source, pull_interval_s=3600)
    assert got == [1, 2, 3, 4, 5]
    assert sub.stream_stats is not None
    assert sub.stream_stats.gap_pulls >= 1
    assert sub.stream_stats.timer_pulls == 1  # only the initial catch-up


def test_fallback_catches_up_on_the_timer_when_pushes_stop(api: tuple[FakeApi, Publisher]) -> None:
    fake, publisher = api
    source = ScriptedSource(fake, publisher, [(2, [1, 2]), (3, []), (0, []), (4, [])])
    sub = Subscriber(fake, SID)
    got = run(sub, "push-with-pull-fallback", source, pull_interval_s=0.01, idle_timeout_s=0.5)
    assert got == list(range(1, 10))
    assert sub.stream_stats is not None
    assert sub.stream_stats.timer_pulls >= 2


def test_fallback_starts_by_pulling_from_the_cursor(api: tuple[FakeApi, Publisher]) -> None:
    fake, publisher = api
    ScriptedSource(fake, publisher, [(6, [])]).poll()  # published before the subscriber starts
    source = ScriptedSource(fake, publisher, [(1, [7])])
    got = run(Subscriber(fake, SID, cursor=2), "push-with-pull-fallback", source, pull_interval_s=3600)
    assert got == [3, 4, 5, 6, 7]


def test_a_forged_push_is_skipped_and_the_genuine_message_pulled(api: tuple[FakeApi, Publisher]) -> None:
    fake, publisher = api

    def forge(msg: StreamMessage) -> StreamMessage:
        return dataclasses.replace(msg, tags={**msg.tags, "n": 999.0}) if msg.sequence == 2 else msg

    source = ScriptedSource(fake, publisher, [(0, []), (3, [1, 2, 3])], forge=forge)
    sub = Subscriber(fake, SID)
    out = list(sub.stream("push-with-pull-fallback", source, pull_interval_s=3600, idle_timeout_s=0.3, poll_s=0))
    assert [m.sequence for m in out] == [1, 2, 3]
    assert out[1] == fake.messages[SID][2]  # the genuine one
    assert sub.stream_stats is not None
    assert sub.stream_stats.rejected == 1


def test_a_push_of_another_stream_is_rejected(api: tuple[FakeApi, Publisher]) -> None:
    fake, publisher = api
    source = ScriptedSource(fake, publisher, [(0, []), (2, [1, 2])],
                            forge=lambda m: dataclasses.replace(m, stream_id="s-other") if m.sequence == 1 else m)
    sub = Subscriber(fake, SID)
    assert run(sub, "push", source) == [2]
    assert sub.stream_stats is not None
    assert sub.stream_stats.rejected == 1


def test_fallback_with_a_filter_hands_out_only_matching_messages_without_gaps(api: tuple[FakeApi, Publisher]) -> None:
    fake, publisher = api
    evens = {"field": "tags.even", "op": "eq", "value": True}
    # 3 is pushed although it does not match; 4 and 8 are never pushed.
    source = ScriptedSource(fake, publisher, [(0, []), (6, [2, 3, 6]), (4, [10])])
    sub = Subscriber(fake, SID, filter=evens)
    got = run(sub, "push-with-pull-fallback", source, pull_interval_s=3600)
    assert got == [2, 4, 6, 8, 10]
    assert sub.stream_stats is not None
    assert sub.stream_stats.unmatched == 1


def test_push_mode_hands_out_pushes_once_ascending_and_skips_gaps(api: tuple[FakeApi, Publisher]) -> None:
    fake, publisher = api
    source = ScriptedSource(fake, publisher, [(5, [1, 2, 2]), (0, [1, 4]), (0, [3, 5])])
    sub = Subscriber(fake, SID)
    assert run(sub, "push", source) == [1, 2, 4, 5]
    stats = sub.stream_stats
    assert stats is not None
    assert (stats.duplicates, stats.skipped_gaps, stats.pulled) == (3, 1, 0)


def test_fallback_goes_on_pulling_when_the_source_fails_but_push_mode_raises(api: tuple[FakeApi, Publisher]) -> None:
    fake, publisher = api
    source = ScriptedSource(fake, publisher, [(3, [])])
    source.poll()
    source.fail_with = FeedNotFoundError("feed 9 does not exist")
    sub = Subscriber(fake, SID)
    assert run(sub, "push-with-pull-fallback", source, pull_interval_s=3600) == [1, 2, 3]
    assert sub.stream_stats is not None
    assert sub.stream_stats.source_errors == 1
    with pytest.raises(FeedNotFoundError):
        run(Subscriber(fake, SID), "push", source)


def test_fallback_pulls_continuously_while_the_source_is_unhealthy(api: tuple[FakeApi, Publisher]) -> None:
    fake, publisher = api
    source = ScriptedSource(fake, publisher, [(0, []), (2, []), (2, [])])
    source.healthy = False
    sub = Subscriber(fake, SID)
    assert run(sub, "push-with-pull-fallback", source, pull_interval_s=3600, idle_timeout_s=0.5) == [1, 2, 3, 4]
    assert sub.stream_stats is not None
    assert sub.stream_stats.fallback_pulls >= 2


def test_stream_refuses_a_bad_mode_or_a_push_mode_without_source_at_once(api: tuple[FakeApi, Publisher]) -> None:
    fake, _ = api
    sub = Subscriber(fake, SID)
    for mode, source in (("broadcast", None), ("push", None), ("push-with-pull-fallback", None)):
        with pytest.raises(InvalidArgumentError):
            sub.stream(mode, source)


def test_pull_mode_is_follow(api: tuple[FakeApi, Publisher]) -> None:
    fake, publisher = api
    ScriptedSource(fake, publisher, [(4, [])]).poll()
    assert run(Subscriber(fake, SID), "pull", None, wait_ms=10) == [1, 2, 3, 4]


def test_a_long_catch_up_is_handed_out_in_parts_without_waiting_for_the_timer(api: tuple[FakeApi, Publisher]) -> None:
    fake, publisher = api
    ScriptedSource(fake, publisher, [(25, [])]).poll()
    source = ScriptedSource(fake, publisher, [])
    sub = Subscriber(fake, SID)
    assert run(sub, "push-with-pull-fallback", source, pull_interval_s=3600, limit=1) == list(range(1, 26))
