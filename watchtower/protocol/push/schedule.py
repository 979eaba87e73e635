"""Push delivery scheduling (CIP-7 "Push Delivery Semantics", "Push Work Bounds and Economics"): pure rules.

One `StreamSchedule` per stream holds what the delivery worker needs to push that stream's new
messages to its push subscribers: a bounded backlog of messages, a cursor per subscriber (the next
sequence it has not been considered for), the round-robin pointer, and what the current block has
used of its budget. No I/O and no clock: the block height and the stream's state are passed in.

Rules:

- **Subscribers** (`push_subscribers`): every subscription of the stream whose status is ACTIVE and
  whose mode is PUSH or PUSH_WITH_PULL_FALLBACK. A subscriber receives the messages with
  ``sequence > created_at_sequence`` that pass its filter (the same evaluator as get_since). A
  subscription that is no longer active loses its pending work at the next plan.
- **Gate**: a message is pushed only once the stream's state (folded from ``events``) has reached
  its sequence (``sequence <= head``): by then every subscription created before it is known, so no
  subscriber can be passed over because its SubscriberUpdated event was read late.
- **Cost model** (`delivery_cycles`): ``PUSH_BASE_CYCLES + len(record value) + FILTER_NODE_CYCLES ×
  nodes of the subscriber's filter AST`` (0 nodes without a filter).
- **Bounds**: per block and per stream at most ``max_push_deliveries_per_block`` deliveries and at
  most ``max_push_cycles_per_block`` cycles. `plan_block` may be called many times in one block: it
  spends what is left of that block's budget. A block height lower than the schedule's (a clock
  that went back, e.g. another host after a restart) spends the later block's budget, so a bound
  is never exceeded. A delivery that would exceed a bound is not made in this block; the block
  ends there (strict round-robin: nobody is skipped for a cheaper one). A delivery that costs more
  than a whole block's cycle budget can never be made: it is dropped (counted).
- **Order**: deterministic round-robin over the active push subscribers sorted by address,
  starting after the pointer (the last served subscriber), which persists across blocks. Each
  visit delivers the visited subscriber's oldest pending message. Subscribers not reached stay
  pending for the next blocks, so with ``n`` subscribers each owed one message and a bound of
  ``b`` deliveries, each is served within ``ceil(n / b)`` blocks.
- **Bounded memory**: the backlog keeps at most ``max_messages`` messages and ``max_bytes`` bytes of
  record values; the oldest falls out first. A subscriber whose cursor was below a message that
  fell out loses it, counted in ``dropped`` (push is best effort; fallback subscribers pull it).
  A message below every cursor (the low watermark) is released at once.
- **Checkpoint** (`push_checkpoint.PushCheckpoint`): the low watermark (lowest sequence some subscriber still
  needs, never above ``head + 1`` nor above the next sequence expected), the cursors above what the
  restore rule gives anyway, the pointer, the block and its used budget, the ``messages`` offset to
  re-read from, and the dropped count. `StreamSchedule.restore` rebuilds a schedule that, fed the
  messages again from ``resume_offset``, plans exactly what the checkpointed one would have.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from watchtower.protocol.enums import DeliveryMode, SubscriptionStatus
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.push.checkpoint import PushCheckpoint
from watchtower.protocol.stream.filter_ast import All, Any_, FilterNode, Not, Predicate
from watchtower.protocol.stream.filters import compile_filter, parse_filter
from watchtower.protocol.stream.state import StreamState

PUSH_BASE_CYCLES: Final = 1_000
"""Cycles every delivery costs (the record write and its bookkeeping)."""
FILTER_NODE_CYCLES: Final = 10
"""Cycles per node of the subscriber's filter AST (evaluating it on the message's headers)."""
DEFAULT_BACKLOG_MESSAGES: Final = 10_000
DEFAULT_BACKLOG_BYTES: Final = 64 * 1024 * 1024

PUSH_MODES: Final = frozenset({DeliveryMode.PUSH, DeliveryMode.PUSH_WITH_PULL_FALLBACK})

# Headers of a push delivery record (docs/push.md); values are UTF-8 text.
H_PUSH: Final = "wt:push"
H_PUSH_STREAM: Final = "wt:push:stream"
H_PUSH_SEQUENCE: Final = "wt:push:sequence"
H_PUSH_BLOCK: Final = "wt:push:block"
H_PUSH_CYCLES: Final = "wt:push:cycles"

HeaderTest = Callable[[Mapping[str, Any]], bool]
Headers = tuple[tuple[str, bytes], ...]


def filter_node_count(node: FilterNode | None) -> int:
    """Nodes of a filter AST: each predicate and each all / any / not counts one (0 without a filter)."""
    if node is None:
        return 0
    if isinstance(node, Predicate):
        return 1
    if isinstance(node, Not):
        return 1 + filter_node_count(node.child)
    assert isinstance(node, (All, Any_))
    return 1 + sum(filter_node_count(child) for child in node.children)


def delivery_cycles(value_len: int, filter_nodes: int) -> int:
    """One delivery's cost: PUSH_BASE_CYCLES + 1 cycle per byte of the record value + FILTER_NODE_CYCLES per node."""
    if value_len < 0 or filter_nodes < 0:
        raise InvalidArgumentError("value_len and filter_nodes must be ≥ 0")
    return PUSH_BASE_CYCLES + value_len + FILTER_NODE_CYCLES * filter_nodes


