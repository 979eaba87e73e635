"""Account keys of paid feeds: X25519 key pairs that epoch keys are sealed to, kept under ``$WATCHTOWER_HOME``.

Layout (every directory 0700, every file 0600, as for the ed25519 keys in `client.account`)::

    account-keys/<account>.<id>.x25519        the private key of registered account key <id>, 64 hex digits
    account-keys/<account>.pending.x25519     a fresh key whose registration is not acknowledged yet
    epoch-keys/<account>/<stream_id>.json     sealed epoch keys fetched for that account (still sealed)

``<account>`` is the account's name (its key file's stem), or its address for an unnamed account.
The key manager seals every epoch key to the account's registered X25519 public key
(libsodium sealed box), so only the holder of the private key here can open it; the sealed boxes
are stored as they came, so an epoch key is never written to disk in clear. No text produced here
ever contains a private key or an epoch key.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from pathlib import Path
from typing import Any, Final

import nacl.public

from watchtower.client.account import Account, AccountNotFoundError, KeyFileError, require_name
from watchtower.protocol.confidential.envelope import unwrap_epoch_key
from watchtower.protocol.constants import X25519_PUBLIC_KEY_BYTES
from watchtower.protocol.errors import InvalidArgumentError

ACCOUNT_KEYS_DIR: Final = "account-keys"
EPOCH_KEYS_DIR: Final = "epoch-keys"
KEY_SUFFIX: Final = ".x25519"
PENDING: Final = "pending"
_DIR_MODE: Final = 0o700
_FILE_MODE: Final = 0o600


def account_label(account: Account) -> str:
    """The file-name stem of `account`'s paid-feed files: its name, else its address."""
    return require_name(account.name or account.address, "account name")


def account_key_path(account: Account, account_key_id: int | str) -> Path:
    """Where the X25519 private key of `account`'s registered key `account_key_id` (or ``"pending"``) lives."""
    ident = str(account_key_id)
    if ident != PENDING and not ident.isdigit():
        raise InvalidArgumentError(f"account_key_id must be a positive integer, got {account_key_id!r}")
    return account.home / ACCOUNT_KEYS_DIR / f"{account_label(account)}.{ident}{KEY_SUFFIX}"


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, _DIR_MODE)  # mkdir's mode passes through the umask; an existing dir keeps its own
    return path


def write_private_file(path: Path, data: bytes) -> Path:
    """Write `data` to `path` with mode 0600 in a 0700 directory, atomically (temp file + rename)."""
    _private_dir(path.parent)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _FILE_MODE)
    try:
        os.fchmod(fd, _FILE_MODE)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def new_pending_key(account: Account) -> tuple[nacl.public.PrivateKey, Path]:
    """A fresh X25519 key pair, stored as the account's pending key before it is registered.

    Stored first, so an acknowledged registration never leaves its private key unsaved.
    """
    key = nacl.public.PrivateKey.generate()
    path = write_private_file(account_key_path(account, PENDING), bytes(key).hex().encode() + b"\n")
    return key, path


def commit_pending_key(account: Account, account_key_id: int) -> Path:
    """Rename the pending key to the id its registration was given; returns the final path."""
    pending = account_key_path(account, PENDING)
    final = account_key_path(account, account_key_id)
    _private_dir(final.parent)
    os.replace(pending, final)
    return final


def read_private_key(path: Path) -> nacl.public.PrivateKey:
    """The X25519 private key in `path`; ACCOUNT_NOT_FOUND / KEY_FILE_INVALID naming the file and the fix."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise AccountNotFoundError(
            f"no account key at {path}; register one with `watchtower account keys add` (as this account)"
        ) from None
    except (OSError, UnicodeDecodeError):
        raise KeyFileError(f"cannot read account key file {path}; make it readable by you (`chmod 600 {path}`)") \
            from None
    if len(text) != X25519_PUBLIC_KEY_BYTES * 2 or re.fullmatch(r"[0-9a-fA-F]+", text) is None:
        raise KeyFileError(f"account key file {path} is corrupt: it must hold one line of 64 hex digits "
                           f"(an X25519 private key); revoke that key and register a new one")
    return nacl.public.PrivateKey(bytes.fromhex(text))


def load_account_key(account: Account, account_key_id: int) -> nacl.public.PrivateKey:
    """The private half of `account`'s registered key `account_key_id`."""
    return read_private_key(account_key_path(account, account_key_id))


def local_account_key_ids(account: Account) -> list[int]:
    """Ids of the registered keys whose private half this machine holds, ascending."""
    directory = account.home / ACCOUNT_KEYS_DIR
    prefix = account_label(account) + "."
    ids = []
    for path in directory.glob(f"*{KEY_SUFFIX}") if directory.is_dir() else []:
        middle = path.name[len(prefix):-len(KEY_SUFFIX)] if path.name.startswith(prefix) else ""
        if middle.isdigit():
            ids.append(int(middle))
    return sorted(ids)


# --- Sealed epoch keys at rest --------------------------------------------------------------------


def sealed_keys_path(account: Account, stream_id: str) -> Path:
    """Where the sealed epoch keys fetched for (`account`, `stream_id`) are kept."""
    return account.home / EPOCH_KEYS_DIR / account_label(account) / f"{require_name(stream_id, 'stream id')}.json"


def load_sealed_keys(account: Account, stream_id: str) -> dict[int, tuple[int, bytes]]:
    """key_epoch -> (account_key_id, sealed box) as stored by `store_sealed_keys` (empty if none or unreadable)."""
    try:
        data = json.loads(sealed_keys_path(account, stream_id).read_text())
        return {int(epoch): (int(entry["account_key_id"]), bytes.fromhex(entry["sealed_key_hex"]))
                for epoch, entry in data.get("keys", {}).items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}  # a cache: anything unreadable is simply fetched again


def store_sealed_keys(account: Account, stream_id: str, sealed: dict[int, tuple[int, bytes]]) -> Path:
    """Merge `sealed` (key_epoch -> (account_key_id, sealed box)) into the stored sealed keys.

    Under an exclusive lock on the store, so two processes filling it at once (two `wrap-daemon`s,
    a daemon and a reader) never lose each other's keys or trip over each other's temporary file."""
    path = sealed_keys_path(account, stream_id)
    _private_dir(account.home / EPOCH_KEYS_DIR)  # the store's root too, not only the account's directory
    _private_dir(path.parent)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, _FILE_MODE)
    os.fchmod(fd, _FILE_MODE)  # a lock file an earlier release made 0644
    with os.fdopen(fd, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged = {**load_sealed_keys(account, stream_id), **sealed}
        body: dict[str, Any] = {"stream_id": stream_id, "account": account.address,
                                "keys": {str(e): {"account_key_id": k, "sealed_key_hex": box.hex()}
                                         for e, (k, box) in sorted(merged.items())}}
        return write_private_file(path, (json.dumps(body, indent=1) + "\n").encode())


def open_sealed_key(account: Account, account_key_id: int, sealed: bytes) -> bytes:
    """The 32-byte epoch key inside `sealed`, opened with the account's key `account_key_id`.

    DECRYPTION_FAILED when the box was not sealed to that key; ACCOUNT_NOT_FOUND when this machine
    does not hold the private half.
    """
    return unwrap_epoch_key(sealed, bytes(load_account_key(account, account_key_id)))
