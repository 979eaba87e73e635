"""keymgr.state has one writer: a newer key-manager instance fences the older one, and sees all it committed."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Producer
from kafka_fixture import grant

from watchtower.keymgr.kek import Kek
from watchtower.keymgr.vault import SeedSealedError, Vault, VaultFencedError
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue, topic_name
from watchtower.topics.connection import kafka_config

pytestmark = pytest.mark.integration

KEK = Kek(b"\x51" * 32)


@pytest.fixture
def prefix(kafka_bootstrap: str) -> str:
    p = f"t{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, catalogue(p, partitions=1))
    grant(kafka_bootstrap, p)
    return p


def test_a_newer_instance_fences_the_older_and_continues_above_its_nonces(kafka_bootstrap: str, prefix: str) -> None:
    old = Vault(kafka_bootstrap, prefix, KEK, nonce_block=10)
    old.open()
    seed = old.seed_for("s1")
    issued = [old.next_actor_nonce() for _ in range(15)]  # crosses one reservation
    new = Vault(kafka_bootstrap, prefix, KEK, nonce_block=10)
    new.open()
    assert new.existing_seed("s1") == seed
    assert new.next_actor_nonce() > max(issued)
    # The old instance can no longer write: no new seed, no new reservation.
    with pytest.raises(VaultFencedError) as err:
        old.seed_for("s2")
    assert err.value.code == "NOT_READY"
    # It may finish the block it had reserved (the new one starts above it), but never reserve more.
    fenced = False
    for _ in range(20):
        try:
            assert old.next_actor_nonce() <= max(issued) + 5
        except VaultFencedError:
            fenced = True
            break
    assert fenced
    assert new.seed_for("s2") != seed
    new.close()


def test_a_different_kek_starts_but_refuses_the_seeds_it_cannot_open_and_never_replaces_them(
        kafka_bootstrap: str, prefix: str) -> None:
    first = Vault(kafka_bootstrap, prefix, KEK)
    first.open()
    seed = first.seed_for("s1")
    first.close()
    other = Kek(b"\x52" * 32)
    wrong = Vault(kafka_bootstrap, prefix, other)
    wrong.open()  # a log never makes the key manager unstartable
    assert wrong.sealed_streams == {"s1": KEK.kek_id}
    for call in (wrong.seed_for, wrong.existing_seed):
        with pytest.raises(SeedSealedError, match=f"wrapped under KEK {KEK.kek_id}") as refused:
            call("s1")
        assert refused.value.code == "NOT_READY"
    assert len(wrong.seed_for("s2")) == 32  # other streams are served
    wrong.close()
    again = Vault(kafka_bootstrap, prefix, KEK)
    again.open()
    assert again.existing_seed("s1") == seed  # the sealed seed was not replaced
    again.close()


def test_a_forged_seed_record_neither_stops_the_start_nor_replaces_the_genuine_seed(
        kafka_bootstrap: str, prefix: str) -> None:
    vault = Vault(kafka_bootstrap, prefix, KEK)
    vault.open()
    seed = vault.seed_for("s1")
    vault.close()
    forged = {"v": 1, "kek_id": KEK.kek_id, "wrapped_hex": "00" * 60}
    producer = Producer(kafka_config(kafka_bootstrap))
    for key, value in ((b"seed/s1", json.dumps(forged).encode()), (b"seed/s9", json.dumps(forged).encode()),
                       (b"seed/s2", b"\xff not json")):
        producer.produce(topic_name("keymgr-state", prefix), key=key, value=value, partition=0)
    producer.flush(10)
    reopened = Vault(kafka_bootstrap, prefix, KEK)
    reopened.open()
    assert reopened.existing_seed("s1") == seed  # the newest record does not open; the genuine one does
    assert reopened.sealed_streams == {"s9": KEK.kek_id}
    assert reopened.existing_seed("s2") is None
    reopened.close()


def test_rewrap_moves_every_seed_to_the_new_kek(kafka_bootstrap: str, prefix: str) -> None:
    new_kek = Kek(b"\x53" * 32)
    vault = Vault(kafka_bootstrap, prefix, KEK)
    vault.open()
    seeds = {sid: vault.seed_for(sid) for sid in ("a", "b", "c")}
    assert vault.rewrap(new_kek) == 3
    vault.close()
    rotated = Vault(kafka_bootstrap, prefix, new_kek)
    rotated.open()
    assert {sid: rotated.existing_seed(sid) for sid in seeds} == seeds
    rotated.close()
    stranger = Vault(kafka_bootstrap, prefix, Kek(b"\x54" * 32))
    stranger.open()
    # The newest record of each stream names the new KEK (older ones go with compaction).
    assert stranger.sealed_streams == dict.fromkeys(seeds, new_kek.kek_id)
    stranger.close()