def push_headers(original: Iterable[tuple[str, bytes]], stream_id: str, sequence: int, block: int,
                 cycles: int) -> list[tuple[str, bytes]]:
    """A delivery's headers: the ``messages`` record's headers unchanged, then the ``wt:push`` ones."""
    return [*original, (H_PUSH, b"1"), (H_PUSH_STREAM, stream_id.encode()),
            (H_PUSH_SEQUENCE, str(sequence).encode()), (H_PUSH_BLOCK, str(block).encode()),
            (H_PUSH_CYCLES, str(cycles).encode())]


@dataclasses.dataclass(frozen=True, slots=True)
class PushMessage:
    """One message of the stream as read from ``messages``: its value is pushed byte for byte."""

    sequence: int
    offset: int
    value: bytes
    headers: Headers
    filter_headers: Mapping[str, Any]
    """`StreamMessage.headers()`: what a subscriber's filter is evaluated on."""


@dataclasses.dataclass(frozen=True, slots=True)
class PushSubscriber:
    """An active push subscription: where it starts, its compiled filter and its size."""

    address: str
    created_at_sequence: int
    test: HeaderTest
    filter_nodes: int


@dataclasses.dataclass(frozen=True, slots=True)
class PushLimits:
    """The stream config's per-block bounds."""

    max_deliveries: int
    max_cycles: int


@functools.lru_cache(maxsize=4096)
def _compiled(filter_json: str | None) -> tuple[HeaderTest, int]:
    node = parse_filter(None if filter_json is None else json.loads(filter_json))
    return compile_filter(node), filter_node_count(node)


def _match_nothing(_headers: Mapping[str, Any]) -> bool:
    return False


def push_subscribers(state: StreamState) -> dict[str, PushSubscriber]:
    """The stream's active PUSH / PUSH_WITH_PULL_FALLBACK subscribers by address.

    A stored filter that no longer parses (the writer validated it, so only a forged log holds one)
    matches nothing rather than everything: a subscriber never receives what it filtered out.
    """
    out: dict[str, PushSubscriber] = {}
    for address, sub in state.subscriptions.items():
        if sub.status is not SubscriptionStatus.ACTIVE or sub.mode not in PUSH_MODES:
            continue
        try:
            test, nodes = _compiled(sub.filter_json)
        except Exception:  # InvalidFilterError, bad JSON, or anything a forged filter provokes
            test, nodes = _match_nothing, 0
        out[address] = PushSubscriber(address, sub.created_at_sequence, test, nodes)
    return out


def push_limits(state: StreamState) -> PushLimits | None:
    """The stream's bounds (None before the stream is created: nothing is pushed)."""
    if state.config is None:
        return None
    return PushLimits(state.config.max_push_deliveries_per_block, state.config.max_push_cycles_per_block)


