"""A command or event record is decoded once, however many aggregates the worker hosts.

The host routes a record by asking each aggregate in turn whether the decoded record is its own;
the bytes are decoded once per distinct decoder, and every aggregate of the protocol shares one,
so a purchase (the third aggregate in routing order) or a registry forward (the last) is decoded
exactly once, and a refusal still names the rule the record broke.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import nacl.signing
import pytest

from watchtower.protocol.errors import MalformedRecordError, UnauthorizedError
from watchtower.protocol.signed_command import Method, sign_command
from watchtower.protocol.stream.actor import StreamState, decide
from watchtower.schemas.wire import decode_command, decode_event, encode_command, encode_event, encode_registry_forward
from watchtower.workers.aggregate import DecodeOnce
from watchtower.workers.aggregates import PaidStreamAggregate, RegistryAggregate, default_aggregates
from watchtower.workers.decider import CommandDecider
from watchtower.workers.event_fold import EventFold

OWNER = nacl.signing.SigningKey(b"\x31" * 32)


class Counting:
    """A decoder that counts its calls (the same object is shared by every aggregate given it)."""

    def __init__(self, decoder: Callable[[bytes | None], Any]) -> None:
        self.decoder, self.calls = decoder, 0

    def __call__(self, value: bytes | None) -> Any:
        self.calls += 1
        return self.decoder(value)


def counted_aggregates() -> tuple[list[Any], Counting, Counting]:
    commands, events = Counting(decode_command), Counting(decode_event)
    aggregates: list[Any] = []
    for aggregate in default_aggregates():
        # The real adapter with its decoders swapped for the counting ones (instance attributes).
        aggregate.command_decoder = commands  # type: ignore[misc]
        aggregate.event_decoder = events  # type: ignore[misc]
        aggregates.append(aggregate)
    return aggregates, commands, events


def route(aggregates: list[Any], value: bytes | None, *, internal: bool) -> tuple[Any, Any]:
    return CommandDecider._route(SimpleNamespace(aggregates=aggregates), value, internal)  # type: ignore[arg-type]


def test_every_hosted_aggregate_shares_one_command_decoder_and_one_event_decoder() -> None:
    aggregates = default_aggregates()
    assert {a.command_decoder for a in aggregates} == {decode_command}
    assert {a.event_decoder for a in aggregates} == {decode_event}


def test_a_purchase_is_decoded_once_and_reaches_the_paid_stream_aggregate() -> None:
    aggregates, commands, _ = counted_aggregates()
    purchase = sign_command(OWNER, Method.ACQUIRE_EPOCH_ACCESS, "paid-feed", 1,
                            {"from_epoch": 1, "epochs": 2, "max_price_cby": 100})
    aggregate, command = route(aggregates, encode_command(purchase), internal=False)
    assert isinstance(aggregate, PaidStreamAggregate)
    assert command == purchase
    assert commands.calls == 1


def test_a_registry_forward_is_decoded_once_on_internal_and_refused_once_on_commands() -> None:
    aggregates, commands, _ = counted_aggregates()
    create = sign_command(OWNER, Method.CREATE_STREAM, "listed", 1, {"feed": {"name": "n"}})
    forward = encode_registry_forward(create)
    aggregate, _ = route(aggregates, forward, internal=True)
    assert isinstance(aggregate, RegistryAggregate)
    assert commands.calls == 1
    with pytest.raises(UnauthorizedError, match="forwarded by stream workers only"):
        route(aggregates, forward, internal=False)
    assert commands.calls == 2


def test_bytes_that_are_no_record_are_decoded_once_and_refused_as_malformed() -> None:
    aggregates, commands, _ = counted_aggregates()
    with pytest.raises(MalformedRecordError):
        route(aggregates, b"\x00not a command", internal=False)
    assert commands.calls == 1


def test_an_events_record_is_decoded_once_by_the_fold() -> None:
    aggregates, _, events = counted_aggregates()
    fold = EventFold("t.events", 0, 1, aggregates=aggregates)
    create = sign_command(OWNER, Method.CREATE_STREAM, "s1", 1,
                          {"publisher_key_hex": bytes(OWNER.verify_key).hex()})
    (created,) = decide(StreamState.initial("s1"), create, block_height=7).events
    assert fold.apply(b"s1", encode_event(created), offset=6) is None
    assert fold.state.states["stream"]["s1"].head == 0
    assert events.calls == 1
    refused = fold.apply(b"k", b"\x00not an event", offset=7)
    assert refused is not None
    assert refused.offset == 7
    assert events.calls == 2


def test_decode_once_raises_the_same_refusal_to_every_caller_without_decoding_again() -> None:
    calls: list[bytes | None] = []

    def failing(value: bytes | None) -> Any:
        calls.append(value)
        raise MalformedRecordError("not one")

    decoded = DecodeOnce(b"x")
    for _ in range(3):
        with pytest.raises(MalformedRecordError, match="not one"):
            decoded.get(failing)
    assert calls == [b"x"]
