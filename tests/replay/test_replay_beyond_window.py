"""10,000 messages (100,000 in the soak tier) on a stream whose ring window holds 100: replays read
the archive, beyond the window, exactly, and survive ``kill -9`` of the replay worker mid-replay
without a gap.

One publish (through the real stack) is shared by both tests. The ring window is 1% of the archive
at either scale, so both read almost everything from beyond it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from replay_helpers import DeliveryReader, Stream, create_and_publish, register, replay_views, wait_status
from stack_fixture import start_stack
from tiers import scale

from watchtower.client.http import ApiClient
from watchtower.gateway.transport import CommandClient
from watchtower.local.stack import ServiceSet
from watchtower.protocol.replay.rules import read_replay_headers
from watchtower.protocol.signing import verify_with_schedule
from watchtower.schemas.records import decode_message

pytestmark = [pytest.mark.integration, pytest.mark.soak]

COUNT = scale(10_000, 100_000)
WINDOW = 100
# The replay worker's cap in the kill test: the replay lasts 10-20 s, so both kills land while it
# runs (the cap is not what is tested).
KILL_RATE = scale(1_000, 5_000)


@pytest.fixture(scope="module")
def env(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceSet, Stream]]:
    with start_stack(kafka_bootstrap, tmp_path_factory.mktemp("replay-archive-logs"), replay=True) as services:
        client = CommandClient(services.bootstrap, prefix=services.prefix)
        try:
            yield services, create_and_publish(client, COUNT, capacity=WINDOW)
        finally:
            client.close()


def test_replay_beyond_the_window_delivers_exactly_the_archive(env: tuple[ServiceSet, Stream]) -> None:
    services, stream = env
    api = ApiClient(services.api_url)
    reg = register(services.bootstrap, services.prefix, stream, start=1, to=None)
    assert reg.end_exclusive == COUNT + 1
    view = wait_status(services.bootstrap, services.prefix, reg.replay_id, {"completed", "errored"})
    assert view.status == "completed", view.error
    assert view.delivered == COUNT
    reader = DeliveryReader(services.bootstrap, services.prefix)
    try:
        reader.until(lambda: reader.count(reg.replay_id) >= COUNT, what=f"{COUNT} deliveries")
        reader.drain(2.0)
        records = reader.by_replay[reg.replay_id]
    finally:
        reader.close()
    assert len(records) == COUNT  # no extra
    schedule = api.key_schedule(stream.stream_id)
    seqs = []
    for m in records:
        assert m.key() == reg.requester.encode()
        msg = decode_message(m.value())
        assert msg.stream_id == stream.stream_id
        assert verify_with_schedule(msg, schedule)
        marker = read_replay_headers(m.headers())
        assert marker is not None
        assert (marker.replay_id, marker.end_id) == (reg.replay_id, COUNT)
        seqs.append(msg.sequence)
    assert seqs == list(range(1, COUNT + 1))  # ascending, every sequence once


def test_kill_9_twice_mid_replay_loses_nothing(env: tuple[ServiceSet, Stream]) -> None:
    services, stream = env
    # Capped, so the two kills land while the replay runs (the cap is not what is tested).
    services.kill9("replay-r1")
    slow = {"WATCHTOWER_REPLAY_RATE": str(KILL_RATE)}
    services.start_replay("r1", slow)
    reg = register(services.bootstrap, services.prefix, stream, start=1, to=COUNT + 1)
    reader = DeliveryReader(services.bootstrap, services.prefix)
    dups_before_kill: list[int] = []
    try:
        for fraction in (0.3, 0.7):
            reader.until(lambda f=fraction: reader.count(reg.replay_id) >= f * COUNT, what=f"{fraction:.0%}")
            dups_before_kill.append(_duplicates(reader, reg.replay_id))
            services.kill9("replay-r1")
            # The kill landed mid-replay (not after the last checkpoint).
            assert replay_views(services.bootstrap, services.prefix)[reg.replay_id].status == "running"
            services.start_replay("r1", slow)
        view = wait_status(services.bootstrap, services.prefix, reg.replay_id, {"completed", "errored"})
        assert view.status == "completed", view.error
        reader.until(lambda: len(_sequences(reader, reg.replay_id)) >= COUNT, what="every sequence")
        reader.drain(2.0)
        seqs = _sequences(reader, reg.replay_id)
        total = _duplicates(reader, reg.replay_id)
    finally:
        reader.close()
    print(f"\nduplicates: before the first kill {dups_before_kill[0]}, from crash 1 "
          f"{dups_before_kill[1] - dups_before_kill[0]}, from crash 2 {total - dups_before_kill[1]} "
          f"(read_committed deliveries: {reader.count(reg.replay_id)})")
    assert set(seqs) == set(range(1, COUNT + 1))
    assert view.delivered == COUNT


def _sequences(reader: DeliveryReader, replay_id: int) -> Counter[int]:
    return Counter(decode_message(m.value()).sequence for m in reader.by_replay.get(replay_id, []))


def _duplicates(reader: DeliveryReader, replay_id: int) -> int:
    return sum(c - 1 for c in _sequences(reader, replay_id).values())
