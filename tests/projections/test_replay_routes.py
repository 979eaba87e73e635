"""The replay reads on a real stack of two projection workers, folded from records on ``replay``.

The records are written here with the real codec straight to the ``replay`` topic (each on its
stream's partition, as the writers put them), together with hostile ones: garbage bytes, a record
on the wrong partition, progress for a replay never registered, a cancel from a stranger (ignored,
not an error) and a ``canceled`` nobody asked for. The two workers split the partitions, so every
read gathers both workers' shares. Then: lookups (and 404), paging and filters, the ICRC-77 status
shapes, the quarantine, and the live digest against the offline rebuild.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import nacl.signing
import pytest
from api_calls import Caller, http, wait_for
from confluent_kafka import Producer
from stack_fixture import start_stack

from watchtower.local.stack import ServiceSet
from watchtower.projections.rebuild import rebuild_digest, rebuild_replay_digest
from watchtower.protocol.replay.records import (
    ReplayCanceled,
    ReplayCancelRequest,
    ReplayCompleted,
    ReplayErrored,
    ReplayProgress,
    ReplayRecord,
    ReplayRegistration,
)
from watchtower.protocol.signing import sign_message
from watchtower.schemas.replay_records import encode_replay_record
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key

pytestmark = pytest.mark.integration

PARTITIONS = 4
ALICE, BOB, MALLORY = "0x" + "a1" * 32, "0x" + "b2" * 32, "0x" + "cc" * 32


def _on_partition(partition: int, tag: str) -> str:
    """A fresh stream id whose partition is `partition`."""
    while True:
        sid = f"rp-{tag}-{uuid.uuid4().hex[:6]}"
        if partition_for_key(sid.encode(), PARTITIONS) == partition:
            return sid


STREAMS = [_on_partition(i % PARTITIONS, str(i)) for i in range(6)]  # every partition: both workers hold some


def registered(rid: int, sid: str, requester: str, *, to: int | None = 11,
               filt: str | None = None) -> ReplayRegistration:
    end = 11 if to is None else to
    return ReplayRegistration(v=1, replay_id=rid, stream_id=sid, namespace=sid, requester=requester, from_sequence=1,
                            to_sequence=to, first=1, end_exclusive=end, end_id=None if to is not None else end - 1,
                            filter=filt, skip=None, memo_hex="", price_cby=0, block_height=5, caller=requester,
                            nonce=rid, digest_hex="00" * 32)


def progress(rid: int, sid: str, next_sequence: int, delivered: int) -> ReplayProgress:
    return ReplayProgress(v=1, replay_id=rid, stream_id=sid, engine="service", partition=0, next_offset=next_sequence,
                          next_sequence=next_sequence, delivered=delivered, filtered=0, skipped=0, at_ms=1)


def cancel(rid: int, sid: str, who: str) -> ReplayCancelRequest:
    return ReplayCancelRequest(v=1, replay_id=rid, stream_id=sid, requester=who, block_height=6, nonce=rid + 100,
                                 digest_hex="11" * 32)


def genuine() -> list[ReplayRecord]:
    """Ten replays of six streams: 1-4 Alice's, 5-10 Bob's, in every life-cycle state."""
    s = STREAMS
    return [
        registered(1, s[0], ALICE), progress(1, s[0], 6, 5), ReplayCompleted(
            v=1, replay_id=1, stream_id=s[0], engine="service", delivered=10, filtered=0, skipped=0, at_ms=2),
        registered(2, s[1], ALICE, to=None, filt='{"field":"kind","op":"eq","value":"t"}'), progress(2, s[1], 4, 3),
        registered(3, s[2], ALICE), cancel(3, s[2], MALLORY), cancel(3, s[2], ALICE),
        ReplayCanceled(v=1, replay_id=3, stream_id=s[2], delivered=0, at_ms=3),
        registered(4, s[3], ALICE),
        *(registered(rid, s[rid % 6], BOB) for rid in range(5, 11)),
        ReplayErrored(v=1, replay_id=5, stream_id=s[5], reason="sequence 3 is missing from the archive",
                      delivered=2, at_ms=4),
    ]


def hostile() -> list[tuple[str, bytes, int | None]]:
    """(key, value, partition or None for the key's own): what the fold must quarantine."""
    s = STREAMS
    wrong = (partition_for_key(s[4].encode(), PARTITIONS) + 1) % PARTITIONS
    return [
        (s[0], b"\x00 not a replay record", None),
        (s[4], encode_replay_record(registered(99, s[4], BOB)), wrong),  # on another stream's partition
        (s[4], encode_replay_record(progress(77, s[4], 2, 1)), None),  # never registered
        (s[3], encode_replay_record(ReplayCanceled(v=1, replay_id=4, stream_id=s[3], delivered=0, at_ms=9)), None),
        (s[0], encode_replay_record(progress(1, s[0], 8, 7)), None),  # after its completion
    ]


def write(bootstrap: str, prefix: str, records: list[tuple[str, bytes, int | None]]) -> None:
    producer = Producer(kafka_config(bootstrap, **{"enable.idempotence": True, "log_level": 3}))
    for key, value, partition in records:
        producer.produce(topic_name("replay", prefix), key=key.encode(), value=value,
                         partition=partition_for_key(key.encode(), PARTITIONS) if partition is None else partition)
    assert producer.flush(60) == 0


@pytest.fixture(scope="module")
def replays(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceSet]:
    # No replay worker: the records here are the whole story (a worker would fulfil them).
    with start_stack(kafka_bootstrap, tmp_path_factory.mktemp("replay-reads"), partitions=PARTITIONS,
                     projections=2, replay=False) as services:
        wait_for(lambda: all(_serves_share(u) for u in _urls(services)), timeout_s=120,
                 what="both projection workers to serve a share of the partitions")
        write(services.bootstrap, services.prefix,
              [(r.stream_id, encode_replay_record(r), None) for r in genuine()] + hostile())
        wait_for(lambda: _json(f"{services.api_url}/v1/replays/digest", "replays") == 10, what="ten replays")
        yield services


def _urls(stack: ServiceSet) -> list[str]:
    return [url for name, url in stack.urls.items() if name.startswith("projection-")]


def _serves_share(url: str) -> bool:
    status, body = http("GET", f"{url}/v1/health")
    return status == 200 and bool(body["ready"]) and bool(body["partitions"])


def _json(url: str, field: str | None = None) -> Any:
    status, body = http("GET", url)
    if status != 200:
        return None
    return body if field is None else body[field]


def test_each_replay_is_found_by_id_on_every_worker_with_its_icrc77_status(replays: ServiceSet) -> None:
    for url in _urls(replays):  # each worker holds some replays and asks the other for the rest
        completed = _json(f"{url}/v1/replays/1")
        assert completed["status"] == {"completed": 10}
        assert completed["stats"] == {"delivered": 10, "filtered": 0, "skipped": 0, "next_sequence": 11, "total": 10,
                                      "engine": "service"}
        assert (completed["replayId"], completed["range"], completed["percent"]) == ("1", [1, 11], 100.0)
        running = _json(f"{url}/v1/replays/2")
        assert running["status"] == {"running": None}
        assert (running["range"], running["end_id"], running["percent"]) == ([1, None], 10, 30.0)
        assert running["config"]["filter"] == {"field": "kind", "op": "eq", "value": "t"}
        assert _json(f"{url}/v1/replays/3")["status"] == {"canceled": 0}
        assert _json(f"{url}/v1/replays/4")["status"] == {"pending": None}
        assert _json(f"{url}/v1/replays/5")["status"] == {"errored": "sequence 3 is missing from the archive"}


def test_an_unknown_replay_is_replay_not_found_and_a_bad_id_is_invalid(replays: ServiceSet) -> None:
    for url in _urls(replays):
        status, err = http("GET", f"{url}/v1/replays/424242")
        assert (status, err["error"]["code"]) == (404, "REPLAY_NOT_FOUND")
        assert "watchtower replay list" in err["error"]["message"]
    status, err = http("GET", f"{replays.api_url}/v1/replays/x1")
    assert (status, err["error"]["code"]) == (400, "INVALID_ARGUMENT")


def test_the_list_pages_by_id_and_filters_by_requester_stream_and_status(replays: ServiceSet) -> None:
    api = replays.api_url
    first = _json(f"{api}/v1/replays?take=4")
    assert [r["replayId"] for r in first["replays"]] == ["1", "2", "3", "4"]  # replay ids: decimal strings
    assert first["next"] == "4"
    rest = _json(f"{api}/v1/replays?take=500&prev=4")
    assert [int(r["replayId"]) for r in rest["replays"]] == [5, 6, 7, 8, 9, 10]
    assert rest["next"] is None
    assert [int(r["replayId"]) for r in _json(f"{api}/v1/replays?requester={ALICE}")["replays"]] == [1, 2, 3, 4]
    assert [int(r["replayId"]) for r in _json(f"{api}/v1/replays?requester={BOB}&status=pending")["replays"]] == [
        6, 7, 8, 9, 10]
    assert [int(r["replayId"]) for r in _json(f"{api}/v1/replays?stream_id={STREAMS[0]}")["replays"]] == [1, 6]
    assert _json(f"{api}/v1/replays?requester={MALLORY}") == {"replays": [], "next": None}
    status, err = http("GET", f"{api}/v1/replays?take=501")
    assert (status, err["error"]["code"]) == (400, "LIMIT_EXCEEDED")
    status, err = http("GET", f"{api}/v1/replays?status=done")
    assert (status, err["error"]["code"]) == (400, "INVALID_ARGUMENT")


def test_hostile_records_are_quarantined_with_their_reason_and_change_nothing(replays: ServiceSet) -> None:
    reasons = []
    for url in _urls(replays):
        quarantined = _json(f"{url}/v1/health")["quarantined"]
        reasons += [r["reason"] for r in quarantined["recent"] if r["topic"].endswith(".replay")]
    assert len(reasons) == len(hostile()), reasons
    assert any("undecodable replay record" in r for r in reasons)
    assert any("belongs to partition" in r for r in reasons)
    assert any("never registered" in r for r in reasons)
    assert any("never asked to cancel" in r for r in reasons)
    assert any("already completed" in r for r in reasons)
    assert _json(f"{replays.api_url}/v1/replays/4")["status"] == {"pending": None}  # the forged cancel did nothing
    status, _ = http("GET", f"{replays.api_url}/v1/replays/99")
    assert status == 404


def test_the_live_replay_digest_equals_the_offline_rebuild_on_every_worker(replays: ServiceSet) -> None:
    offline = rebuild_replay_digest(replays.bootstrap, replays.prefix)
    assert offline["replays"] == 10
    assert offline["quarantined"]["count"] == len(hostile())
    for url in _urls(replays):
        assert _json(f"{url}/v1/replays/digest") == {"digest": offline["digest"], "replays": 10}
    # The replay refusals are part of the projection's quarantine, in the live and the rebuilt view alike.
    assert rebuild_digest(replays.bootstrap, replays.prefix)["quarantined"] == offline["quarantined"]


def test_cursor_too_old_over_http_carries_the_ready_replay_request_of_the_gap(replays: ServiceSet) -> None:
    owner, publisher = Caller(replays.api_url), nacl.signing.SigningKey.generate()
    sid = f"ring-{uuid.uuid4().hex[:8]}"
    owner.ok("create_stream", sid, {"publisher_key_hex": bytes(publisher.verify_key).hex(), "ring_buffer_capacity": 3})
    for seq in range(1, 7):
        msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=seq, kind="t", payload=b"{}",
                           signing_key=publisher)
        owner.ok("publish", sid, msg.to_json_dict())
    wait_for(lambda: _json(f"{replays.api_url}/v1/streams/{sid}/head", "head_sequence") == 6, what="head 6")
    status, err = http("GET", f"{replays.api_url}/v1/streams/{sid}/messages?cursor=1")
    assert (status, err["error"]["code"]) == (410, "CURSOR_TOO_OLD")
    assert err["error"]["details"]["replay"] == {
        "method": "register_replay", "stream_id": sid,
        "body": {"namespace": sid, "from": 2, "to": 4,
                 "config": {"filter": None, "skip": None, "max_payment_cby": 0}, "memo_hex": ""},
        "price_cby": 0, "per_event_cby": 0}
