"""The replay worker on a real broker and stack: selection, cancel, hostile replay records."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import nacl.public
import nacl.signing
import pytest
from replay_helpers import (
    DeliveryReader,
    Stream,
    create_and_publish,
    header_map,
    kind_of,
    produce_replay,
    register,
    replay_views,
    wait_status,
)
from stack_fixture import start_stack
from waiting import wait_until

from watchtower.client.private_reader import ConfidentialReader
from watchtower.gateway.transport import CommandClient
from watchtower.local.stack import ServiceSet
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.confidential.keyload import KEYLOAD_ID_TAG, KEYLOAD_KIND, Recipient, build_keyload
from watchtower.protocol.confidential.session_key import mask
from watchtower.protocol.replay.records import ReplayCancelRequest, ReplayProgress
from watchtower.protocol.replay.rules import selector_for
from watchtower.protocol.replay.status import ReplayView
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas.records import decode_message
from watchtower.schemas.replay_records import encode_replay_record

pytestmark = pytest.mark.integration

COUNT = 3000


@pytest.fixture(scope="module")
def env(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceSet, Stream]]:
    with start_stack(kafka_bootstrap, tmp_path_factory.mktemp("replay-logs"), replay=True) as services:
        # Slow, small slices so a cancel lands mid-replay.
        services.kill9("replay-r1")
        services.start_replay("r1", {"WATCHTOWER_REPLAY_SLICE": "100", "WATCHTOWER_REPLAY_RATE": "400"})
        client = CommandClient(services.bootstrap, prefix=services.prefix)
        try:
            yield services, create_and_publish(client, COUNT, capacity=50)
        finally:
            client.close()


@pytest.fixture
def reader(env: tuple[ServiceSet, Stream]) -> Iterator[DeliveryReader]:
    r = DeliveryReader(env[0].bootstrap, env[0].prefix)
    yield r
    r.close()


def health(services: ServiceSet) -> dict[str, Any]:
    return json.loads(Path(services.health_file("replay-r1")).read_text())


def wait_health(services: ServiceSet, cond: Callable[[dict[str, Any]], bool], timeout_s: float = 60) -> dict[str, Any]:
    body: dict[str, Any] = {}

    def satisfied() -> dict[str, Any] | None:
        nonlocal body
        body = health(services)
        return body if cond(body) else None

    return wait_until(lambda: f"the health file to satisfy the check (last: {body})", satisfied,
                      timeout_s=timeout_s, every_s=0.3)


@pytest.mark.secure
def test_filter_and_skip_select_exactly_what_the_selector_says(env: tuple[ServiceSet, Stream],
                                                               reader: DeliveryReader) -> None:
    services, stream = env
    flt = {"any": [{"field": "kind", "op": "eq", "value": "trade"}, {"field": "tags.n", "op": "lte", "value": 40}]}
    reg = register(services.bootstrap, services.prefix, stream, start=10, to=700, flt=flt, skip=[2, 1])
    view = wait_status(services.bootstrap, services.prefix, reg.replay_id, {"completed"}, timeout_s=300)
    reader.until(lambda: reader.count(reg.replay_id) >= view.delivered, what="the filtered replay")
    reader.drain(1.0)
    got = [decode_message(m.value()).sequence for m in reader.by_replay[reg.replay_id]]
    selector = selector_for(reg)
    expected = [s for s in range(10, 700) if selector.verdict(_msg(stream, s)) == "deliver"]
    assert got == expected
    assert view.delivered == len(expected)
    assert view.delivered + view.filtered + view.skipped == 690
    assert view.skipped == len([s for s in range(10, 700) if s % 2 != 1])
    assert all(header_map(m)["icrc77:replay"] == b"true" for m in reader.by_replay[reg.replay_id])
    assert all("icrc77:replay:end_id" not in header_map(m) for m in reader.by_replay[reg.replay_id])


def _msg(stream: Stream, seq: int) -> StreamMessage:
    return sign_message(stream_id=stream.stream_id, sequence=seq, timestamp_unix_ms=1_700_000_000_000 + seq,
                        kind=kind_of(seq), payload=seq.to_bytes(8, "big"), signing_key=stream.publisher,
                        content_type="application/octet-stream", tags={"n": seq})


def test_cancel_mid_replay_stops_deliveries(env: tuple[ServiceSet, Stream], reader: DeliveryReader) -> None:
    services, stream = env
    reg = register(services.bootstrap, services.prefix, stream)
    reader.until(lambda: reader.count(reg.replay_id) >= 200, what="the first deliveries")
    stranger = ReplayCancelRequest(v=1, replay_id=reg.replay_id, stream_id=stream.stream_id, requester="0xnobody",
                                     block_height=2, nonce=5, digest_hex="00" * 32)
    produce_replay(services.bootstrap, services.prefix, stream.stream_id, encode_replay_record(stranger))
    mine = ReplayCancelRequest(v=1, replay_id=reg.replay_id, stream_id=stream.stream_id, requester=reg.requester,
                                 block_height=2, nonce=6, digest_hex="01" * 32)
    produce_replay(services.bootstrap, services.prefix, stream.stream_id, encode_replay_record(mine))
    view = wait_status(services.bootstrap, services.prefix, reg.replay_id, {"canceled", "completed"})
    assert view.status == "canceled"
    reader.drain(3.0)
    delivered = reader.count(reg.replay_id)
    assert delivered == view.delivered < COUNT
    seqs = [decode_message(m.value()).sequence for m in reader.by_replay[reg.replay_id]]
    assert seqs == list(range(1, delivered + 1))
    assert all(header_map(m)["icrc77:replay:end_id"] == str(COUNT).encode() for m in reader.by_replay[reg.replay_id])


def test_a_registered_record_its_requester_did_not_sign_is_quarantined_and_never_fulfilled(
        env: tuple[ServiceSet, Stream], reader: DeliveryReader) -> None:
    """The replay topic is not trusted: a ``registered`` record without the requester's signed
    register_replay, or naming another requester than the command's signer, is never fulfilled."""
    services, stream = env
    before = health(services)["quarantined"]
    other = "0x" + "ab" * 32
    forged = register(services.bootstrap, services.prefix, stream, start=1, to=30, requester=other)
    unsigned = msgspec.structs.replace(forged, replay_id=forged.replay_id ^ 1, requester=other, caller=other,
                                       command=None)
    produce_replay(services.bootstrap, services.prefix, stream.stream_id, encode_replay_record(unsigned))
    legit = register(services.bootstrap, services.prefix, stream, start=1, to=20)
    wait_status(services.bootstrap, services.prefix, legit.replay_id, {"completed"})
    # Records of one stream are folded in log order: the two forgeries were judged before the legit one.
    body = wait_health(services, lambda h: h["quarantined"] >= before + 2)
    reasons = [q["reason"] for q in body["last_quarantined"]]
    assert any(f"replay {forged.replay_id} does not match" in r and "requester" in r for r in reasons), reasons
    assert any(f"replay {unsigned.replay_id} carries no signed register_replay" in r for r in reasons), reasons
    reader.until(lambda: reader.count(legit.replay_id) >= 19, what="the legit replay")
    reader.drain(2.0)
    assert reader.count(forged.replay_id) == 0
    assert reader.count(unsigned.replay_id) == 0