@dataclasses.dataclass(frozen=True, slots=True)
class PlannedDelivery:
    """One delivery of a block: the subscriber, the message, what it cost and the block that paid."""

    subscriber: str
    message: PushMessage
    cycles: int
    block: int


class StreamSchedule:
    """One stream's push work. Mutated only through `ingest`; `plan_block` returns a new schedule."""

    def __init__(self, stream_id: str, *, next_sequence: int = 1, max_messages: int = DEFAULT_BACKLOG_MESSAGES,
                 max_bytes: int = DEFAULT_BACKLOG_BYTES) -> None:
        self.stream_id = stream_id
        self.next_sequence = next_sequence  # the next sequence expected from messages
        self.floor = next_sequence  # sequences below it are gone from the backlog
        self.backlog: dict[int, PushMessage] = {}
        self.backlog_bytes = 0
        self.cursors: dict[str, int] = {}
        self.pointer: str | None = None
        self.block = 0
        self.used_deliveries = 0
        self.used_cycles = 0
        self.dropped = 0
        self.max_messages, self.max_bytes = max(1, max_messages), max(1, max_bytes)

    # ---------------------------------------------------------------- messages in
    def ingest(self, message: PushMessage) -> bool:
        """Add the stream's next message; False (nothing changes) for one already ingested.

        A sequence above the next expected one skips the missing ones (nobody can be served them).
        The oldest messages fall out when the backlog exceeds its bounds.
        """
        if message.sequence < self.next_sequence:
            return False
        self.backlog[message.sequence] = message
        self.backlog_bytes += len(message.value)
        self.next_sequence = message.sequence + 1
        while self.backlog and (len(self.backlog) > self.max_messages or self.backlog_bytes > self.max_bytes):
            oldest = next(iter(self.backlog))
            self.backlog_bytes -= len(self.backlog.pop(oldest).value)
            self.floor = oldest + 1
        return True

    # ---------------------------------------------------------------- planning
    def copy(self) -> StreamSchedule:
        other = StreamSchedule.__new__(StreamSchedule)
        other.__dict__.update(self.__dict__)
        other.backlog = dict(self.backlog)
        other.cursors = dict(self.cursors)
        return other

    def _sync(self, subscribers: Mapping[str, PushSubscriber]) -> None:
        for address in [a for a in self.cursors if a not in subscribers]:
            del self.cursors[address]  # unsubscribed: its pending work stops
        for address, sub in subscribers.items():
            cursor = self.cursors.get(address)
            if cursor is None:
                self.cursors[address] = max(sub.created_at_sequence + 1, self.floor)
            elif cursor < self.floor:
                self.dropped += self.floor - cursor  # fell out of the backlog before it was served
                self.cursors[address] = self.floor

    def _next_pending(self, sub: PushSubscriber, last: int) -> PushMessage | None:
        """The subscriber's oldest message up to `last` that passes its filter (its cursor moves onto it)."""
        cursor = self.cursors[sub.address]
        while cursor <= last:
            message = self.backlog.get(cursor)
            if message is not None and sub.test(message.filter_headers):
                self.cursors[sub.address] = cursor
                return message
            cursor += 1
        self.cursors[sub.address] = cursor
        return None

    def low_watermark(self, head: int) -> int:
        """The lowest sequence some subscriber may still need (what is below it can be released)."""
        return min(min(self.cursors.values(), default=self.next_sequence), self.next_sequence, head + 1)

    def _release(self, head: int) -> None:
        watermark = self.low_watermark(head)
        while self.backlog:
            oldest = next(iter(self.backlog))
            if oldest >= watermark:
                break
            self.backlog_bytes -= len(self.backlog.pop(oldest).value)
        self.floor = max(self.floor, min(watermark, self.next_sequence))

    def pending(self, head: int) -> int:
        """An upper bound of the (subscriber, message) pairs still owed (filters not applied)."""
        last = min(head, self.next_sequence - 1)
        return sum(max(0, last - cursor + 1) for cursor in self.cursors.values())

    # ---------------------------------------------------------------- checkpoint
    def checkpoint(self, subscribers: Mapping[str, PushSubscriber], head: int) -> PushCheckpoint:
        """The checkpoint of this schedule with `subscribers` (the stream's current ones) and `head`."""
        if any(a not in self.cursors for a in subscribers) or len(self.cursors) != len(subscribers):
            synced = self.copy()
            synced._sync(subscribers)
            return synced.checkpoint(subscribers, head)
        watermark = self.low_watermark(head)
        ahead = {}
        for address, cursor in self.cursors.items():
            sub = subscribers.get(address)
            implied = max(watermark, (sub.created_at_sequence + 1) if sub is not None else 0)
            if cursor != implied:
                ahead[address] = cursor
        resume = next((m.offset for seq, m in self.backlog.items() if seq >= watermark), None)
        return PushCheckpoint(self.stream_id, watermark, ahead, self.pointer, self.block, self.used_deliveries,
                              self.used_cycles, resume, self.dropped)

    @classmethod
    def restore(cls, checkpoint: PushCheckpoint, *, max_messages: int = DEFAULT_BACKLOG_MESSAGES,
                max_bytes: int = DEFAULT_BACKLOG_BYTES) -> StreamSchedule:
        """The schedule a checkpoint describes, with an empty backlog: feed it the stream's messages
        again from ``checkpoint.resume_offset`` (those below the low watermark are ignored)."""
        schedule = cls(checkpoint.stream_id, next_sequence=checkpoint.low_watermark, max_messages=max_messages,
                       max_bytes=max_bytes)
        schedule.cursors = dict(checkpoint.ahead)
        schedule.pointer = checkpoint.pointer
        schedule.block = checkpoint.block
        schedule.used_deliveries, schedule.used_cycles = checkpoint.used_deliveries, checkpoint.used_cycles
        schedule.dropped = checkpoint.dropped
        return schedule


