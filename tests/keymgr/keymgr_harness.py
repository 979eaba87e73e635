"""A stack (broker, stream worker, API) plus the Stream Key Manager process, and a signed-request client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from api_calls import http
from kafka_fixture import free_ports
from stack_fixture import start_stack

from watchtower.keymgr.kek import Kek, new_kek_text
from watchtower.local.stack import ServiceSet
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.signed_command import sign_command

ROUTES = {"stream_encrypt": "encrypt", "stream_decrypt": "decrypt", "fetch_epoch_keys": "epoch-keys"}


def addr(key: nacl.signing.SigningKey) -> str:
    return address_from_public_key(bytes(key.verify_key))


class KeymgrClient:
    """Signs key-manager requests with the caller's microsecond clock as the nonce."""

    def __init__(self, url: str, key: nacl.signing.SigningKey) -> None:
        self.url, self.key, self._last = url, key, 0

    def nonce(self) -> int:
        self._last = max(self._last + 1, time.time_ns() // 1_000)
        return self._last

    def call(self, method: str, stream_id: str, body: dict[str, Any], nonce: int | None = None) -> tuple[int, Any]:
        cmd = sign_command(self.key, method, stream_id, self.nonce() if nonce is None else nonce, body)
        return http("POST", f"{self.url}/v1/keymgr/{ROUTES[method]}", {"command": cmd.to_dict()})


@contextmanager
def keymgr_stack(
    bootstrap: str, log_dir: Path, *, gateway: bool = False, minter: str | None = None
) -> Iterator[tuple[ServiceSet, Path, Kek]]:
    """Workers that trust the key manager's receipt key (and `minter` as the CBY minter), the API,
    and the key manager itself."""
    log_dir.mkdir(parents=True, exist_ok=True)
    kek_file = log_dir / "kek.key"
    kek_file.write_text(new_kek_text())
    kek_file.chmod(0o600)
    kek = Kek(bytes.fromhex(kek_file.read_text()))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WATCHTOWER_KEYMGR_PUBLIC_KEY", kek.receipt_public_key().hex())
        if minter is not None:
            env.setenv("WATCHTOWER_CBY_MINTER", minter)
        with start_stack(bootstrap, log_dir, gateway=gateway) as services:
            services.start_keymgr(free_ports(1)[0], kek_file)
            services.wait_keymgr()
            yield services, kek_file, kek
