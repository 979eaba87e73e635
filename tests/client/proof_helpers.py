"""Shared by the page-proof tests: a deterministic stream script, and a hostile read side.

`publish_script` writes the same signed commands to any API (the in-memory fake or a real stack),
so their answers can be compared exactly. `TamperingApi` wraps any StreamApi: the wrapped API
answers honestly, then the answer is changed the way a lying server or a man in the middle could,
before the SDK sees it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import nacl.signing

from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.key_schedule import KeySchedule

OWNER = nacl.signing.SigningKey(bytes(range(40, 72)))
KEY_1 = nacl.signing.SigningKey(bytes(range(41, 73)))
KEY_2 = nacl.signing.SigningKey(bytes(range(42, 74)))
ROTATED_AFTER = 12  # 1..12 signed with KEY_1 (key id 1), 13.. with KEY_2 (key id 2)
LENGTH = 30
BTC = {"field": "tags.symbol", "op": "eq", "value": "BTC"}
BTC_SEQUENCES = list(range(3, LENGTH + 1, 3))  # every third message is BTC, the others ETH


class Commands(Protocol):
    """Anything that takes signed commands: `FakeApi` or `ApiClient`."""

    def command(self, cmd: Command, *, timeout_s: float = ...) -> dict[str, Any]: ...


def publish_script(api: Commands, stream_id: str) -> None:
    """Create `stream_id` and publish 1..LENGTH, rotating the publisher key after ROTATED_AFTER."""
    nonce = iter(range(1, 1_000))
    api.command(sign_command(OWNER, "create_stream", stream_id, next(nonce), {
        "publisher_key_hex": bytes(KEY_1.verify_key).hex(), "ring_buffer_capacity": 100}))
    for seq in range(1, LENGTH + 1):
        if seq == ROTATED_AFTER + 1:
            api.command(sign_command(OWNER, "rotate_publisher_key", stream_id, next(nonce),
                                     {"new_key": bytes(KEY_2.verify_key)}))
        key, key_id = (KEY_1, 1) if seq <= ROTATED_AFTER else (KEY_2, 2)
        message = sign_message(stream_id=stream_id, sequence=seq, timestamp_unix_ms=1_700_000_000_000 + seq,
                               kind="trade" if seq % 2 else "quote", payload=json.dumps({"px": seq}).encode(),
                               signing_key=key, signing_key_id=key_id,
                               tags={"symbol": "BTC" if seq % 3 == 0 else "ETH", "size": seq % 7})
        api.command(sign_command(OWNER, "publish", stream_id, next(nonce), message.to_json_dict()))


Tamper = Callable[[dict[str, Any]], None]


class TamperingApi:
    """`inner`, with every get_since answer passed through `tamper` (in place) when one is set."""

    def __init__(self, inner: Any, tamper: Tamper | None = None) -> None:  # any StreamApi, FakeApi included
        self.inner = inner
        self.tamper = tamper
        self.asked: list[dict[str, Any]] = []  # the keyword arguments of each get_since

    def command(self, cmd: Command, *, timeout_s: float = 30.0) -> dict[str, Any]:
        return self.inner.command(cmd, timeout_s=timeout_s)

    def get_head(self, stream_id: str) -> dict[str, Any]:
        return self.inner.get_head(stream_id)

    def key_schedule(self, stream_id: str) -> KeySchedule:
        return self.inner.key_schedule(stream_id)

    def feed(self, feed_id: int) -> dict[str, Any]:
        return self.inner.feed(feed_id)

    def get_since(self, stream_id: str, cursor: int = 0, limit: int = 100, *,
                  filter: Mapping[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        self.asked.append(dict(kw))
        answer = copy.deepcopy(self.inner.get_since(stream_id, cursor, limit, filter=filter, **kw))
        if self.tamper is not None:
            self.tamper(answer)
        return answer


def remove_message(sequence: int) -> Tamper:
    """Leave matching message `sequence` out of the page (and out of the proof: it simply vanishes)."""
    def tamper(answer: dict[str, Any]) -> None:
        answer["messages"] = [m for m in answer["messages"] if m["sequence"] != sequence]
    return tamper


def hide_in_proof(sequence: int) -> Tamper:
    """Move matching message `sequence` from the page into the proof, as if the filter had skipped it."""
    def tamper(answer: dict[str, Any]) -> None:
        (hidden,) = [m for m in answer["messages"] if m["sequence"] == sequence]
        answer["messages"].remove(hidden)
        entry = {k: v for k, v in hidden.items() if k != "payload_inline_hex"}
        answer["proof"]["skipped"] = sorted([*answer["proof"]["skipped"], entry], key=lambda e: e["sequence"])
    return tamper


def swap_messages(i: int, j: int) -> Tamper:
    """Swap the page's i-th and j-th messages."""
    def tamper(answer: dict[str, Any]) -> None:
        messages = answer["messages"]
        messages[i], messages[j] = messages[j], messages[i]
    return tamper


def flip_skipped_signature(index: int) -> Tamper:
    """Flip one bit of the signature of the proof's `index`-th skipped entry."""
    def tamper(answer: dict[str, Any]) -> None:
        entry = answer["proof"]["skipped"][index]
        sig = bytearray.fromhex(entry["publisher_sig_hex"])
        sig[0] ^= 1
        entry["publisher_sig_hex"] = sig.hex()
    return tamper
