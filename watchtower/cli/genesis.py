"""The local deployment's genesis secrets: created once, under ``$WATCHTOWER_HOME/genesis/``.

- ``minter.key``: the account that alone may mint CBY (an account key file, as ``accounts/*.key``);
- ``treasury.key``: the protocol treasury account (fees accrue to it);
- ``kek.key``: the key manager's key-encryption key, 32 random bytes as 64 hex digits;
- ``registrar.key``: the account that alone admits ingestion runners (`watchtower runner admit`);
- ``ingest-kek.key``: the ingestion service's own KEK, which wraps its publisher key (`ingest.keys`).

The directory is 0700 and every file 0600; nothing is ever overwritten, so a second
`ensure_genesis` returns the same deployment. The key manager's receipt public key is derived
from the KEK (`watchtower.keymgr.kek`), which is how `watchtower up` hands it to the workers as
``WATCHTOWER_KEYMGR_PUBLIC_KEY`` without asking the key manager first.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Final

import nacl.signing

from watchtower.client.account import read_key_file, write_key_file
from watchtower.keymgr.kek import read_kek_file
from watchtower.protocol.addresses import address_from_public_key

GENESIS_DIR: Final = "genesis"
_DIR_MODE: Final = 0o700
_FILE_MODE: Final = 0o600

ENV_PROTOCOL_TREASURY: Final = "WATCHTOWER_PROTOCOL_TREASURY"
ENV_CBY_MINTER: Final = "WATCHTOWER_CBY_MINTER"
ENV_KEYMGR_PUBLIC_KEY: Final = "WATCHTOWER_KEYMGR_PUBLIC_KEY"
ENV_RUNNER_REGISTRAR: Final = "WATCHTOWER_RUNNER_REGISTRAR"


@dataclasses.dataclass(frozen=True)
class Genesis:
    minter_address: str
    protocol_treasury: str
    kek_path: Path
    minter_key_path: Path
    keymgr_public_key: bytes
    registrar_address: str
    registrar_key_path: Path
    ingest_kek_path: Path

    def worker_env(self) -> dict[str, str]:
        """What every stream worker needs to know of genesis (no secret among it)."""
        return {
            ENV_PROTOCOL_TREASURY: self.protocol_treasury,
            ENV_CBY_MINTER: self.minter_address,
            ENV_KEYMGR_PUBLIC_KEY: self.keymgr_public_key.hex(),
            ENV_RUNNER_REGISTRAR: self.registrar_address,
        }


def _account(path: Path) -> str:
    if not path.exists():
        write_key_file(path, nacl.signing.SigningKey.generate())
    return address_from_public_key(bytes(read_key_file(path).verify_key))


def _kek(path: Path) -> None:
    if path.exists():
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
    try:
        os.fchmod(fd, _FILE_MODE)  # the umask must not loosen it
        os.write(fd, (os.urandom(32).hex() + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_genesis(home: Path) -> Genesis:
    """The deployment's genesis under `home`, created on first call (module docstring)."""
    directory = home / GENESIS_DIR
    directory.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    os.chmod(directory, _DIR_MODE)
    minter_key = directory / "minter.key"
    kek_path = directory / "kek.key"
    minter = _account(minter_key)
    treasury = _account(directory / "treasury.key")
    registrar_key = directory / "registrar.key"
    registrar = _account(registrar_key)  # a genesis made before runners had a registrar gets one now
    _kek(kek_path)
    ingest_kek = directory / "ingest-kek.key"
    _kek(ingest_kek)
    kek = read_kek_file(kek_path)  # refuses a KEK file someone loosened
    return Genesis(minter, treasury, kek_path, minter_key, kek.receipt_public_key(), registrar, registrar_key,
                   ingest_kek)
