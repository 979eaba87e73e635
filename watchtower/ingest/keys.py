"""Ingestion's ed25519 identities, as key files under the Watchtower home (0600 in a 0700 dir):

- ``ingest/scheduler.key`` signs tasks (runners and the aggregator trust only its address);
- ``ingest/publisher.key`` is the key owners delegate publishing to (`ingestion_publisher_key`);
- ``runners/<name>.key`` is a runner's identity.

Each is created on first use. Key material is never printed or logged; only addresses are.
"""

from __future__ import annotations

import time
from pathlib import Path

import nacl.signing

from watchtower.client.account import (
    AccountExistsError,
    AccountNotFoundError,
    KeyFileError,
    read_key_file,
    require_name,
    write_key_file,
)
from watchtower.client.home import watchtower_home


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
    return _load_or_create((home or watchtower_home()) / "ingest" / "scheduler.key")


def ingestion_publisher_key(home: Path | None = None) -> nacl.signing.SigningKey:
    return _load_or_create((home or watchtower_home()) / "ingest" / "publisher.key")


def runner_key(name: str, home: Path | None = None) -> nacl.signing.SigningKey:
    return _load_or_create((home or watchtower_home()) / "runners" / f"{require_name(name, 'runner name')}.key")
