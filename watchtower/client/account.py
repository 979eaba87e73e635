"""Accounts, actors and publisher keys: ed25519 key files under ``$WATCHTOWER_HOME``.

Layout (``$WATCHTOWER_HOME`` defaults to ``~/.watchtower``; every directory 0700, every key 0600)::

    accounts/<name>.key              an account's 32-byte ed25519 seed, as 64 hex digits
    actors/<name>.key                an actor's seed
    actors/<name>.json               {"name", "address", "parent", "created_at_unix_ms"}
    publishers/<stream_id>.key       the active publisher (message-signing) key of a stream
    publishers/<stream_id>.<id>.key  a retired publisher key, kept after rotation

Which account signs (`resolve_account`): a flag beats the environment, and at each level a key
file path beats an account name:

1. ``--key-file PATH``  (passing ``--account`` too is an error)
2. ``--account NAME``
3. ``$WATCHTOWER_KEY_FILE``
4. ``$WATCHTOWER_ACCOUNT``
5. the account named ``default``

Nonces (DESIGN §4) come from a process-wide clock, ``max(last + 1, time_ns() // 1000)`` per
account: strictly increasing within a process, and because it is wall-clock microseconds, two CLI
invocations in a row never reuse one, with no lookup. (A wall clock stepped backwards between two
processes can still produce a used nonce; the API then answers NONCE_REPLAYED and a retry works.)

The seed files themselves are `watchtower.home.seeds` (read_key_file, write_key_file and their
errors, named here too). Seeds never leave these modules in any text: errors name the file and the
fix, never its content.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import nacl.signing

from watchtower.home.paths import watchtower_home
from watchtower.home.seeds import (
    AccountExistsError as AccountExistsError,
)
from watchtower.home.seeds import (
    AccountNotFoundError as AccountNotFoundError,
)
from watchtower.home.seeds import (
    KeyFileError as KeyFileError,
)
from watchtower.home.seeds import (
    read_key_file as read_key_file,
)
from watchtower.home.seeds import (
    require_name as require_name,
)
from watchtower.home.seeds import (
    write_key_file as write_key_file,
)
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.errors import InvalidArgumentError, WatchtowerError
from watchtower.protocol.signed_command import Command, sign_command

DEFAULT_ACCOUNT: Final = "default"
ENV_ACCOUNT: Final = "WATCHTOWER_ACCOUNT"
ENV_KEY_FILE: Final = "WATCHTOWER_KEY_FILE"
ACCOUNTS_DIR: Final = "accounts"
ACTORS_DIR: Final = "actors"
PUBLISHERS_DIR: Final = "publishers"
KEY_SUFFIX: Final = ".key"

_KEY_MODE: Final = 0o600


# --- Names and paths -----------------------------------------------------------------------------


def account_key_path(name: str, home: Path | None = None) -> Path:
    """Where the key of account `name` lives."""
    return (home or watchtower_home()) / ACCOUNTS_DIR / f"{require_name(name)}{KEY_SUFFIX}"


def actor_key_path(name: str, home: Path | None = None) -> Path:
    """Where the key of actor `name` lives (its metadata sits next to it as ``<name>.json``)."""
    return (home or watchtower_home()) / ACTORS_DIR / f"{require_name(name, 'actor name')}{KEY_SUFFIX}"


def publisher_key_path(stream_id: str, home: Path | None = None, *, signing_key_id: int | None = None) -> Path:
    """The active publisher key file of `stream_id`, or the retired one of `signing_key_id`."""
    sid = require_name(stream_id, "stream id")
    suffix = KEY_SUFFIX if signing_key_id is None else f".{int(signing_key_id)}{KEY_SUFFIX}"
    return (home or watchtower_home()) / PUBLISHERS_DIR / f"{sid}{suffix}"


# --- Nonces --------------------------------------------------------------------------------------


class NonceClock:
    """Strictly increasing nonces per address: ``max(last + 1, time_ns() // 1000)``. Thread-safe."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()

    def next(self, address: str) -> int:
        """A nonce greater than every nonce this clock has given `address`."""
        with self._lock:
            nonce = max(self._last.get(address, 0) + 1, time.time_ns() // 1000)
            self._last[address] = nonce
            return nonce


NONCES: Final = NonceClock()
"""The process-wide clock every `Account` draws from."""


# --- Accounts ------------------------------------------------------------------------------------


class Account:
    """An ed25519 identity that signs commands: an account, or an actor one created.

    `name` is the file stem (or None for an explicit key file outside the home), `key_file` where
    the seed lives, `parent` the creating account's address for an actor (None for an account).
    """

    def __init__(
        self,
        signing_key: nacl.signing.SigningKey,
        *,
        name: str | None = None,
        key_file: Path | None = None,
        parent: str | None = None,
        home: Path | None = None,
    ) -> None:
        self._signing_key = signing_key
        self.name = name
        self.key_file = key_file
        self.parent = parent
        self.home = home or watchtower_home()

    def __repr__(self) -> str:  # never the seed
        return f"Account(name={self.name!r}, address={self.address!r})"

    @property
    def signing_key(self) -> nacl.signing.SigningKey:
        """The ed25519 signing key (its seed is secret: never print or log it)."""
        return self._signing_key

    @property
    def public_key(self) -> bytes:
        """The 32-byte ed25519 public key."""
        return bytes(self._signing_key.verify_key)

    @property
    def address(self) -> str:
        """``0x`` + hex of the public key: what commands name as their caller."""
        return address_from_public_key(self.public_key)

    @property
    def is_actor(self) -> bool:
        """True for an actor (a program identity created by an account)."""
        return self.parent is not None

    def next_nonce(self) -> int:
        """The next nonce for this account from the process-wide clock (see the module docstring)."""
        return NONCES.next(self.address)

    def sign(self, method: str, stream_id: str, body: Mapping[str, Any], nonce: int | None = None) -> Command:
        """A command calling `method` on `stream_id`, signed by this account with `nonce` (default: the clock)."""
        return sign_command(self._signing_key, method, stream_id, self.next_nonce() if nonce is None else nonce, body)

    def describe(self) -> dict[str, Any]:
        """Public facts for display (``--json``): name, kind, address, public key, key file, parent."""
        return {
            "name": self.name,
            "kind": "actor" if self.is_actor else "account",
            "address": self.address,
            "public_key_hex": self.public_key.hex(),
            "key_file": str(self.key_file) if self.key_file else None,
            "parent": self.parent,
        }

    # --- Creating and loading --------------------------------------------------------------------

    @classmethod
    def create(cls, name: str = DEFAULT_ACCOUNT, *, home: Path | None = None) -> Account:
        """Generate a new account key and save it as ``accounts/<name>.key``; ACCOUNT_EXISTS if present."""
        root = home or watchtower_home()
        key = nacl.signing.SigningKey.generate()
        path = write_key_file(account_key_path(name, root), key)
        return cls(key, name=name, key_file=path, home=root)

    @classmethod
    def load(cls, name: str = DEFAULT_ACCOUNT, *, home: Path | None = None) -> Account:
        """The account saved as ``accounts/<name>.key``; ACCOUNT_NOT_FOUND / KEY_FILE_INVALID otherwise."""
        root = home or watchtower_home()
        path = account_key_path(name, root)
        hint = "create it with `watchtower account new" + ("`" if name == DEFAULT_ACCOUNT else f" {name}`")
        hint += " or pick another with --account NAME / --key-file PATH"
        return cls(read_key_file(path, missing_hint=hint), name=name, key_file=path, home=root)

    @classmethod
    def from_key_file(cls, path: Path | str, *, home: Path | None = None) -> Account:
        """The identity whose seed is in `path`; an actor when an ``actors/<name>.json`` sits next to it."""
        key_path = Path(path).expanduser()
        key = read_key_file(key_path, missing_hint="check the path given by --key-file or $WATCHTOWER_KEY_FILE")
        meta = _read_actor_meta(key_path.with_suffix(".json"))
        parent = meta.get("parent") if isinstance(meta.get("parent"), str) else None
        return cls(key, name=key_path.stem, key_file=key_path, parent=parent, home=home)

    @classmethod
    def load_actor(cls, name: str, *, home: Path | None = None) -> Account:
        """The actor saved as ``actors/<name>.key``."""
        root = home or watchtower_home()
        path = actor_key_path(name, root)
        if not path.exists():
            raise AccountNotFoundError(
                f"no actor key at {path}; create it with `watchtower account new-actor {name}`"
            )
        return cls.from_key_file(path, home=root)

    # --- Actors ----------------------------------------------------------------------------------

    def create_actor(self, name: str) -> Account:
        """Create actor `name` with a fresh key, recording this account's address as its parent.

        Writes ``actors/<name>.key`` (0600) and ``actors/<name>.json``; ACCOUNT_EXISTS if the name
        is taken. An actor may not create actors (it is a program identity, not a holder).
        """
        if self.is_actor:
            raise InvalidArgumentError(
                f"{self.name} is an actor; only an account can create actors. Use --account NAME to pick one."
            )
        key = nacl.signing.SigningKey.generate()
        path = write_key_file(actor_key_path(name, self.home), key)
        actor = Account(key, name=name, key_file=path, parent=self.address, home=self.home)
        meta = {
            "name": name,
            "address": actor.address,
            "parent": self.address,
            "created_at_unix_ms": time.time_ns() // 1_000_000,
        }
        meta_path = path.with_suffix(".json")
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        os.chmod(meta_path, _KEY_MODE)
        return actor

    def list_actors(self) -> list[dict[str, Any]]:
        """Metadata of the actors this account created, ordered by name (key files are not opened)."""
        directory = self.home / ACTORS_DIR
        found = []
        for meta_path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
            meta = _read_actor_meta(meta_path)
            if meta.get("parent") == self.address:
                found.append({**meta, "key_file": str(meta_path.with_suffix(KEY_SUFFIX))})
        return found


def _read_actor_meta(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def resolve_account(
    account: str | None = None,
    key_file: Path | str | None = None,
    *,
    home: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Account:
    """The account that signs, by the discovery order in the module docstring.

    `account` / `key_file` are the CLI flags; `env` defaults to ``os.environ``. Raises
    INVALID_ARGUMENT when both flags are given, ACCOUNT_NOT_FOUND / KEY_FILE_INVALID otherwise.
    """
    environ = os.environ if env is None else env
    if account and key_file:
        raise InvalidArgumentError("pass either --account NAME or --key-file PATH, not both")
    if key_file:
        return Account.from_key_file(key_file, home=home)
    if account:
        return Account.load(account, home=home)
    if environ.get(ENV_KEY_FILE):
        return Account.from_key_file(environ[ENV_KEY_FILE], home=home)
    return Account.load(environ.get(ENV_ACCOUNT) or DEFAULT_ACCOUNT, home=home)


def list_accounts(home: Path | None = None) -> list[dict[str, Any]]:
    """Every saved account, ordered by name: name, key file, and address or the reason it is unreadable."""
    directory = (home or watchtower_home()) / ACCOUNTS_DIR
    out: list[dict[str, Any]] = []
    for path in sorted(directory.glob(f"*{KEY_SUFFIX}")) if directory.is_dir() else []:
        entry: dict[str, Any] = {"name": path.stem, "key_file": str(path)}
        try:
            entry["address"] = address_from_public_key(bytes(read_key_file(path).verify_key))
        except WatchtowerError as err:
            entry["address"] = None
            entry["error"] = err.message
        out.append(entry)
    return out


def key_file_mode(path: Path) -> int:
    """The permission bits of `path` (e.g. 0o600)."""
    return stat.S_IMODE(path.stat().st_mode)


# --- Publisher keys ------------------------------------------------------------------------------


def save_publisher_key(stream_id: str, signing_key: nacl.signing.SigningKey, *, home: Path | None = None) -> Path:
    """Store `signing_key` as the active publisher key of `stream_id`; ACCOUNT_EXISTS if one is stored."""
    return write_key_file(publisher_key_path(stream_id, home), signing_key)


def load_publisher_key(stream_id: str, *, home: Path | None = None) -> nacl.signing.SigningKey:
    """The active publisher key of `stream_id` stored by `save_publisher_key`."""
    path = publisher_key_path(stream_id, home)
    return read_key_file(
        path,
        missing_hint=(
            f"this machine holds no publisher key for stream {stream_id} (feeds created here store one); "
            f"pass --publisher-key-file PATH"
        ),
    )


def replace_publisher_key(
    stream_id: str, new_key: nacl.signing.SigningKey, *, old_signing_key_id: int, home: Path | None = None
) -> Path:
    """Make `new_key` the active publisher key; keep the old one as ``<stream_id>.<old_id>.key``.

    Call it only after the rotation was acknowledged. Returns the path of the active key.
    """
    active = publisher_key_path(stream_id, home)
    if active.exists():
        retired = publisher_key_path(stream_id, home, signing_key_id=old_signing_key_id)
        if retired.exists():
            raise AccountExistsError(f"{retired} already exists; move it away and run the command again")
        os.replace(active, retired)
    return write_key_file(active, new_key)
