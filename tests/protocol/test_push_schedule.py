"""The push scheduler's rules (protocol.push.schedule): bounds, round-robin, filters, checkpoints."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watchtower.protocol.enums import DeliveryMode, SubscriptionStatus
from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError
from watchtower.protocol.push.checkpoint import PushCheckpoint
from watchtower.protocol.push.schedule import (
    FILTER_NODE_CYCLES,
    PUSH_BASE_CYCLES,
    PushLimits,
    PushMessage,
    PushSubscriber,
    StreamSchedule,
    delivery_cycles,
    filter_node_count,
    plan_block,
    push_headers,
    push_subscribers,
)
from watchtower.protocol.stream.filters import compile_filter, parse_filter
from watchtower.protocol.stream.state import FrozenMap, StreamState, Subscription
from watchtower.schemas.delivery_records import decode_checkpoint, encode_checkpoint

SID = "s-push"


def addr(i: int) -> str:
    return "0x" + f"{i:064x}"


def message(seq: int, size: int = 10, **tags: Any) -> PushMessage:
    return PushMessage(seq, 100 + seq, b"x" * size, (("sequence", str(seq).encode()),),
                       {"kind": "tick", "sequence": seq, "timestamp_unix_ms": 0, "tags": tags})


def sub(i: int, created: int = 0, flt: object = None) -> PushSubscriber:
    node = parse_filter(flt)
    return PushSubscriber(addr(i), created, compile_filter(node), filter_node_count(node))


def subs(n: int, created: int = 0) -> dict[str, PushSubscriber]:
    return {s.address: s for s in (sub(i, created) for i in range(n))}


def fed(n_messages: int, size: int = 10, start: int = 1) -> StreamSchedule:
    schedule = StreamSchedule(SID)
    for seq in range(start, start + n_messages):
        schedule.ingest(message(seq, size))
    return schedule


def run_blocks(schedule: StreamSchedule, subscribers: Mapping[str, PushSubscriber], limits: PushLimits, head: int,
               blocks: int, first_block: int = 1) -> tuple[StreamSchedule, dict[int, list[Any]]]:
    per_block: dict[int, list[Any]] = {}
    for block in range(first_block, first_block + blocks):
        plan = plan_block(schedule, block, subscribers=subscribers, limits=limits, head=head)
        schedule = plan.schedule
        per_block[block] = list(plan.deliveries)
    return schedule, per_block


def test_delivery_cycles_is_the_documented_cost_model() -> None:
    assert delivery_cycles(0, 0) == PUSH_BASE_CYCLES == 1_000
    assert delivery_cycles(250, 3) == 1_000 + 250 + 3 * FILTER_NODE_CYCLES
    node = parse_filter({"all": [{"field": "kind", "op": "eq", "value": "a"},
                                 {"not": {"field": "tags.x", "op": "exists"}}]})
    assert filter_node_count(node) == 4
    assert filter_node_count(None) == 0


def test_push_headers_keep_the_originals_first_then_the_push_headers() -> None:
    headers = push_headers([("sequence", b"7"), ("wt-capacity", b"10")], SID, 7, 123, 1_010)
    assert headers[:2] == [("sequence", b"7"), ("wt-capacity", b"10")]
    assert dict(headers[2:]) == {"wt:push": b"1", "wt:push:stream": SID.encode(), "wt:push:sequence": b"7",
                                 "wt:push:block": b"123", "wt:push:cycles": b"1010"}


def test_1000_subscribers_bound_100_each_served_within_ten_blocks_in_address_order() -> None:
    subscribers = subs(1000)
    schedule, per_block = run_blocks(fed(1), subscribers, PushLimits(100, 10**9), head=1, blocks=12)
    counts = [len(d) for d in per_block.values()]
    assert counts == [100] * 10 + [0, 0]
    order = [d.subscriber for block in per_block.values() for d in block]
    assert order == sorted(subscribers), "round-robin over the subscribers sorted by address"
    assert schedule.backlog == {}, "a message every subscriber got is released"


def test_round_robin_pointer_persists_and_each_visit_delivers_the_oldest_pending() -> None:
    subscribers = subs(3)
    _, per_block = run_blocks(fed(3), subscribers, PushLimits(2, 10**9), head=3, blocks=5)
    seen = [(d.subscriber[-1], d.message.sequence) for b in per_block.values() for d in b]
    assert seen == [("0", 1), ("1", 1), ("2", 1), ("0", 2), ("1", 2), ("2", 2), ("0", 3), ("1", 3), ("2", 3)]


def test_cycle_bound_stops_the_block_without_skipping_anyone() -> None:
    subscribers = subs(4)
    limits = PushLimits(100, 2 * delivery_cycles(500, 0) + 10)
    _, per_block = run_blocks(fed(1, size=500), subscribers, limits, head=1, blocks=3)
    assert [len(b) for b in per_block.values()] == [2, 2, 0]
    assert all(sum(d.cycles for d in b) <= limits.max_cycles for b in per_block.values())


def test_a_delivery_no_block_can_pay_for_is_dropped_not_stalling_the_others() -> None:
    schedule = StreamSchedule(SID)
    schedule.ingest(message(1, size=5_000))
    schedule.ingest(message(2, size=10))
    plan = plan_block(schedule, 1, subscribers=subs(2), limits=PushLimits(10, 2_100), head=2)
    assert [(d.subscriber, d.message.sequence) for d in plan.deliveries] == [(addr(0), 2), (addr(1), 2)]
    assert plan.schedule.dropped == 2


def test_several_plans_in_one_block_share_its_budget_and_a_clock_going_back_spends_the_later_block() -> None:
    schedule = fed(5)
    subscribers, limits = subs(2), PushLimits(3, 10**9)
    first = plan_block(schedule, 10, subscribers=subscribers, limits=limits, head=5)
    again = plan_block(first.schedule, 10, subscribers=subscribers, limits=limits, head=5)
    back = plan_block(again.schedule, 9, subscribers=subscribers, limits=limits, head=5)
    assert (len(first.deliveries), len(again.deliveries), len(back.deliveries)) == (3, 0, 0)
    assert plan_block(back.schedule, 11, subscribers=subscribers, limits=limits, head=5).deliveries


def test_only_messages_after_created_at_sequence_and_up_to_head_are_pushed() -> None:
    subscribers = {addr(0): sub(0, created=0), addr(1): sub(1, created=3)}
    _, per_block = run_blocks(fed(5), subscribers, PushLimits(100, 10**9), head=4, blocks=1)
    got = Counter((d.subscriber, d.message.sequence) for d in per_block[1])
    assert set(got) == {(addr(0), s) for s in (1, 2, 3, 4)} | {(addr(1), 4)}, "5 waits for the events' head"


def test_filters_select_what_each_subscriber_receives() -> None:
    schedule = StreamSchedule(SID)
    for seq, sym in ((1, "BTC"), (2, "ETH"), (3, "BTC")):
        schedule.ingest(message(seq, symbol=sym))
    subscribers = {addr(0): sub(0, flt={"field": "tags.symbol", "op": "eq", "value": "BTC"}), addr(1): sub(1)}
    plan = plan_block(schedule, 1, subscribers=subscribers, limits=PushLimits(100, 10**9), head=3)
    pairs = sorted((d.subscriber[-1], d.message.sequence, d.cycles) for d in plan.deliveries)
    assert pairs == [("0", 1, 1_020), ("0", 3, 1_020), ("1", 1, 1_010), ("1", 2, 1_010), ("1", 3, 1_010)]


def test_unsubscribing_stops_pending_work() -> None:
    subscribers = subs(2)
    plan = plan_block(fed(3), 1, subscribers=subscribers, limits=PushLimits(1, 10**9), head=3)
    assert [d.subscriber for d in plan.deliveries] == [addr(0)]
    remaining = {addr(0): subscribers[addr(0)]}
    _, per_block = run_blocks(plan.schedule, remaining, PushLimits(100, 10**9), head=3, blocks=2, first_block=2)
    assert {d.subscriber for b in per_block.values() for d in b} == {addr(0)}


def test_backlog_is_bounded_and_what_falls_out_is_counted_dropped() -> None:
    schedule = StreamSchedule(SID, max_messages=3)
    plan = plan_block(schedule, 1, subscribers=subs(1), limits=PushLimits(100, 10**9), head=0)
    schedule = plan.schedule
    for seq in range(1, 7):
        schedule.ingest(message(seq))
    assert len(schedule.backlog) == 3
    plan = plan_block(schedule, 2, subscribers=subs(1), limits=PushLimits(100, 10**9), head=6)
    assert [d.message.sequence for d in plan.deliveries] == [4, 5, 6]
    assert plan.schedule.dropped == 3


def test_push_subscribers_takes_active_push_modes_only() -> None:
    def s(i: int, mode: DeliveryMode, status: SubscriptionStatus, flt: str | None = None) -> Subscription:
        return Subscription(addr(i), mode, status, created_at_sequence=i, start_cursor=0, filter_json=flt)
    state = StreamState(SID, subscriptions=FrozenMap({addr(i): x for i, x in enumerate([
        s(0, DeliveryMode.PUSH, SubscriptionStatus.ACTIVE),
        s(1, DeliveryMode.PUSH_WITH_PULL_FALLBACK, SubscriptionStatus.ACTIVE),
        s(2, DeliveryMode.PULL, SubscriptionStatus.ACTIVE),
        s(3, DeliveryMode.PUSH, SubscriptionStatus.CANCELLED),
        s(4, DeliveryMode.PUSH, SubscriptionStatus.ACTIVE, flt='{"not json'),
    ])}))
    got = push_subscribers(state)
    assert sorted(got) == [addr(0), addr(1), addr(4)]
    assert got[addr(1)].created_at_sequence == 1
    assert not got[addr(4)].test({"kind": "k"}), "a filter that does not parse matches nothing"


# ------------------------------------------------------------------ properties

limits_st = st.builds(PushLimits, st.integers(1, 20), st.integers(1_000, 40_000))


@settings(max_examples=150, deadline=None)
@given(limits=limits_st, n_subs=st.integers(0, 25), sizes=st.lists(st.integers(0, 5_000), max_size=15),
       created=st.lists(st.integers(0, 15), min_size=25, max_size=25), blocks=st.integers(1, 30))
def test_bounds_are_never_exceeded_and_nothing_is_lost_or_duplicated(
        limits: PushLimits, n_subs: int, sizes: list[int], created: list[int], blocks: int) -> None:
    schedule = StreamSchedule(SID)
    for seq, size in enumerate(sizes, start=1):
        schedule.ingest(message(seq, size))
    subscribers = {addr(i): sub(i, created=created[i]) for i in range(n_subs)}
    schedule, per_block = run_blocks(schedule, subscribers, limits, head=len(sizes), blocks=blocks)
    delivered: Counter[tuple[str, int]] = Counter()
    for block in per_block.values():
        assert len(block) <= limits.max_deliveries
        assert sum(d.cycles for d in block) <= limits.max_cycles
        delivered.update((d.subscriber, d.message.sequence) for d in block)
    assert all(c == 1 for c in delivered.values()), "a sequence is pushed to a subscriber once"
    owed = {(a, seq) for a, s in subscribers.items() for seq in range(s.created_at_sequence + 1, len(sizes) + 1)
            if delivery_cycles(sizes[seq - 1], 0) <= limits.max_cycles}
    assert set(delivered) <= owed
    if not schedule.pending(len(sizes)):
        assert set(delivered) == owed, "once nothing is pending, everything owed was delivered"


@settings(max_examples=80, deadline=None)
@given(n_subs=st.integers(1, 60), bound=st.integers(1, 15))
def test_every_subscriber_is_served_within_ceil_n_over_bound_blocks(n_subs: int, bound: int) -> None:
    _, per_block = run_blocks(fed(1), subs(n_subs), PushLimits(bound, 10**9), head=1,
                              blocks=math.ceil(n_subs / bound))
    assert {d.subscriber for b in per_block.values() for d in b} == set(subs(n_subs))


@settings(max_examples=80, deadline=None)
@given(n_subs=st.integers(1, 12), n_msgs=st.integers(1, 10), bound=st.integers(1, 6),
       cut=st.integers(0, 6), blocks_after=st.integers(1, 8), same_block=st.booleans())
def test_restore_from_a_checkpoint_plans_exactly_what_the_original_would(
        n_subs: int, n_msgs: int, bound: int, cut: int, blocks_after: int, same_block: bool) -> None:
    subscribers, limits = {addr(i): sub(i, created=i % 3) for i in range(n_subs)}, PushLimits(bound, 10**9)
    original, _ = run_blocks(fed(n_msgs), subscribers, limits, head=n_msgs, blocks=cut)
    checkpoint = original.checkpoint(subscribers, n_msgs)
    again = decode_checkpoint(encode_checkpoint(checkpoint))
    assert again == checkpoint
    restored = StreamSchedule.restore(again)
    for seq in range(1, n_msgs + 1):  # fed again from resume_offset, or from the start: the same
        restored.ingest(message(seq))
    start = cut if same_block else cut + 1
    a, pa = run_blocks(original, subscribers, limits, head=n_msgs, blocks=blocks_after, first_block=start)
    b, pb = run_blocks(restored, subscribers, limits, head=n_msgs, blocks=blocks_after, first_block=start)
    assert [[(d.subscriber, d.message.sequence, d.block) for d in x] for x in pa.values()] == \
           [[(d.subscriber, d.message.sequence, d.block) for d in x] for x in pb.values()]
    assert a.checkpoint(subscribers, n_msgs) == b.checkpoint(subscribers, n_msgs)


def test_resume_offset_is_the_offset_of_the_lowest_message_still_needed() -> None:
    subscribers = subs(2)
    plan = plan_block(fed(4), 1, subscribers=subscribers, limits=PushLimits(3, 10**9), head=4)
    cp = plan.schedule.checkpoint(subscribers, 4)
    assert (cp.low_watermark, cp.resume_offset) == (2, 102)
    assert (cp.used_deliveries, cp.block, cp.pointer) == (3, 1, addr(0))


@pytest.mark.parametrize("raw", [b"", b"[]", b"{}", b'{"v":1}', b"\xff", None,
                                 json.dumps({"v": 1, "stream_id": "s", "low_watermark": 0, "ahead": [],
                                             "pointer": None, "block": 0, "used_deliveries": 0,
                                             "used_cycles": 0, "resume_offset": None, "dropped": 0}).encode(),
                                 json.dumps({"v": 1, "stream_id": "s", "low_watermark": 1, "ahead": [[1, [7]]],
                                             "pointer": None, "block": 0, "used_deliveries": 0,
                                             "used_cycles": 0, "resume_offset": None, "dropped": 0}).encode()])
def test_a_hostile_checkpoint_record_is_malformed_record(raw: bytes | None) -> None:
    with pytest.raises(MalformedRecordError):
        decode_checkpoint(raw)


def test_a_checkpoint_of_another_version_is_schema_mismatch() -> None:
    data = PushCheckpoint("s", 1, {}, None, 0, 0, 0, None, 0).to_dict() | {"v": 2}
    with pytest.raises(SchemaMismatchError):
        decode_checkpoint(json.dumps(data).encode())


FILTERS = (None, {"field": "tags.k", "op": "eq", "value": "a"}, {"not": {"field": "tags.k", "op": "eq", "value": "a"}})


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_a_restore_mid_stream_with_filters_and_a_lagging_head_continues_exactly_like_the_original(seed: int) -> None:
    """Messages arrive over time, the events' head lags them, subscribers filter; a checkpoint taken
    at a random block and restored (fed the messages again from its resume_offset, then the new
    ones) plans every later block exactly like the schedule that never stopped, within the bounds."""
    r = random.Random(seed)
    n_msgs, cut = r.randint(1, 25), r.randint(0, 30)
    subscribers = {addr(i): sub(i, created=r.randint(0, n_msgs), flt=r.choice(FILTERS))
                   for i in range(r.randint(1, 15))}
    limits = PushLimits(r.randint(1, 8), r.randint(1_000, 8_000))
    messages = [message(s, r.randint(0, 3_000), k=r.choice("ab")) for s in range(1, n_msgs + 1)]
    original, restored = StreamSchedule(SID), None
    out_original: list[tuple[str, int, int]] = []
    out_restored: list[tuple[str, int, int]] = []
    ingested = head = mark = 0
    for block in range(1, 60):
        for _ in range(r.randint(0, 3)):
            if ingested < n_msgs:
                for schedule in (original, restored):
                    if schedule is not None:
                        schedule.ingest(messages[ingested])
                ingested += 1
        head = min(ingested, head + r.randint(0, 3))
        plan = plan_block(original, block, subscribers=subscribers, limits=limits, head=head)
        original = plan.schedule
        out_original += [(d.subscriber, d.message.sequence, d.block) for d in plan.deliveries]
        assert len(plan.deliveries) <= limits.max_deliveries
        if restored is not None:
            again = plan_block(restored, block, subscribers=subscribers, limits=limits, head=head)
            restored = again.schedule
            out_restored += [(d.subscriber, d.message.sequence, d.block) for d in again.deliveries]
        if block == cut:
            cp = decode_checkpoint(encode_checkpoint(original.checkpoint(subscribers, head)))
            restored = StreamSchedule.restore(cp)
            for m in messages[:ingested]:
                if cp.resume_offset is not None and m.offset >= cp.resume_offset:
                    restored.ingest(m)
            mark = len(out_original)
    if restored is not None:
        assert out_original[mark:] == out_restored
