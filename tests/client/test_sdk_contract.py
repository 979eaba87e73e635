"""The SDK's in-process fake (`watchtower.client.fake.FakeApi`) and a real stack answer alike.

One scripted scenario (create, publish with tags, rotate the publisher key, publish more,
subscribe, then every read the SDK makes: get_since at several cursors, limits and filters, head,
stream info, key at a sequence, key history pages with their key chain, the SDK's verification of
that chain, subscribers, and the errors with their codes)
runs against the fake and against real processes: an embedded broker, a stream-actor worker and a
projection with the command gateway, through `ApiClient`. Every answer is recorded; the two records
must be equal field by field. The commands are signed once, deterministically (fixed keys, counter
nonces, fixed timestamps), and both sides get the very same bytes, so only what the server's clock
decides (the block height a stream was created at) is normalised away.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import nacl.signing
import pytest
from stack_fixture import start_stack

from watchtower.client.fake import FakeApi
from watchtower.client.http import ApiClient
from watchtower.client.subscriber import Subscriber
from watchtower.local.stack import ServiceSet
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.signing import sign_message

pytestmark = pytest.mark.integration

STREAM = "s-contract"
CAPACITY = 8
OWNER = nacl.signing.SigningKey(bytes(range(32)))
FAN = nacl.signing.SigningKey(bytes(range(1, 33)))
KEY_1 = nacl.signing.SigningKey(bytes(range(2, 34)))
KEY_2 = nacl.signing.SigningKey(bytes(range(3, 35)))
#: Fields whose value the deciding server's clock sets (block heights); equal in kind, not in value.
CLOCK_FIELDS = frozenset({"created_at_block"})

Api = Any  # FakeApi or ApiClient: the same surface


def _publish(seq: int, key: nacl.signing.SigningKey, key_id: int, nonce: int) -> Command:
    message = sign_message(stream_id=STREAM, sequence=seq, timestamp_unix_ms=1_700_000_000_000 + seq,
                           kind="tick", payload=json.dumps({"i": seq}).encode(), signing_key=key,
                           signing_key_id=key_id, tags={"i": seq, "color": "red" if seq % 3 == 0 else "blue"})
    return sign_command(OWNER, "publish", STREAM, nonce, message.to_json_dict())


def _outcome(call: Callable[[], Any]) -> Any:
    """The answer of `call`, or its spec error as ``{"error": code}`` (messages may be worded apart)."""
    try:
        return _normalised(call())
    except WatchtowerError as err:
        return {"error": err.code}


def _normalised(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<clock>" if k in CLOCK_FIELDS and isinstance(v, int) else _normalised(v))
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalised(v) for v in value]
    return value


def scenario(api: Api, settle: Callable[[int], None]) -> list[tuple[str, Any]]:
    """Run the script against `api`; `settle(head)` waits until reads show `head` (a no-op in memory)."""
    record: list[tuple[str, Any]] = []

    def step(label: str, call: Callable[[], Any]) -> None:
        record.append((label, _outcome(call)))

    owner_nonce = iter(range(1, 1_000))
    step("create", lambda: api.command(sign_command(OWNER, "create_stream", STREAM, next(owner_nonce), {
        "publisher_key_hex": bytes(KEY_1.verify_key).hex(), "ring_buffer_capacity": CAPACITY})))
    step("create again", lambda: api.command(sign_command(OWNER, "create_stream", STREAM, next(owner_nonce), {
        "publisher_key_hex": bytes(KEY_1.verify_key).hex()})))
    for seq in range(1, 6):
        step(f"publish {seq}", lambda seq=seq: api.command(_publish(seq, KEY_1, 1, next(owner_nonce))))
    step("publish stale", lambda: api.command(_publish(3, KEY_1, 1, next(owner_nonce))))
    step("publish by a stranger", lambda: api.command(sign_command(
        FAN, "publish", STREAM, 1, _publish(6, KEY_1, 1, 999).body)))
    step("rotate", lambda: api.command(sign_command(OWNER, "rotate_publisher_key", STREAM, next(owner_nonce),
                                                    {"new_key": bytes(KEY_2.verify_key)})))
    step("publish with the retired key", lambda: api.command(_publish(6, KEY_1, 1, next(owner_nonce))))
    for seq in range(6, 13):  # 12 messages in a window of 8: the floor moves to 5
        step(f"publish {seq}", lambda seq=seq: api.command(_publish(seq, KEY_2, 2, next(owner_nonce))))
    step("subscribe", lambda: api.command(sign_command(FAN, "subscribe", STREAM, 2, {
        "mode": "PULL", "filter": {"field": "tags.color", "op": "eq", "value": "red"}})))
    step("replayed nonce", lambda: api.command(sign_command(FAN, "subscribe", STREAM, 2, {"mode": "PUSH"})))
    settle(12)

    step("head", lambda: api.get_head(STREAM))
    step("info", lambda: api.stream_info(STREAM))
    step("head of an unknown stream", lambda: api.get_head("s-nobody"))
    for cursor, limit in ((3, 100), (4, 2), (4, 500), (7, 3), (11, 10), (12, 10), (40, 10)):
        step(f"get_since {cursor} {limit}", lambda c=cursor, n=limit: api.get_since(STREAM, c, n))
    step("get_since below the window", lambda: api.get_since(STREAM, 2, 10))
    step("get_since from 0 after the window moved", lambda: api.get_since(STREAM, 0, 10))
    step("get_since limit 0", lambda: api.get_since(STREAM, 4, 0))
    step("get_since limit 501", lambda: api.get_since(STREAM, 4, 501))
    step("limit is checked before the cursor", lambda: api.get_since(STREAM, 0, 501))
    red = {"field": "tags.color", "op": "eq", "value": "red"}
    step("get_since red", lambda: api.get_since(STREAM, 4, 100, filter=red))
    step("get_since i in", lambda: api.get_since(STREAM, 4, 3, filter={"field": "tags.i", "op": "in",
                                                                        "value": [5, 6, 11]}))
    step("get_since bad filter", lambda: api.get_since(STREAM, 4, 10, filter={"field": "tags.i", "op": "nope"}))
    step("get_since unknown stream", lambda: api.get_since("s-nobody", 0, 10))
    step("get_since long poll already met", lambda: api.get_since(STREAM, 10, 10, min_head=12, wait_ms=0))
    for seq in (1, 5, 6, 12, 13):
        step(f"key at {seq}", lambda s=seq: api.key_at_sequence(STREAM, s))
    step("key at 0", lambda: api.key_at_sequence(STREAM, 0))
    step("key history", lambda: api.key_history(STREAM))
    step("key history page 1", lambda: api.key_history(STREAM, 1, 1))
    step("key history page 2", lambda: api.key_history(STREAM, 2, 1))
    step("key history past the end", lambda: api.key_history(STREAM, 3, 1))
    step("key history limit 0", lambda: api.key_history(STREAM, 1, 0))
    step("key schedule", lambda: api.key_schedule(STREAM).to_dict())
    step("SDK key chain verified from the owner", lambda: Subscriber(
        api, STREAM, expected_owner=address_from_public_key(bytes(OWNER.verify_key))).key_schedule().to_dict())
    step("SDK key chain of another owner", lambda: Subscriber(
        api, STREAM, expected_owner=address_from_public_key(bytes(FAN.verify_key))).key_schedule().to_dict())
    step("subscribers", lambda: api.subscribers(STREAM))
    step("active subscribers", lambda: api.subscribers(STREAM, active_only=True))
    step("SDK subscriber from 4", lambda: [m.to_json_dict() for m in Subscriber(api, STREAM, 4).poll(3)])
    step("SDK subscriber, red only", lambda: [m.sequence for m in Subscriber(api, STREAM, 4, red).poll(100)])
    step("SDK subscriber too far behind", lambda: Subscriber(api, STREAM, 1).poll(10))
    return record


@pytest.fixture(scope="module")
def real_stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceSet]:
    with start_stack(kafka_bootstrap, tmp_path_factory.mktemp("sdk-contract-logs")) as services:
        yield services


def test_the_scenario_exercises_answers_and_errors_alike() -> None:
    """The script is worth comparing: in memory it already reaches reads, pages and refusals."""
    answers = dict(scenario(FakeApi(), lambda _head: None))
    assert answers["publish 12"]["sequence"] == 12
    assert answers["head"]["floor_sequence"] == 5
    assert [m["sequence"] for m in answers["get_since 4 2"]["messages"]] == [5, 6]
    assert answers["get_since below the window"] == {"error": "CURSOR_TOO_OLD"}
    assert answers["limit is checked before the cursor"] == {"error": "LIMIT_EXCEEDED"}
    assert answers["publish stale"] == {"error": "STALE_SEQUENCE"}
    assert answers["get_since bad filter"] == {"error": "INVALID_FILTER"}
    assert answers["SDK subscriber, red only"] == [6, 9, 12]
    chain = answers["SDK key chain verified from the owner"]["entries"]
    assert [e["command"]["method"] for e in chain] == ["create_stream", "rotate_publisher_key"]
    assert answers["SDK key chain of another owner"] == {"error": "INVALID_SIGNATURE"}


@pytest.mark.secure
def test_the_fake_and_a_real_stack_give_the_same_answers(real_stack: ServiceSet) -> None:
    api = ApiClient(real_stack.api_url)

    def settle(head: int) -> None:  # the projection folds asynchronously: wait for the head, no longer
        api.get_since(STREAM, head - 1, 1, min_head=head, wait_ms=30_000)

    fake, real = scenario(FakeApi(), lambda _head: None), scenario(api, settle)
    assert [label for label, _ in fake] == [label for label, _ in real]
    differing = [(label, f, r) for (label, f), (_, r) in zip(fake, real, strict=True) if f != r]
    assert not differing, "\n".join(f"{label}:\n  fake {f}\n  real {r}" for label, f, r in differing)
