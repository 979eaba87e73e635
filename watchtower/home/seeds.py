"""ed25519 seed files: one line of 64 hex digits, mode 0600, in a 0700 directory.

Accounts (`watchtower.client.account`), ingestion's identities (`watchtower.ingest.keys`) and the
genesis keys are all such files. A file is written once (``O_EXCL``: keys are never overwritten,
unless asked, and then through a temporary file and a rename) and read back with errors that name
the file and the fix, never its content.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

import nacl.signing

from watchtower.protocol.constants import ED25519_SEED_BYTES
from watchtower.protocol.errors import InvalidArgumentError, WatchtowerError

_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_DIR_MODE: Final = 0o700
_KEY_MODE: Final = 0o600


class AccountNotFoundError(WatchtowerError):
    """No key file where the account (or actor, or publisher key) should be."""

    CODE = "ACCOUNT_NOT_FOUND"
    DEFAULT_MESSAGE = "No account key file was found; create one with `watchtower account new`."


class AccountExistsError(WatchtowerError):
    """Creating an account or actor whose key file already exists (keys are never overwritten)."""

    CODE = "ACCOUNT_EXISTS"
    DEFAULT_MESSAGE = "An account with that name already exists; pick another name."


class KeyFileError(WatchtowerError):
    """A key file exists but cannot be read or does not hold a seed."""

    CODE = "KEY_FILE_INVALID"
    DEFAULT_MESSAGE = "The key file is unreadable or corrupt; restore it from a backup or create a new account."


def require_name(name: str, what: str = "account name") -> str:
    """`name` if it is a safe file name (letters, digits, ``.``, ``_``, ``-``; 1-64), else INVALID_ARGUMENT."""
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None:
        raise InvalidArgumentError(
            f"{what} {name!r} must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    # mkdir's mode is filtered by the umask, and an existing directory keeps its mode.
    os.chmod(path, _DIR_MODE)
    return path


def write_key_file(path: Path, signing_key: nacl.signing.SigningKey, *, overwrite: bool = False) -> Path:
    """Write the seed of `signing_key` to `path` as hex, mode 0600, in a 0700 directory.

    Refuses (ACCOUNT_EXISTS) to replace an existing file unless `overwrite`; a replacement is
    written to a temporary file and renamed, so a crash never leaves a half-written key.
    """
    _private_dir(path.parent)
    data = (bytes(signing_key).hex() + "\n").encode()
    target = path.with_name(path.name + ".tmp") if overwrite else path
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(target, flags | (os.O_TRUNC if overwrite else 0), _KEY_MODE)
    except FileExistsError:
        if overwrite:  # a leftover from a crashed write: it never held the only copy of a key
            target.unlink()
            fd = os.open(target, flags, _KEY_MODE)
        else:
            raise AccountExistsError(
                f"{path} already exists; keys are never overwritten. Pick another name, or move the old file away."
            ) from None
    try:
        os.fchmod(fd, _KEY_MODE)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    if overwrite:
        os.replace(target, path)
    return path


def read_key_file(
    path: Path, *, missing_hint: str = "create one with `watchtower account new`"
) -> nacl.signing.SigningKey:
    """The signing key stored in `path` (64 hex digits, surrounding whitespace ignored).

    ACCOUNT_NOT_FOUND (with `missing_hint`) when the file does not exist; KEY_FILE_INVALID naming
    the file and the fix when it cannot be read or does not hold a 32-byte seed.
    """
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise AccountNotFoundError(f"no key file at {path}; {missing_hint}") from None
    except PermissionError:
        raise KeyFileError(
            f"cannot read key file {path} (permission denied); make it readable by you (`chmod 600 {path}`)"
        ) from None
    except IsADirectoryError:
        raise KeyFileError(f"key file {path} is a directory; point at the .key file inside it") from None
    except (OSError, UnicodeDecodeError):
        raise KeyFileError(
            f"key file {path} is unreadable or not text; it must hold one line of {ED25519_SEED_BYTES * 2} hex "
            f"digits. Restore it from a backup, or create a new account with `watchtower account new`."
        ) from None
    if len(text) != ED25519_SEED_BYTES * 2 or re.fullmatch(r"[0-9a-fA-F]+", text) is None:
        raise KeyFileError(
            f"key file {path} is corrupt: it must hold one line of {ED25519_SEED_BYTES * 2} hex digits "
            f"(an ed25519 seed). Restore it from a backup, or create a new account with `watchtower account new`."
        )
    return nacl.signing.SigningKey(bytes.fromhex(text))
