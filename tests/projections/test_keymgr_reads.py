"""The key manager's reads on a real stack of two projection workers, before any CBY moves.

Two workers split the partitions, so a read of a key another worker owns is routed there, and the
supply (which needs every partition's balances) is summed from both workers' shares. Also: the key
epoch schedule of a stream, the refusals with their spec codes, and the keymgr digest of the live
workers against an offline rebuild.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import nacl.signing
import pytest
from api_calls import Caller, http, wait_for
from stack_fixture import start_stack
from test_keymgr_fold import ALICE, BOB, PUBLISHER, SID, TREASURY, ledger_history
from test_keymgr_rebuild import write_events

from watchtower.local.stack import ServiceSet
from watchtower.projections.keymgr_tables import KEYMGR_TABLES
from watchtower.projections.rebuild import rebuild_digest, rebuild_keymgr_digest
from watchtower.schemas.wire import encode_event

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_workers(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceSet]:
    with start_stack(kafka_bootstrap, tmp_path_factory.mktemp("keymgr-reads"), partitions=4,
                     projections=2) as services:
        wait_for(lambda: all(_serves_share(u) for u in _projection_urls(services)), timeout_s=120,
                 what="both projection workers to serve a share of the partitions")
        yield services


def _projection_urls(stack: ServiceSet) -> list[str]:
    return [url for name, url in stack.urls.items() if name.startswith("projection-")]


def _serves_share(url: str) -> bool:
    status, body = http("GET", f"{url}/v1/health")
    return status == 200 and bool(body["ready"]) and bool(body["partitions"])


def _address() -> str:
    return "0x" + bytes(nacl.signing.SigningKey.generate().verify_key).hex()


def _stream(api: str) -> tuple[Caller, str]:
    owner = Caller(api)
    sid = f"ke-{uuid.uuid4().hex[:10]}"
    owner.ok("create_stream", sid, {"publisher_key_hex": bytes(nacl.signing.SigningKey.generate().verify_key).hex()})
    return owner, sid


def test_the_key_epoch_schedule_lists_each_announced_epoch_once_on_every_worker(two_workers: ServiceSet) -> None:
    owner, sid = _stream(two_workers.api_url)
    blocks = [owner.ok("announce_key_epoch", sid, {"key_epoch": e})["effective_block_height"] for e in (3, 5, 5, 9)]

    def schedule(url: str) -> Any:
        status, body = http("GET", f"{url}/v1/streams/{sid}/key-epochs")
        return body if status == 200 and body["last_key_epoch"] == 9 else None

    for url in _projection_urls(two_workers):  # one owns the stream's partition, the other routes there
        body = wait_for(lambda u=url: schedule(u), what=f"the key epoch schedule at {url}")
        assert [(e["key_epoch"], e["effective_block_height"]) for e in body["epochs"]] == [
            (3, blocks[0]), (5, blocks[1]), (9, blocks[3])]
        assert {e["announced_by"] for e in body["epochs"]} == {"0x" + bytes(owner.key.verify_key).hex()}


def test_a_stream_without_announced_epochs_has_an_empty_schedule_and_an_unknown_one_is_not_found(
        two_workers: ServiceSet) -> None:
    _owner, sid = _stream(two_workers.api_url)
    body = wait_for(lambda: _ok(f"{two_workers.api_url}/v1/streams/{sid}/key-epochs"), what="the new stream")
    assert body == {"stream_id": sid, "epochs": [], "last_key_epoch": None}
    status, err = http("GET", f"{two_workers.api_url}/v1/streams/nope-{uuid.uuid4().hex}/key-epochs")
    assert (status, err["error"]["code"]) == (404, "STREAM_NOT_FOUND")


def _ok(url: str) -> Any:
    status, body = http("GET", url)
    return body if status == 200 else None


def test_an_unknown_account_reads_as_empty_on_every_worker_and_a_bad_address_is_refused(
        two_workers: ServiceSet) -> None:
    addresses = [_address() for _ in range(8)]  # spread over the partitions of both workers
    for url in _projection_urls(two_workers):
        for address in addresses:
            assert http("GET", f"{url}/v1/accounts/{address}") == (
                200, {"account": address, "balance_cby": 0, "keys": [], "authorizations": []})
    status, err = http("GET", f"{two_workers.api_url}/v1/accounts/0xNOTANADDRESS")
    assert (status, err["error"]["code"]) == (400, "INVALID_ARGUMENT")
    assert "64 lowercase hex" in err["error"]["message"]


def test_an_entitlement_of_a_stream_that_is_not_paid_is_not_platform_managed(two_workers: ServiceSet) -> None:
    _owner, sid = _stream(two_workers.api_url)
    for url in _projection_urls(two_workers):
        status, err = http("GET", f"{url}/v1/streams/{sid}/entitlements/{_address()}")
        assert (status, err["error"]["code"]) == (409, "NOT_PLATFORM_MANAGED_STREAM")
    status, err = http("GET", f"{two_workers.api_url}/v1/streams/{sid}/entitlements/not-an-address")
    assert (status, err["error"]["code"]) == (400, "INVALID_ARGUMENT")


def test_the_supply_sums_the_shares_of_both_workers_which_cover_every_partition(two_workers: ServiceSet) -> None:
    shares = [_ok(f"{url}/v1/cby/supply/local") for url in _projection_urls(two_workers)]
    assert all(shares)
    covered = [p for share in shares for p in share["partitions"]]
    assert sorted(covered) == [0, 1, 2, 3]
    assert all(share["partitions"] for share in shares)
    # Exactly one worker holds the supply's partition and says so with a number, the other with null.
    assert sorted(share["total_supply_cby"] is None for share in shares) == [False, True]
    for url in _projection_urls(two_workers):
        assert _ok(f"{url}/v1/cby/supply") == {"total_supply_cby": 0, "sum_of_balances_cby": 0, "accounts": 0}


def test_the_keymgr_digest_of_the_live_workers_equals_the_offline_rebuild(two_workers: ServiceSet) -> None:
    owner, sid = _stream(two_workers.api_url)
    owner.ok("announce_key_epoch", sid, {"key_epoch": 2})
    wait_for(lambda: _ok(f"{two_workers.api_url}/v1/streams/{sid}/key-epochs") and
             _ok(f"{two_workers.api_url}/v1/streams/{sid}/key-epochs")["last_key_epoch"] == 2,
             what="the announced epoch")
    offline = rebuild_keymgr_digest(two_workers.bootstrap, two_workers.prefix)
    assert set(offline["counts"]) == set(KEYMGR_TABLES)
    assert offline["counts"]["key_epochs"] >= 1
    assert rebuild_digest(two_workers.bootstrap, two_workers.prefix)["keymgr"] == offline
    # Each worker digests its own share; together they hold the whole schedule table.
    lives = [_ok(f"{url}/v1/keymgr/digest") for url in _projection_urls(two_workers)]
    assert sum(live["counts"]["key_epochs"] for live in lives) == offline["counts"]["key_epochs"]


def test_every_worker_reads_each_account_and_entitlement_from_its_owner_and_sums_the_supply_of_both(
        two_workers: ServiceSet) -> None:
    write_events(two_workers.bootstrap, two_workers.prefix,
                 [(e.stream_id, encode_event(e)) for e in ledger_history()], partitions=4)
    balances = {ALICE: 678, BOB: 300, PUBLISHER: 20, TREASURY: 2}
    urls = _projection_urls(two_workers)
    for url in urls:  # each account's instance lives on one worker; the other routes the read there
        for address, balance in balances.items():
            wait_for(lambda u=url, a=address, b=balance: _ok(f"{u}/v1/accounts/{a}")["balance_cby"] == b,
                     what=f"balance {balance} of {address} at {url}")
        body = _ok(f"{url}/v1/accounts/{ALICE}")
        assert [k["status"] for k in body["keys"]] == ["REVOKED", "ACTIVE"]
        assert _ok(f"{url}/v1/streams/{SID}/entitlements/{BOB}")["active_until_key_epoch"] == 6
        assert _ok(f"{url}/v1/cby/supply") == {"total_supply_cby": 1_000, "sum_of_balances_cby": 1_000,
                                               "accounts": 4}
    shares = [_ok(f"{url}/v1/cby/supply/local") for url in urls]
    assert sum(s["sum_of_balances_cby"] for s in shares) == 1_000
    assert sum(s["accounts"] for s in shares) == 4
