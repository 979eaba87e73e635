"""A request the key manager refuses for its own reason (NOT_READY) keeps its nonce, and health says so.

Pure: the key manager's HTTP app served in-process over a folded view (the ledger's own decide
and evolve, `ledger_world`) whose catch-up is made to fail, as a broker that does not answer the
end offsets makes it fail. No broker: what a real broker restart does to the key manager is
pinned by tests/workers/test_broker_restart.py.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import nacl.public
import nacl.signing
from aiohttp.test_utils import TestClient, TestServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))

from ledger_world import ALICE, BOB, SID, World, addr

from watchtower.keymgr.follower import Readiness
from watchtower.keymgr.http import build_app
from watchtower.keymgr.kek import Kek
from watchtower.keymgr.service import KeyManager
from watchtower.protocol.confidential.envelope import unwrap_epoch_key
from watchtower.protocol.errors import NotReadyError
from watchtower.protocol.ledger.common import account_instance
from watchtower.protocol.ledger.keymgr_access import KeymgrState
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.stream.state import StreamState

NOW_US = 1_790_000_000_000_000
ALICE_X25519 = nacl.public.PrivateKey(b"\x51" * 32)
KEYS = "/v1/keymgr/epoch-keys"
BROKER_DOWN = "the broker did not answer the events topic's end offsets (FENCED_LEADER_EPOCH); retry"


class FlakyFold:
    """A folded view whose catch-up fails while `failing` names a reason, as the follower's does
    while the broker does not answer; `gate`, when set, holds a catch-up until it opens."""

    def __init__(self, keymgr: KeymgrState) -> None:
        self.keymgr = keymgr
        self.streams: dict[str, StreamState] = {}
        self.quarantined = 0
        self.failing: str | None = None
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self._lock = threading.RLock()

    def catch_up(self, timeout_s: float = 30.0) -> None:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(timeout_s), "the test never opened the gate"
        if self.failing is not None:
            raise NotReadyError(self.failing)

    def reading(self) -> AbstractContextManager[object]:
        return self._lock

    def readiness(self) -> Readiness:
        return Readiness(self.failing is None, self.failing)


class MemorySeeds:
    def __init__(self) -> None:
        self.sealed_streams: dict[str, str] = {}

    def next_actor_nonce(self) -> int:
        return 1

    def seed_for(self, stream_id: str) -> bytes:
        return stream_id.encode().ljust(32, b"\x5e")[:32]


class NoAudit:
    def record(self, action: str, **_fields: Any) -> None:
        pass


def entitled_fold() -> FlakyFold:
    """Alice holds key epochs 10..12 of SID and an ACTIVE X25519 key."""
    world = World()
    world.register_paid_stream()
    world.mint(ALICE, 100_000)
    assert world.acquire(ALICE, 12)["ok"]
    world.send(world.sign(ALICE, "register_account_key", account_instance(addr(ALICE)),
                          {"scheme": "X25519", "public_key": bytes(ALICE_X25519.public_key)}))
    return FlakyFold(world.view())


def manager_over(fold: FlakyFold) -> KeyManager:
    return KeyManager(MemorySeeds(), fold, Kek(b"\x4b" * 32), NoAudit(), clock_us=lambda: NOW_US)  # type: ignore[arg-type]


def key_request(signer: nacl.signing.SigningKey, nonce: int = NOW_US) -> dict[str, Any]:
    body = {"account": addr(signer), "from_key_epoch": 10, "to_key_epoch": 12}
    return {"command": sign_command(signer, "fetch_epoch_keys", SID, nonce, body).to_dict()}


async def _post(client: TestClient, payload: dict[str, Any]) -> tuple[int, Any]:
    resp = await client.post(KEYS, json=payload)
    return resp.status, await resp.json()


async def _health(client: TestClient) -> dict[str, Any]:
    resp = await client.get("/v1/health")
    assert resp.status == 200
    body: dict[str, Any] = await resp.json()
    return body


def serve(manager: KeyManager, scenario: Any) -> Any:
    async def run() -> Any:
        async with TestClient(TestServer(build_app(manager))) as client:
            return await scenario(client)

    return asyncio.run(run())


def test_a_request_refused_as_not_ready_keeps_its_nonce_and_the_same_request_succeeds_once_ready() -> None:
    fold = entitled_fold()
    request = key_request(ALICE)

    async def scenario(client: TestClient) -> list[tuple[int, Any]]:
        fold.failing = BROKER_DOWN
        refused = await _post(client, request)
        refused_again = await _post(client, request)
        fold.failing = None
        served = await _post(client, request)
        replayed = await _post(client, request)
        return [refused, refused_again, served, replayed]

    refused, refused_again, served, replayed = serve(manager_over(fold), scenario)
    for status, body in (refused, refused_again):
        assert (status, body["error"]["code"]) == (503, "NOT_READY"), body
    assert served[0] == 200, served
    assert [k["key_epoch"] for k in served[1]["keys"]] == [10, 11, 12]
    for sealed in served[1]["keys"]:
        assert len(unwrap_epoch_key(bytes.fromhex(sealed["sealed_key_hex"]), bytes(ALICE_X25519))) == 32
    # Once answered, the nonce is spent: the same request is a replay.
    assert (replayed[0], replayed[1]["error"]["code"]) == (409, "NONCE_REPLAYED"), replayed


def test_a_refusal_for_the_request_own_reason_spends_its_nonce() -> None:
    """Bob has no entitlement: ENTITLEMENT_REQUIRED is an answer, and the same request is then a replay."""
    request = key_request(BOB)

    async def scenario(client: TestClient) -> list[tuple[int, Any]]:
        return [await _post(client, request), await _post(client, request)]

    first, second = serve(manager_over(entitled_fold()), scenario)
    assert first[1]["error"]["code"] == "ENTITLEMENT_REQUIRED", first
    assert second[1]["error"]["code"] == "NONCE_REPLAYED", second


def test_a_nonce_in_flight_is_not_accepted_twice() -> None:
    """Releasing a nonce on NOT_READY opens no window: while the first request runs, its copy is a replay."""
    fold = entitled_fold()
    fold.gate = threading.Event()
    request = key_request(ALICE)

    async def scenario(client: TestClient) -> list[tuple[int, Any]]:
        first = asyncio.ensure_future(_post(client, request))
        entered = await asyncio.to_thread(fold.entered.wait, 30)
        assert entered, "the first request never reached its catch-up"
        copy = await _post(client, request)
        assert fold.gate is not None
        fold.gate.set()
        return [await first, copy]

    first, copy = serve(manager_over(fold), scenario)
    assert first[0] == 200, first
    assert (copy[0], copy[1]["error"]["code"]) == (409, "NONCE_REPLAYED"), copy


def test_health_is_not_ready_with_the_reason_while_reads_fail() -> None:
    fold = entitled_fold()

    async def scenario(client: TestClient) -> list[dict[str, Any]]:
        fold.failing = BROKER_DOWN
        down = await _health(client)
        fold.failing = None
        return [down, await _health(client)]

    down, up = serve(manager_over(fold), scenario)
    assert (down["ok"], down["ready"], down["reason"]) == (True, False, BROKER_DOWN), down
    assert (up["ok"], up["ready"]) == (True, True), up
    assert "reason" not in up
