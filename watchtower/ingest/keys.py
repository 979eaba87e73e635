"""Ingestion's ed25519 identities, as key files under the Watchtower home (0600 in a 0700 dir):

- ``ingest/scheduler.key`` signs tasks (runners and the aggregator trust only its address);
- the key owners delegate publishing to (`ingestion_publisher_key`): with an ingestion KEK
  configured (``WATCHTOWER_INGEST_KEK_FILE``, a 0600 file of 64 hex digits; `watchtower up` gives
  the ingestion service ``genesis/ingest-kek.key``) it is stored *wrapped*, as the key manager
  stores seeds (`watchtower.home.kek`): ``ingest/publisher.key.wrapped`` holds AES-256-GCM under
  that KEK, bound to its purpose and the KEK id, and a plain ``ingest/publisher.key`` left from
  before is wrapped and removed. The ingestion KEK is its own, never the key manager's: the
  ingestion service holds no key that opens a stream's seed. The public half is in
  ``ingest/publisher.pub`` for whoever only names it (`new feed --ingest-url`). Without an
  ingestion KEK it is a plain key file;
- ``runners/<name>.key`` is a runner's identity.

Each is created on first use. Key material is never printed or logged; only addresses are.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Final

import nacl.signing

from watchtower.home.kek import Kek, KekError, read_kek_file
from watchtower.home.paths import watchtower_home
from watchtower.home.seeds import (
    AccountExistsError,
    AccountNotFoundError,
    KeyFileError,
    read_key_file,
    require_name,
    write_key_file,
)
from watchtower.protocol.addresses import address_from_public_key, require_address


def _load_or_create(path: Path) -> nacl.signing.SigningKey:
    # Several processes may start at once: exactly one creates the file (O_EXCL), the others read
    # it, waiting out the moment between its creation and its content.
    for _ in range(50):
        try:
            return read_key_file(path)
        except AccountNotFoundError:
            key = nacl.signing.SigningKey.generate()
            try:
                write_key_file(path, key)
            except AccountExistsError:
                continue
            return key
        except KeyFileError:
            time.sleep(0.1)
    return read_key_file(path)


def scheduler_key(home: Path | None = None) -> nacl.signing.SigningKey:
    """The scheduler's signing key (the ingestion service's alone); its public half is written
    beside it as ``scheduler.pub`` for the runners, which never read the private key."""
    directory = (home or watchtower_home()) / "ingest"
    key = _load_or_create(directory / "scheduler.key")
    _write_public(directory / "scheduler.pub", key)
    return key


ENV_SCHEDULER: Final = "WATCHTOWER_INGEST_SCHEDULER"


def scheduler_address(home: Path | None = None, *, wait_s: float = 120.0) -> str:
    """The address of the deployment's scheduler, whose tasks a runner runs: ``$WATCHTOWER_INGEST_SCHEDULER``
    (an address), else ``ingest/scheduler.pub`` (waiting up to `wait_s` for the ingestion service
    to write it). A runner needs nothing more: it checks the scheduler's signatures, it never signs
    a task, so it is never handed the scheduler's private key."""
    named = os.environ.get(ENV_SCHEDULER, "").strip()
    if named:
        return require_address(named, ENV_SCHEDULER)
    path = (home or watchtower_home()) / "ingest" / "scheduler.pub"
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return address_from_public_key(bytes.fromhex(path.read_text(encoding="ascii").strip()))
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                raise KeyFileError(f"no scheduler public key at {path}: start the ingestion service first "
                                   f"(watchtower ingest serve), or set {ENV_SCHEDULER} to its address") from None
            time.sleep(0.5)


#: What the KEK wraps the ingestion publisher seed for (bound into the wrap's AAD).
PUBLISHER_PURPOSE: Final = "ingestion-publisher-key"
ENV_INGEST_KEK_FILE: Final = "WATCHTOWER_INGEST_KEK_FILE"


def ingestion_publisher_key(home: Path | None = None, kek: Kek | None = None) -> nacl.signing.SigningKey:
    """The ingestion publisher key (module docstring), created on first use; wrapped under `kek`,
    else under the KEK of the environment when one is configured."""
    directory = (home or watchtower_home()) / "ingest"
    kek = kek if kek is not None else _kek_from_env()
    wrapped = directory / "publisher.key.wrapped"
    if kek is None:
        if wrapped.exists():
            raise KeyFileError(f"the ingestion publisher key in {wrapped} is wrapped under the ingestion KEK; "
                               f"set {ENV_INGEST_KEK_FILE} to its file (watchtower up uses genesis/ingest-kek.key)")
        key = _load_or_create(directory / "publisher.key")
    else:
        key = _load_or_create_wrapped(wrapped, directory / "publisher.key", kek)
    _write_public(directory / "publisher.pub", key)
    return key


def ingestion_publisher_public_key(home: Path | None = None) -> bytes:
    """The ingestion publisher key's public half, readable without the KEK."""
    directory = (home or watchtower_home()) / "ingest"
    try:
        return bytes.fromhex((directory / "publisher.pub").read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return bytes(ingestion_publisher_key(home).verify_key)


def _kek_from_env() -> Kek | None:
    path = os.environ.get(ENV_INGEST_KEK_FILE)
    if not path:
        return None
    try:
        return read_kek_file(Path(path))
    except KekError as exc:
        raise KeyFileError(f"the ingestion publisher key cannot be opened ({ENV_INGEST_KEK_FILE}): {exc}") from None


def _load_or_create_wrapped(wrapped: Path, plain: Path, kek: Kek) -> nacl.signing.SigningKey:
    # As _load_or_create: exactly one of several starting processes writes the file (O_EXCL).
    for _ in range(50):
        try:
            sealed = bytes.fromhex(wrapped.read_text(encoding="ascii").strip())
        except FileNotFoundError:
            try:
                key = read_key_file(plain)  # a plain key from before: wrap it, then remove it
            except AccountNotFoundError:
                key = nacl.signing.SigningKey.generate()
            try:
                _write_private(wrapped, kek.wrap(PUBLISHER_PURPOSE, "ingest", bytes(key)).hex())
            except FileExistsError:
                continue
            plain.unlink(missing_ok=True)
            return key
        except ValueError:  # being written by another process
            time.sleep(0.1)
            continue
        if not sealed:  # created by another process, not written yet
            time.sleep(0.1)
            continue
        try:
            return nacl.signing.SigningKey(kek.unwrap(PUBLISHER_PURPOSE, "ingest", sealed))
        except KekError as exc:
            raise KeyFileError(f"{wrapped}: {exc}") from None
    raise KeyFileError(f"{wrapped} does not hold a wrapped key; move it away and start again")


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (text + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_public(path: Path, key: nacl.signing.SigningKey) -> None:
    public = bytes(key.verify_key).hex()
    try:
        if path.read_text(encoding="ascii").strip() == public:
            return
    except OSError:
        pass
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(public + "\n", encoding="ascii")
    tmp.replace(path)


def runner_key(name: str, home: Path | None = None) -> nacl.signing.SigningKey:
    return _load_or_create((home or watchtower_home()) / "runners" / f"{require_name(name, 'runner name')}.key")
