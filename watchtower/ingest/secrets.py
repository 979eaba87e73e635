"""The secrets a runner holds, which task definitions name by reference (``{"secret": NAME}``).

A task definition is public, so a credential header names a secret instead of carrying it
(`protocol.ingestion`). Each runner resolves the name from ``WATCHTOWER_INGEST_SECRETS_DIR``: a
directory holding one file per secret, named NAME, whose whole content (one line; a final newline
is dropped) is the header's value. A file any group or other user may read or write is refused, as
the key files are. A name the runner does not hold is the task's SOURCE_UNAVAILABLE, whose detail
names the secret, never a value.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

from watchtower.ingest.fetch import FetchError
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.ingestion import IngestReason, SecretRef, require_secret_name

ENV_SECRETS_DIR: Final = "WATCHTOWER_INGEST_SECRETS_DIR"
MAX_SECRET_BYTES: Final = 8 * 1024


class SecretStore:
    """Secrets by name from `directory` (None: this runner holds none). Read at each use, so a
    rotated file takes effect on the next fetch."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    @classmethod
    def from_env(cls) -> SecretStore:
        raw = os.environ.get(ENV_SECRETS_DIR)
        return cls(Path(raw) if raw else None)

    def get(self, name: str) -> str:
        """The value of secret `name`, else FetchError(SOURCE_UNAVAILABLE) naming it."""
        try:
            require_secret_name(name)
        except InvalidArgumentError as exc:
            raise FetchError(IngestReason.SOURCE_UNAVAILABLE, exc.message) from None
        if self.directory is None:
            raise _missing(name, f"this runner holds no secrets (set {ENV_SECRETS_DIR})")
        path = self.directory / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # never a FIFO's wait
        except OSError:
            raise _missing(name, f"this runner does not hold it (add the file {name} to its "
                                 f"{ENV_SECRETS_DIR})") from None
        with os.fdopen(fd, "rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            if not stat.S_ISREG(mode) or mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise _missing(name, f"its file must be a regular file readable by its owner only (chmod 600 {name})")
            raw = file.read(MAX_SECRET_BYTES + 1)
        try:
            value = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
        except UnicodeDecodeError:
            value = "\n"
        if len(raw) > MAX_SECRET_BYTES or not value or not value.isprintable():
            raise _missing(name, f"its file must hold one line of printable text of at most {MAX_SECRET_BYTES} bytes")
        return value

    def resolve(self, headers: tuple[tuple[str, str | SecretRef], ...]) -> tuple[dict[str, str], tuple[str, ...]]:
        """The request headers with every reference resolved, and the names of those that were."""
        out, private = {}, []
        for name, value in headers:
            if isinstance(value, SecretRef):
                out[name] = self.get(value.name)
                private.append(name)
            else:
                out[name] = value
        return out, tuple(private)


def _missing(name: str, why: str) -> FetchError:
    return FetchError(IngestReason.SOURCE_UNAVAILABLE, f"the secret {name!r} cannot be used: {why}")
