"""Tiny HTTP helpers for integration tests that drive the API with hand-signed commands."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import nacl.signing
from waiting import wait_until

from watchtower.protocol.signed_command import sign_command


def http(method: str, url: str, body: object | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(  # noqa: S310 (tests call the local API over http)
        url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Caller:
    """An account that signs commands with strictly increasing nonces and posts them."""

    def __init__(self, api: str, key: nacl.signing.SigningKey | None = None) -> None:
        self.api = api
        self.key = key or nacl.signing.SigningKey.generate()
        self.nonce = 0

    def call(self, method: str, stream_id: str, body: dict[str, Any]) -> tuple[int, Any]:
        self.nonce += 1
        cmd = sign_command(self.key, method, stream_id, self.nonce, body)
        return http("POST", f"{self.api}/v1/commands", {"command": cmd.to_dict()})

    def ok(self, method: str, stream_id: str, body: dict[str, Any]) -> dict[str, Any]:
        status, reply = self.call(method, stream_id, body)
        assert status == 200, reply
        return reply["result"]


def wait_for(predicate: Any, timeout_s: float = 60.0, what: str = "condition") -> Any:
    return wait_until(what, predicate, timeout_s=timeout_s, every_s=0.2)
