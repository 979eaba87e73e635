"""Valid inputs for every decoder, produced by Watchtower's own encoders (the seed corpora).

A fixed key and fixed values make the samples identical on every run, so regenerating the seed
corpus (`python -m fuzz.run --write-seeds`) changes no committed file unless a codec changed.
The stream is driven through `decide` / `evolve` exactly as a worker does, so every event is one
the write path really produces.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import nacl.signing

from watchtower.protocol.errors import StaleSequenceError, UnauthorizedError
from watchtower.protocol.registry import RegistryState, decide_registration, evolve_registry
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.actor import decide
from watchtower.protocol.stream.message import StreamMessage
from watchtower.protocol.stream.snapshots import encode_registry, encode_snapshot, encode_streams
from watchtower.protocol.stream.state import Event, StreamState, evolve
from watchtower.schemas import codec
from watchtower.schemas.wire import encode_command, encode_event, encode_registry_forward, encode_reply

OWNER_KEY = nacl.signing.SigningKey(b"\x11" * 32)
PUBLISHER_KEY = nacl.signing.SigningKey(b"\x22" * 32)
NEXT_PUBLISHER_KEY = nacl.signing.SigningKey(b"\x33" * 32)
SUBSCRIBER_KEY = nacl.signing.SigningKey(b"\x44" * 32)
STREAM_ID = "fuzz-stream"
BLOCK = 1_000
SUBSCRIBER = "0x" + bytes(SUBSCRIBER_KEY.verify_key).hex()

FILTERS: tuple[Any, ...] = (
    {"field": "kind", "op": "eq", "value": "trade"},
    {"field": "tags.venue", "op": "in", "value": ["a", "b", 3]},
    {"field": "sequence", "op": "gte", "value": 10},
    {"field": "timestamp_unix_ms", "op": "lte", "value": 1.5e12},
    {"field": "tags.x", "op": "exists"},
    {"field": "tags.x", "op": "exists", "value": False},
    {"field": "tags.flag", "op": "ne", "value": True},
    {"field": "kind", "op": "nin", "value": ["a"]},
    {"all": [{"field": "kind", "op": "eq", "value": "k"}, {"not": {"field": "tags.a", "op": "gte", "value": "m"}}]},
    {"any": [{"all": [{"not": {"field": "kind", "op": "eq", "value": "k"}}]}, {"field": "sequence", "op": "lte",
                                                                              "value": 2}]},
)


def message(sequence: int, *, key: nacl.signing.SigningKey = PUBLISHER_KEY, key_id: int = 1) -> StreamMessage:
    """A signed message of the fuzz stream."""
    return sign_message(stream_id=STREAM_ID, sequence=sequence, timestamp_unix_ms=1_700_000_000_000 + sequence,
                        kind="trade", payload=json.dumps({"n": sequence}).encode(), signing_key=key,
                        signing_key_id=key_id, tags={"venue": "a", "size": 1.5, "hot": True, "n": sequence})


def commands() -> list[Command]:
    """One command of every method, in an order the stream accepts."""
    pub = bytes(PUBLISHER_KEY.verify_key)

    def owner(nonce: int, method: str, body: dict[str, Any]) -> Command:
        return sign_command(OWNER_KEY, method, STREAM_ID, nonce, body)

    return [
        owner(1, "create_stream", {"publisher_key": pub, "feed": {"name": "fuzz", "description": "seed"}}),
        owner(2, "publish", message(1).to_json_dict()),
        owner(3, "publish", message(2).to_json_dict()),
        sign_command(SUBSCRIBER_KEY, "subscribe", STREAM_ID, 1, {"mode": "PULL", "filter": FILTERS[8]}),
        owner(4, "rotate_publisher_key", {"new_key": bytes(NEXT_PUBLISHER_KEY.verify_key)}),
        owner(5, "publish", message(3, key=NEXT_PUBLISHER_KEY, key_id=2).to_json_dict()),
        owner(6, "set_subscription_policy", {"policy": "PRIVATE_ALLOWLIST"}),
        owner(7, "allowlist_add", {"address": SUBSCRIBER}),
        owner(8, "allowlist_remove", {"address": SUBSCRIBER}),
        owner(9, "announce_key_epoch", {"key_epoch": 1}),
        sign_command(SUBSCRIBER_KEY, "unsubscribe", STREAM_ID, 2, {}),
    ]


@dataclasses.dataclass(frozen=True)
class History:
    """The fuzz stream after every seed command: its events, messages, states and registry."""

    events: tuple[Event, ...]
    messages: tuple[StreamMessage, ...]
    replies: tuple[dict[str, Any], ...]
    created: StreamState
    final: StreamState
    registry: RegistryState


def history() -> History:
    """Drive the seed commands through decide/evolve (and the registry) as a worker would."""
    state = StreamState.initial(STREAM_ID)
    created: StreamState | None = None
    events: list[Event] = []
    messages: list[StreamMessage] = []
    replies: list[dict[str, Any]] = []
    for cmd in commands():
        decision = decide(state, cmd, block_height=BLOCK)
        for event in decision.events:
            state = evolve(state, event)
            events.append(event)
        created = created or state
        messages.extend(decision.messages)
        replies.append(decision.reply)
    registry_event, reply = decide_registration(RegistryState(), commands()[0], block_height=BLOCK)
    assert registry_event is not None
    assert created is not None
    events.append(registry_event)
    replies.append(reply)
    registry = evolve_registry(RegistryState(), registry_event)
    return History(tuple(events), tuple(messages), tuple(replies), created, state, registry)


def command_records() -> list[bytes]:
    cmds = commands()
    return [encode_command(c) for c in cmds] + [encode_registry_forward(cmds[0])]


def event_records(h: History) -> list[bytes]:
    return [encode_event(e) for e in h.events]


def avro_records(h: History) -> list[bytes]:
    """Framed records (selector byte 0) and unframed bodies (selector = schema index, see targets)."""
    framed = [b"\x00" + r for r in event_records(h)] + [b"\x00" + codec.encode("StreamMessage", m.to_record())
                                                         for m in h.messages]
    names = codec.schema_names()
    unframed = []
    for record in framed:
        name, _version = codec.read_header(record[1:])
        unframed.append(bytes((1 + names.index(name),)) + record[1 + codec.HEADER_BYTES:])
    return framed + unframed


def snapshot_records(h: History) -> list[bytes]:
    streams = encode_streams({h.final.stream_id: h.final, "empty": StreamState.initial("empty")})
    registry = encode_registry({"registry": h.registry})
    return [
        encode_snapshot(3, 42, {"streams": streams, "registry": registry}),
        encode_snapshot(0, 0, {}),
        b"\x01" + streams,
        b"\x02" + registry,
    ]


def cbor_values() -> list[Any]:
    """Values the deterministic CBOR encoder accepts (its input domain, as decoded CBOR)."""
    return [None, True, False, 0, 23, 24, -25, 2**64 - 1, -(2**64), 1.5, 0.1, float("inf"), "", "é€𝄞", b"\x00",
            [1, [2, [3]]], {"b": 1, "a": [None, 2.5], "aa": {"x": b"y"}}, {1: "int key", "1": "text key"}]


def reply_records(h: History) -> list[bytes]:
    ok = [encode_reply(True, r) for r in h.replies[:4]]
    errors = [encode_reply(False, error=StaleSequenceError.for_head(expected=9, head=3)),
              encode_reply(False, error=UnauthorizedError("sign with the owner's key"))]
    return ok + errors


def message_documents(h: History) -> list[bytes]:
    return [json.dumps(m.to_json_dict(), sort_keys=True).encode() for m in h.messages]


def filter_documents() -> list[bytes]:
    return [json.dumps(f).encode() for f in FILTERS]


def http_queries() -> list[bytes]:
    return [
        b"cursor=0&limit=100",
        b"cursor=41&limit=500&filter=" + json.dumps(FILTERS[0]).encode(),
        b"limit=1&min_head=5&wait_ms=30000",
        b"from=9223372036854775807&proof=true",
        b"sequence=12&proof=0",
        b'body={"timeout_s":2.5}',
        b'body={"timeout_s":120}',
    ]
