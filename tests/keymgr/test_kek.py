"""The KEK: read only from an owner-only file or the environment, and it wraps seeds bound to their stream."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from watchtower.keymgr.kek import ENV_KEK, ENV_KEK_FILE, Kek, KekError, load_kek, new_kek_text, read_kek_file


def _kek_file(tmp_path: Path, mode: int) -> Path:
    path = tmp_path / "kek.key"
    path.write_text(new_kek_text())
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606])
def test_a_group_or_world_readable_kek_file_is_refused(tmp_path: Path, mode: int) -> None:
    path = _kek_file(tmp_path, mode)
    with pytest.raises(KekError, match=f"{mode:04o}.*chmod 600"):
        load_kek({ENV_KEK_FILE: str(path)})


def test_an_owner_only_kek_file_is_read(tmp_path: Path) -> None:
    path = _kek_file(tmp_path, 0o600)
    kek = read_kek_file(path)
    assert kek.kek_id == Kek(bytes.fromhex(path.read_text())).kek_id
    # The file wins over the environment variable.
    assert load_kek({ENV_KEK_FILE: str(path), ENV_KEK: "11" * 32}).kek_id == kek.kek_id


def test_the_kek_may_come_from_the_environment_as_hex() -> None:
    assert load_kek({ENV_KEK: "ab" * 32}).kek_id == Kek(b"\xab" * 32).kek_id


@pytest.mark.parametrize("value", ["ab" * 31, "zz" * 32, ""])
def test_a_kek_that_is_not_32_bytes_of_hex_is_refused(value: str) -> None:
    with pytest.raises(KekError):
        load_kek({ENV_KEK: value} if value else {})


def test_no_repr_or_error_shows_the_kek() -> None:
    key = bytes(range(32))
    kek = Kek(key)
    for text in (repr(kek), str(kek), f"{kek}"):
        assert key.hex() not in text
        assert kek.kek_id in text
    with pytest.raises(KekError) as err:
        kek.unwrap("master_seed", "s", b"\x00" * 40)
    assert key.hex() not in str(err.value)


def test_a_wrapped_seed_opens_only_for_its_stream_and_kek() -> None:
    kek, other = Kek(b"\x01" * 32), Kek(b"\x02" * 32)
    seed = os.urandom(32)
    wrapped = kek.wrap("master_seed", "prices", seed)
    assert seed not in wrapped
    assert kek.unwrap("master_seed", "prices", wrapped) == seed
    with pytest.raises(KekError, match="another KEK or altered"):
        kek.unwrap("master_seed", "prices.other", wrapped)
    with pytest.raises(KekError):
        other.unwrap("master_seed", "prices", wrapped)
    with pytest.raises(KekError):
        kek.unwrap("master_seed", "prices", wrapped[:-1] + bytes([wrapped[-1] ^ 1]))


def test_the_receipt_key_is_derived_from_the_kek() -> None:
    assert Kek(b"\x01" * 32).receipt_public_key() == Kek(b"\x01" * 32).receipt_public_key()
    assert Kek(b"\x01" * 32).receipt_public_key() != Kek(b"\x02" * 32).receipt_public_key()


def test_the_service_refuses_to_start_with_a_world_readable_kek_file(tmp_path: Path) -> None:
    path = _kek_file(tmp_path, 0o644)
    env = {**os.environ, ENV_KEK_FILE: str(path)}
    env.pop(ENV_KEK, None)
    # The KEK is checked before anything connects, so no broker is needed to see the refusal.
    result = subprocess.run([sys.executable, "-m", "watchtower.keymgr.main", "127.0.0.1:1", "1"], env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "0644" in result.stderr
    assert "chmod 600" in result.stderr
    assert path.read_text().strip() not in result.stderr + result.stdout