@dataclasses.dataclass(frozen=True, slots=True)
class BlockPlan:
    """The schedule after a plan, and the deliveries to write (in order) with it."""

    schedule: StreamSchedule
    deliveries: Sequence[PlannedDelivery]


def plan_block(schedule: StreamSchedule, block: int, *, subscribers: Mapping[str, PushSubscriber],
               limits: PushLimits, head: int) -> BlockPlan:
    """The deliveries of `block` (what is left of its budget) in round-robin; `schedule` is not changed.

    `head` is the stream's head as folded from ``events``: no message above it is pushed.
    """
    s = schedule.copy()
    if block > s.block:
        s.block, s.used_deliveries, s.used_cycles = block, 0, 0
    s._sync(subscribers)
    last = min(head, s.next_sequence - 1)
    order = sorted(s.cursors)
    start = bisect.bisect_right(order, s.pointer) if s.pointer is not None else 0
    ring: deque[str] = deque()
    heads: dict[str, PushMessage] = {}
    for address in order[start:] + order[:start]:
        message = s._next_pending(subscribers[address], last)
        if message is not None:
            ring.append(address)
            heads[address] = message
    deliveries: list[PlannedDelivery] = []
    while ring and s.used_deliveries < limits.max_deliveries:
        address = ring[0]
        sub, message = subscribers[address], heads[address]
        cycles = delivery_cycles(len(message.value), sub.filter_nodes)
        served = False
        if cycles > limits.max_cycles:
            # No block can ever pay for it: drop it rather than stall every subscriber behind it.
            s.dropped += 1
        elif s.used_cycles + cycles > limits.max_cycles:
            break
        else:
            deliveries.append(PlannedDelivery(address, message, cycles, s.block))
            s.used_deliveries += 1
            s.used_cycles += cycles
            s.pointer, served = address, True
        s.cursors[address] = message.sequence + 1
        nxt = s._next_pending(sub, last)
        if nxt is None:
            ring.popleft()
            del heads[address]
        elif served:
            ring.rotate(-1)  # served: to the back of the ring
            heads[address] = nxt
        else:
            heads[address] = nxt  # dropped, not served: its next message is still this visit's
    s._release(head)
    return BlockPlan(s, deliveries)