def test_hostile_replay_records_are_quarantined_and_the_worker_keeps_serving(
        env: tuple[ServiceSet, Stream], reader: DeliveryReader) -> None:
    services, stream = env
    before = health(services)["quarantined"]
    produce_replay(services.bootstrap, services.prefix, stream.stream_id, b"\x00garbage{")
    produce_replay(services.bootstrap, services.prefix, stream.stream_id,
                   encode_replay_record(ReplayProgress(v=1, replay_id=424242, stream_id=stream.stream_id,
                                                       engine="service", partition=0, next_offset=5, next_sequence=5,
                                                       delivered=4, filtered=0, skipped=0, at_ms=1)))
    victim = register(services.bootstrap, services.prefix, stream, start=1, to=50)
    wait_status(services.bootstrap, services.prefix, victim.replay_id, {"completed"})
    # progress for another stream of a finished replay, and a registration on the wrong partition
    produce_replay(services.bootstrap, services.prefix, stream.stream_id,
                   encode_replay_record(ReplayProgress(v=1, replay_id=victim.replay_id, stream_id="s-other",
                                                       engine="service", partition=0, next_offset=1, next_sequence=2,
                                                       delivered=1, filtered=0, skipped=0, at_ms=1)))
    after = register(services.bootstrap, services.prefix, stream, start=100, to=160)
    view = wait_status(services.bootstrap, services.prefix, after.replay_id, {"completed"})
    assert view.delivered == 60
    reader.until(lambda: reader.count(after.replay_id) >= 60, what="deliveries after the hostile records")
    assert services.procs["replay-r1"].poll() is None
    body = wait_health(services, lambda h: h["quarantined"] >= before + 3)
    reasons = " | ".join(q["reason"] for q in body["last_quarantined"])
    assert "never registered" in reasons
    assert "not a replay record" in reasons
    assert replay_views(services.bootstrap, services.prefix)[victim.replay_id].status == "completed"


