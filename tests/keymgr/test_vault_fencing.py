"""keymgr.state has one writer: a newer key-manager instance fences the older one, and sees all it committed."""

from __future__ import annotations

import uuid

import pytest
from kafka_fixture import grant

from watchtower.keymgr.kek import Kek, KekError
from watchtower.keymgr.vault import Vault, VaultFencedError
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue

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


def test_a_different_kek_cannot_open_the_stored_seeds(kafka_bootstrap: str, prefix: str) -> None:
    first = Vault(kafka_bootstrap, prefix, KEK)
    first.open()
    first.seed_for("s1")
    first.close()
    with pytest.raises(KekError, match="does not open under KEK"):
        Vault(kafka_bootstrap, prefix, Kek(b"\x52" * 32)).open()


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
    with pytest.raises(KekError):
        Vault(kafka_bootstrap, prefix, KEK).open()
