"""The ingestion publisher key at rest: wrapped under the ingestion KEK, as the key manager stores
seeds, never in clear once a KEK is configured; its public half readable without the KEK."""

from __future__ import annotations

import os
from pathlib import Path

import nacl.signing
import pytest

from watchtower.client.account import KeyFileError, write_key_file
from watchtower.ingest import keys
from watchtower.keymgr.kek import Kek, new_kek_text
from watchtower.protocol.addresses import address_from_public_key


def kek_file(path: Path, mode: int = 0o600) -> Path:
    path.write_text(new_kek_text())
    path.chmod(mode)
    return path


def test_with_a_kek_the_key_is_stored_wrapped_and_opens_again(tmp_path: Path) -> None:
    kek = Kek(os.urandom(32))
    key = keys.ingestion_publisher_key(tmp_path, kek)
    directory = tmp_path / "ingest"
    assert not (directory / "publisher.key").exists()
    stored = (directory / "publisher.key.wrapped").read_text()
    assert bytes(key).hex() not in stored  # the seed is not in the file
    assert (directory / "publisher.key.wrapped").stat().st_mode & 0o077 == 0
    assert bytes(keys.ingestion_publisher_key(tmp_path, kek)) == bytes(key)
    assert keys.ingestion_publisher_public_key(tmp_path) == bytes(key.verify_key)


def test_a_plain_key_from_before_is_wrapped_and_removed(tmp_path: Path) -> None:
    old = nacl.signing.SigningKey.generate()
    write_key_file(tmp_path / "ingest" / "publisher.key", old)
    kek = Kek(os.urandom(32))
    assert bytes(keys.ingestion_publisher_key(tmp_path, kek)) == bytes(old)  # the same delegation
    assert not (tmp_path / "ingest" / "publisher.key").exists()


def test_another_kek_or_none_cannot_open_it_and_says_what_to_set(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    key = keys.ingestion_publisher_key(tmp_path, Kek(os.urandom(32)))
    with pytest.raises(KeyFileError) as wrong:
        keys.ingestion_publisher_key(tmp_path, Kek(os.urandom(32)))
    assert bytes(key).hex() not in str(wrong.value)
    monkeypatch.delenv(keys.ENV_INGEST_KEK_FILE, raising=False)
    with pytest.raises(KeyFileError, match=keys.ENV_INGEST_KEK_FILE):
        keys.ingestion_publisher_key(tmp_path)
    # Naming the key needs no KEK: the public half is beside it.
    assert keys.ingestion_publisher_public_key(tmp_path) == bytes(key.verify_key)


def test_the_kek_comes_from_its_own_file_and_a_loose_file_is_refused(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(keys.ENV_INGEST_KEK_FILE, str(kek_file(tmp_path / "ingest-kek.key")))
    key = keys.ingestion_publisher_key(tmp_path / "home")
    assert (tmp_path / "home" / "ingest" / "publisher.key.wrapped").exists()
    assert bytes(keys.ingestion_publisher_key(tmp_path / "home")) == bytes(key)
    monkeypatch.setenv(keys.ENV_INGEST_KEK_FILE, str(kek_file(tmp_path / "loose.key", 0o644)))
    with pytest.raises(KeyFileError, match="chmod 600"):
        keys.ingestion_publisher_key(tmp_path / "other")


def test_without_a_kek_it_stays_a_plain_key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(keys.ENV_INGEST_KEK_FILE, raising=False)
    key = keys.ingestion_publisher_key(tmp_path)
    assert (tmp_path / "ingest" / "publisher.key").read_text().strip() == bytes(key).hex()


def test_a_runner_learns_the_scheduler_from_its_public_key_alone(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner checks the scheduler's signatures and never signs a task: it is given the public
    key (or the address) and works with the private key out of its reach."""
    from watchtower.ingest.keys import ENV_SCHEDULER, scheduler_address, scheduler_key

    monkeypatch.delenv(ENV_SCHEDULER, raising=False)
    with pytest.raises(KeyFileError, match="start the ingestion service first"):
        scheduler_address(tmp_path, wait_s=0)
    key = scheduler_key(tmp_path)
    (tmp_path / "ingest" / "scheduler.key").unlink()  # what a runner's machine holds: the .pub only
    expected = address_from_public_key(bytes(key.verify_key))
    assert scheduler_address(tmp_path, wait_s=0) == expected
    other = address_from_public_key(bytes(nacl.signing.SigningKey.generate().verify_key))
    monkeypatch.setenv(ENV_SCHEDULER, other)
    assert scheduler_address(tmp_path, wait_s=0) == other, "the environment names the scheduler first"