def test_a_plan_above_the_spark_threshold_is_handed_off_not_served(env: tuple[ServiceSet, Stream],
                                                                   reader: DeliveryReader) -> None:
    services, stream = env
    services.kill9("replay-r1")
    services.start_replay("r1", {"WATCHTOWER_SPARK_REPLAY_THRESHOLD": "100"})
    big = register(services.bootstrap, services.prefix, stream, start=1, to=1001)
    small = register(services.bootstrap, services.prefix, stream, start=1, to=101)
    assert wait_status(services.bootstrap, services.prefix, small.replay_id, {"completed"}).delivered == 100
    view: ReplayView | None = None

    def handed_off() -> ReplayView | None:
        nonlocal view
        view = replay_views(services.bootstrap, services.prefix)[big.replay_id]
        return view if view.engine == "spark" else None

    view = wait_until(lambda: f"replay {big.replay_id} to be handed to Spark (last: {view})", handed_off,
                      timeout_s=120, every_s=0.5)
    assert view.next_offset == 0
    assert view.delivered == 0
    reader.until(lambda: reader.count(small.replay_id) >= 100, what="the small replay's deliveries")


def test_a_replay_of_a_confidential_feed_re_emits_its_ciphertext_which_a_member_alone_opens(
        env: tuple[ServiceSet, Stream], reader: DeliveryReader) -> None:
    """docs/private-feeds.md: a replay re-emits the stored records as they are, so what anyone
    reading ``deliveries`` gets of a confidential feed is ciphertext and sealed boxes; the member's
    key opens them, the replay service holds no key."""
    services, _ = env
    owner, publisher = nacl.signing.SigningKey.generate(), nacl.signing.SigningKey.generate()
    member = nacl.public.PrivateKey.generate()
    owner_address = address_from_public_key(bytes(owner.verify_key))  # the owner is in every keyload
    stream = Stream(f"s-conf-{uuid.uuid4().hex[:8]}", owner, publisher)
    client = CommandClient(services.bootstrap, prefix=services.prefix)
    try:
        body = {"publisher_key_hex": bytes(publisher.verify_key).hex(), "subscription_policy": "PRIVATE_ALLOWLIST",
                "confidential": True}
        client.call(sign_command(owner, "create_stream", stream.stream_id, 1, body), 120)
        keyload = build_keyload(stream.stream_id, [Recipient(owner_address, 1, bytes(member.public_key))])
        texts = [b"replayed plaintext " + uuid.uuid4().hex.encode() for _ in range(3)]
        payloads: list[tuple[str, bytes, dict[str, Any]]] = [
            (KEYLOAD_KIND, keyload.parts[0], {KEYLOAD_ID_TAG: keyload.keyload_id.hex()})]
        for i, text in enumerate(texts, start=2):
            payloads.append(("note", mask(keyload.session_key, keyload_id=keyload.keyload_id,
                                          stream_id=stream.stream_id, sequence=i, branch="main", kind="note",
                                          content_type="application/octet-stream", plaintext=text),
                             {KEYLOAD_ID_TAG: keyload.keyload_id.hex()}))
        for seq, (kind, payload, tags) in enumerate(payloads, start=1):
            msg = sign_message(stream_id=stream.stream_id, sequence=seq, timestamp_unix_ms=1_700_000_000_000 + seq,
                               kind=kind, payload=payload, tags=tags, signing_key=publisher,
                               content_type="application/cbor" if kind == KEYLOAD_KIND else "application/octet-stream")
            assert client.call(sign_command(owner, "publish", stream.stream_id, seq + 1, msg.to_json_dict()),
                               120)["sequence"] == seq
    finally:
        client.close()
    stream.head = len(payloads)
    reg = register(services.bootstrap, services.prefix, stream, start=1)
    wait_status(services.bootstrap, services.prefix, reg.replay_id, {"completed"}, timeout_s=300)
    reader.until(lambda: reader.count(reg.replay_id) >= len(payloads), what="the confidential replay")
    delivered = [decode_message(m.value()) for m in reader.by_replay[reg.replay_id]]
    assert [m.sequence for m in delivered] == [1, 2, 3, 4]
    raw = b"".join(m.value() for m in reader.by_replay[reg.replay_id])
    assert keyload.session_key not in raw
    assert not any(text in raw for text in texts)
    member_reader = ConfidentialReader(owner_address, bytes(member))
    assert [member_reader.read(m).plaintext for m in delivered] == [None, *texts]
